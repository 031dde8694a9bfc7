"""sentence-transformers' SentenceTransformer.encode, batch size 32."""

from __future__ import annotations

from typing import Any

import torch

from bench.runners import BATCH_SIZE, Runner


def load_sentence_transformer(
    model_path: str, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> Any:
    """SentenceTransformer on `device`, in `dtype` as its users ask for half precision (model_kwargs).

    Args:
        model_path: the checkpoint folder (with its sentence-transformers config).
        device: where it runs.
        dtype: the model's dtype; None for the checkpoint's default.

    Returns:
        The SentenceTransformer.

    Raises:
        RuntimeError: the model did not load in `dtype`.
    """
    from sentence_transformers import SentenceTransformer

    from bench.runners.transformers import from_pretrained_dtype_keyword

    if dtype is None:
        return SentenceTransformer(model_path, device=str(device))
    model = SentenceTransformer(model_path, device=str(device), model_kwargs={from_pretrained_dtype_keyword(): dtype})
    loaded = next(model.parameters()).dtype
    if loaded != dtype:
        raise RuntimeError(f"asked sentence-transformers for {dtype}, it loaded {loaded}")
    return model


def sentence_transformers_runner(
    model_path: str, device: torch.device | str = "cpu", dtype: torch.dtype | None = None, batch_size: int = BATCH_SIZE
) -> Runner:
    """SentenceTransformer(model_path).encode.

    Args:
        model_path: the checkpoint folder (with its sentence-transformers config).
        device: where it runs.
        dtype: the model's dtype; None for the checkpoint's default.
        batch_size: texts per batch.

    Returns:
        The runner.
    """
    model = load_sentence_transformer(model_path, device, dtype)
    return lambda texts: model.encode(texts, batch_size=batch_size, show_progress_bar=False)
