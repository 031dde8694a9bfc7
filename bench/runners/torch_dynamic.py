"""torch.ao's dynamic int8 (quantize_dynamic) on bertlite's encoder Linears."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from bench.runners import Runner


def torch_dynamic_embedder(model_path: str, **embedder_kwargs: Any) -> Any:
    """An fp32 Embedder whose encoder Linears torch.ao's quantize_dynamic replaced (per-channel weights,
    per-tensor activations).

    Args:
        model_path: the checkpoint folder.
        embedder_kwargs: more Embedder.from_pretrained arguments (e.g. unpad=False).

    Returns:
        The Embedder.
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from bertlite import Embedder
    from bertlite.layers.onednn import restore

    embedder = Embedder.from_pretrained(model_path, dtype="float32", **embedder_kwargs)
    # quantize_dynamic swaps modules of exactly type nn.Linear; the Embedder's oneDNN Linears are a subclass.
    restore(embedder.model)
    with warnings.catch_warnings():  # torch.ao's deprecation notices
        warnings.simplefilter("ignore")
        quantize_dynamic(embedder.model.encoder, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return embedder


def torch_dynamic_int8_runner(model_path: str) -> Runner:
    """torch_dynamic_embedder's encode with Embedder's default batching.

    Args:
        model_path: the checkpoint folder.

    Returns:
        The runner.
    """
    embedder = torch_dynamic_embedder(model_path)
    return lambda texts: embedder.encode(texts, show_progress_bar=False)
