"""A SPLADE folder's sentence-transformers metadata: pooling, activation, max_active_dims, length, prompts.

Reads modules.json (an MLM Transformer, then SpladePooling), SpladePooling's config.json,
config_sentence_transformers.json, sentence_bert_config.json and tokenizer_config.json the way
sentence_transformers.SparseEncoder does, and refuses what is not a plain SPLADE model by name.
Like st_config.py it imports no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bertlite.errors import CheckpointError
from bertlite.jobs.st_config import read_max_length, read_model_json, read_sentence_transformers_prompts

SPLADE_POOLING = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")
SIMILARITY_FUNCTIONS = ("dot", "cosine", "euclidean", "manhattan")
# The input module of a SPLADE model: the legacy MLMTransformer, or Transformer with transformer_task fill-mask.
_MLM_MODULES = ("MLMTransformer", "Transformer")
EMBEDDER_HINT = "for dense sentence vectors load it with bertlite.Embedder"


@dataclass
class SpladeSettings:
    """What a SPLADE folder says (None: not said; sentence-transformers' defaults apply)."""

    pooling_strategy: str = "max"
    activation_function: str = "relu"
    max_active_dims: int | None = None
    max_length: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None


def read_splade_settings(
    name_or_path: str | os.PathLike, architectures: list[str], **hub_kwargs: Any
) -> SpladeSettings:
    """Read a SPLADE folder's settings, as sentence_transformers.SparseEncoder(name_or_path) reads them.

    A folder without modules.json is what SparseEncoder builds by default: with a ...ForMaskedLM
    architecture, MLM logits and SpladePooling("max").

    Args:
        name_or_path: a local folder or a hub id.
        architectures: config.json's architectures (the default modules depend on them).
        **hub_kwargs: hub options of bertlite.hub.resolve_file.

    Returns:
        The settings.

    Raises:
        CheckpointError: not a SPLADE model (a dense embedding model, an inference-free or CSR sparse
            model: a Router, SparseStaticEmbedding, SparseAutoEncoder module, ...), naming what it is.
        ValueError: malformed files or values.
    """
    settings = SpladeSettings()
    modules = read_model_json(name_or_path, "modules.json", hub_kwargs)
    st_config = read_model_json(name_or_path, "sentence_bert_config.json", hub_kwargs)
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    if not modules and not any(a.endswith("ForMaskedLM") for a in architectures):
        raise CheckpointError(
            f"{name_or_path} is not a SPLADE checkpoint: it has no MLM head weights (config.json architectures "
            f"{architectures or 'missing'}, no ...ForMaskedLM) and no modules.json; {EMBEDDER_HINT}"
        )
    if modules:
        _check_modules(name_or_path, kinds, st_config.get("transformer_task"))
        pooling = read_model_json(name_or_path, f"{modules[1].get('path', '')}/config.json".lstrip("/"), hub_kwargs)
        settings.pooling_strategy = _choice(name_or_path, pooling, "pooling_strategy", SPLADE_POOLING, "max")
        settings.activation_function = _choice(name_or_path, pooling, "activation_function", SPLADE_ACTIVATIONS, "relu")
    settings.max_length = read_max_length(name_or_path, hub_kwargs)
    config = read_model_json(name_or_path, "config_sentence_transformers.json", hub_kwargs)
    settings.max_active_dims = check_max_active_dims(config.get("max_active_dims"), f"{name_or_path}: max_active_dims")
    similarity = config.get("similarity_fn_name")
    if similarity is not None and similarity not in SIMILARITY_FUNCTIONS:
        raise ValueError(
            f"{name_or_path}: config_sentence_transformers.json similarity_fn_name={similarity!r} is not "
            f"implemented (supported: {', '.join(SIMILARITY_FUNCTIONS)})"
        )
    settings.similarity_fn_name = similarity
    settings.prompts, settings.default_prompt_name = read_sentence_transformers_prompts(name_or_path, **hub_kwargs)
    return settings


def check_max_active_dims(value: Any, name: str = "max_active_dims") -> int | None:
    """None, or an int >= 1 (sentence-transformers' rule).

    Raises:
        ValueError: naming `name` and the value.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer (or None for no limit), got {value!r}")
    return value


def _check_modules(name: str | os.PathLike, kinds: list[str], transformer_task: Any) -> None:
    """modules.json must be [MLM transformer, SpladePooling], as a plain SPLADE folder's."""
    for kind in kinds:
        if kind in ("Router", "SparseStaticEmbedding", "SparseAutoEncoder"):
            raise CheckpointError(
                f"{name}: modules.json has a {kind} module (an inference-free or CSR sparse model), which "
                "bertlite's SparseEncoder does not implement (supported: an MLM Transformer, then SpladePooling)"
            )
    mlm = kinds[:1] == ["MLMTransformer"] or (kinds[:1] == ["Transformer"] and transformer_task == "fill-mask")
    if kinds[1:] == ["SpladePooling"] and mlm:
        return
    if "SpladePooling" not in kinds:
        raise CheckpointError(
            f"{name} is not a SPLADE checkpoint: it has no MLM head weights (its modules.json has "
            f"{', '.join(kinds)}: a dense embedding model, no fill-mask Transformer nor SpladePooling); {EMBEDDER_HINT}"
        )
    raise CheckpointError(
        f"{name}: modules.json has {', '.join(kinds)}, which bertlite's SparseEncoder does not implement "
        "(supported: an MLMTransformer or fill-mask Transformer, then SpladePooling)"
    )


def _choice(name: str | os.PathLike, config: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise ValueError(f"{name}: SpladePooling {key}={value!r} must be one of {', '.join(allowed)}")
    return value
