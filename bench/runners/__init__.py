"""One module per engine, each returning a Runner: texts in, L2-normalized mean-pooled vectors out.

What a user of each engine writes, with the same tokenizer, pooling and max length; bench/configs.py
names the configurations the throughput job runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import numpy as np

Runner = Callable[[list[str]], np.ndarray]  # texts -> (N, H) float32 vectors
BATCH_SIZE = 32
MAX_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length, used by every config


class PeerMissing(Exception):
    """An optional engine that is not installed: its configs are skipped, and the result says so."""


def require(module: str, package: str) -> ModuleType:
    """Import an optional engine's module.

    Args:
        module: the module to import.
        package: the pip package that provides it, for the message.

    Returns:
        The module.

    Raises:
        PeerMissing: it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise PeerMissing(f"{module} is not installed (pip install {package})") from e


def sorted_batches_runner(
    model_path: str, forward: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> Runner:
    """What a user of an inference engine writes: the checkpoint's tokenizer.json, length-sorted
    batches of 32 padded to their longest text, forward(ids, mask, types) -> (B, T, H), mean pooling.

    Args:
        model_path: the checkpoint folder, for its tokenizer.
        forward: the engine's forward on int64 (B, T) ids, attention mask and token types.

    Returns:
        The runner.
    """
    from bertlite.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    tokenizer.enable_truncation(MAX_LENGTH)
    pad = tokenizer.token_to_id("[PAD]") or 0

    def run(texts: list[str]) -> np.ndarray:
        encodings = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out: np.ndarray | None = None
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start : start + BATCH_SIZE]
            shape = (len(rows), len(encodings[rows[0]].ids))
            ids, types, mask = np.full(shape, pad, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
            for row, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[row, :n], types[row, :n], mask[row, :n] = encodings[i].ids, encodings[i].type_ids, 1
            hidden = np.asarray(forward(ids, mask, types), dtype=np.float32)  # (B, T, H)
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            if out is None:
                out = np.empty((len(texts), hidden.shape[-1]), dtype=np.float32)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        assert out is not None
        return out

    return run
