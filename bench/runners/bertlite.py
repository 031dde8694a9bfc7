"""bertlite's Embedder, with its default batching or a fixed batch size."""

from __future__ import annotations

from typing import Any

from bench.runners import Runner


def load_bertlite(model_path: str, dtype: str | None, **embedder_kwargs: Any) -> Any:
    """Embedder.from_pretrained, which readies the kernels the commands run (the C++ attention, int8's C++ ops).

    Args:
        model_path: the checkpoint folder.
        dtype: Embedder's dtype (None: its default).
        embedder_kwargs: more Embedder.from_pretrained arguments.

    Returns:
        The Embedder.
    """
    from bertlite import Embedder

    return Embedder.from_pretrained(model_path, dtype=dtype, **embedder_kwargs)


def bertlite_runner(
    model_path: str,
    dtype: str | None,
    batch_size: int | None = None,
    attn_implementation: str | None = None,
    **embedder_kwargs: Any,
) -> Runner:
    """Embedder.encode with its default batching unless batch_size is given.

    Args:
        model_path: the checkpoint folder.
        dtype: Embedder's dtype (None: its default).
        batch_size: texts per batch; None for Embedder's token-budget batches.
        attn_implementation: an attention implementation to set on the model, else its default.
        embedder_kwargs: more Embedder.from_pretrained arguments.

    Returns:
        The runner.
    """
    embedder = load_bertlite(model_path, dtype, **embedder_kwargs)
    if attn_implementation is not None:
        embedder.model.set_attn_implementation(attn_implementation)

    def run(texts: list[str]) -> Any:
        return embedder.encode(texts, batch_size=batch_size, show_progress_bar=False)

    run.precision = embedder.precision  # what it runs in (for dtype="auto", what it settled on)
    return run
