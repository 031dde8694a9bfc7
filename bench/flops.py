"""Useful FLOPs of an encode (real tokens only) and the machine's GEMM peak on BERT-shaped matmuls."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from bench.runners import MAX_LENGTH


def useful_gflop(model_path: str, texts: list[str]) -> float:
    """GFLOPs of the real tokens only: the QKV/output/FFN GEMMs and the attention products.

    Args:
        model_path: the checkpoint folder (its config and tokenizer).
        texts: the texts, truncated at MAX_LENGTH tokens.

    Returns:
        The GFLOP count.
    """
    from bertlite import BertConfig
    from bertlite.tokenization import load_tokenizer

    cfg = BertConfig.from_pretrained(model_path)
    tokenizer = load_tokenizer(model_path)
    tokenizer.enable_truncation(MAX_LENGTH)
    lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)], dtype=np.float64)
    h, i = cfg.hidden_size, cfg.intermediate_size
    per_layer = 2 * lengths * (4 * h * h + 2 * h * i) + 4 * lengths**2 * h
    return float(cfg.num_hidden_layers * per_layer.sum() / 1e9)


def gemm_peak(dtype: torch.dtype, max_seconds: float = 2.0) -> float:
    """Best GFLOP/s of a BERT-shaped Linear (tokens x 384 -> 1536), through F.linear as the models run it.

    Args:
        dtype: the matmul's dtype.
        max_seconds: per size, up to 20 timed calls, fewer once they take this long (an emulated bf16
            GEMM is ~100x slower).

    Returns:
        The best GFLOP/s over 2,048, 4,096 and 8,192 tokens.
    """
    best = 0.0
    for n in (2048, 4096, 8192):
        # F.linear, not a @ b: without native bf16, torch's matmul falls back to a far slower kernel.
        a, weight = torch.randn(n, 384, dtype=dtype), torch.randn(1536, 384, dtype=dtype)
        F.linear(a, weight)
        reps, start = 0, time.perf_counter()
        while reps < 20 and (reps < 2 or time.perf_counter() - start < max_seconds):
            F.linear(a, weight)
            reps += 1
        best = max(best, 2 * n * 384 * 1536 * reps / (time.perf_counter() - start) / 1e9)
    return best
