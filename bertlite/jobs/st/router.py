"""Inference-free SPLADE: sentence-transformers' Router with a SparseStaticEmbedding query side.

Such a folder (the layout of opensearch-neural-sparse-encoding-doc-v2/v3) holds one Router module in modules.json;
router_config.json routes queries to a SparseStaticEmbedding (a weight per vocabulary entry, given to each token
the query holds: no model runs) and documents to an MLM Transformer and SpladePooling, each in its own subfolder.
read_router reads that layout; StaticSparseQuery computes the query side as SparseStaticEmbedding does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor

from bertlite.config import read_json_object
from bertlite.errors import CheckpointError
from bertlite.hub import resolve_file, resolve_optional_file
from bertlite.jobs.st.folders import (
    SPLADE_ACTIVATIONS,
    SPLADE_POOLING,
    check_max_active_dims,
    read_model_json,
    read_sentence_transformers_prompts,
)
from bertlite.tokenization import load_tokenizer

__all__ = ["RouterLayout", "StaticSparseQuery", "read_router", "read_router_settings"]

ROUTER = "Router"
STATIC = "SparseStaticEmbedding"
MLM_MODULES = ("Transformer", "MLMTransformer")


@dataclass(frozen=True)
class RouterLayout:
    """Where an inference-free SPLADE folder keeps its parts (subfolders), and the route encode() takes."""

    query: str  # the SparseStaticEmbedding's subfolder
    document: str  # the MLM Transformer's subfolder
    pooling: str  # the SpladePooling's subfolder
    default_route: str | None  # "query" or "document": the route of encode() without a task


def read_router(name_or_path: str | os.PathLike, hub_kwargs: dict[str, Any]) -> RouterLayout | None:
    """The Router layout of a SPLADE folder, or None when modules.json holds no Router.

    Args:
        name_or_path: a local folder or a hub id.
        hub_kwargs: resolve_file's hub options.

    Returns:
        The layout, or None.

    Raises:
        CheckpointError: a Router whose routes are not a SparseStaticEmbedding for queries and an MLM Transformer,
            then SpladePooling, for documents.
    """
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    if [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules] != [ROUTER]:
        return None
    config = read_model_json(name_or_path, f"{modules[0].get('path', '')}/router_config.json".lstrip("/"), hub_kwargs)
    types = {path: str(kind).rsplit(".", 1)[-1] for path, kind in (config.get("types") or {}).items()}
    structure = config.get("structure") or {}
    query, document = structure.get("query") or [], structure.get("document") or []
    kinds = {route: [types.get(path) for path in paths] for route, paths in structure.items()}
    if (
        set(structure) != {"query", "document"}
        or kinds["query"] != [STATIC]
        or len(document) != 2
        or kinds["document"][0] not in MLM_MODULES
        or kinds["document"][1] != "SpladePooling"
    ):
        raise CheckpointError(
            f"{name_or_path}: router_config.json routes {kinds}; bertlite's SparseEncoder implements a Router of "
            f"query: [{STATIC}], document: [MLM Transformer, SpladePooling] (inference-free SPLADE) only"
        )
    default_route = (config.get("parameters") or {}).get("default_route")
    return RouterLayout(query[0], document[0], document[1], default_route)


def read_router_settings(name_or_path: str | os.PathLike, router: RouterLayout, hub_kwargs: dict[str, Any]) -> dict:
    """What an inference-free SPLADE folder says beside its document model: the SpladePooling's settings (its
    subfolder's config.json) and, at the top, the prompts, similarity_fn_name and max_active_dims.

    Raises:
        ValueError: a pooling strategy or activation SpladePooling does not have, a bad max_active_dims.
    """
    pooling = read_model_json(name_or_path, f"{router.pooling}/config.json", hub_kwargs)
    settings: dict[str, Any] = {
        "pooling_strategy": pooling.get("pooling_strategy", "max"),
        "activation_function": pooling.get("activation_function", "relu"),
    }
    for key, allowed in (("pooling_strategy", SPLADE_POOLING), ("activation_function", SPLADE_ACTIVATIONS)):
        if settings[key] not in allowed:
            raise ValueError(
                f"{name_or_path}: SpladePooling {key}={settings[key]!r} must be one of {', '.join(allowed)}"
            )
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    settings["max_active_dims"] = check_max_active_dims(
        config.get("max_active_dims"), f"{name_or_path}: max_active_dims"
    )
    settings["similarity_fn_name"] = config.get("similarity_fn_name")
    settings["prompts"], settings["default_prompt_name"] = read_sentence_transformers_prompts(
        name_or_path, **hub_kwargs
    )
    return settings


class StaticSparseQuery:
    """The query side of inference-free SPLADE, as sentence-transformers' SparseStaticEmbedding computes it: each
    token the query holds (without special tokens, truncated at the tokenizer's model_max_length) gets its
    vocabulary entry's weight, once however often it occurs."""

    def __init__(self, weight: Tensor, tokenizer: Tokenizer) -> None:
        """
        Args:
            weight: (vocab_size,) float32 weights.
            tokenizer: the query tokenizer, truncating as it should (no padding).
        """
        self.weight = weight
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, subfolder: str, hub_kwargs: dict[str, Any]) -> StaticSparseQuery:
        """The SparseStaticEmbedding saved in `subfolder`: its model.safetensors ("weight") and tokenizer.

        Raises:
            CheckpointError: no model.safetensors, or one without a 1-D "weight".
        """
        from safetensors.torch import load_file

        kwargs = {**hub_kwargs, "subfolder": subfolder}
        path = resolve_file(name_or_path, "model.safetensors", **kwargs)
        weight = load_file(str(path)).get("weight") if path is not None else None
        if weight is None or weight.ndim != 1:
            raise CheckpointError(f"{name_or_path}/{subfolder}: no model.safetensors with a 1-D 'weight'")
        tokenizer = load_tokenizer(name_or_path, **kwargs)
        config_path = resolve_optional_file(name_or_path, "tokenizer_config.json", **kwargs)
        max_length = read_json_object(config_path).get("model_max_length") if config_path is not None else None
        if isinstance(max_length, int) and max_length < 10**9:  # transformers' "no limit" is a huge number
            tokenizer.enable_truncation(max_length)
        return cls(weight.float(), tokenizer)

    def encode(self, texts: list[str], device: torch.device) -> Tensor:
        """(n, vocab_size) dense float32 vectors of texts, on `device`."""
        rows = torch.zeros(len(texts), self.weight.shape[0])
        for row, encoding in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = torch.tensor(encoding.ids, dtype=torch.long)
            rows[row, ids] = self.weight[ids]
        return rows.to(device)
