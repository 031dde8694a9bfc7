"""sentence-transformers' SentenceTransformer.encode, batch size 32."""

from __future__ import annotations

from bench.runners import BATCH_SIZE, Runner


def sentence_transformers_runner(model_path: str) -> Runner:
    """SentenceTransformer(model_path).encode on CPU.

    Args:
        model_path: the checkpoint folder (with its sentence-transformers config).

    Returns:
        The runner.
    """
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    return lambda texts: model.encode(texts, batch_size=BATCH_SIZE)
