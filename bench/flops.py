"""FLOPs an encoder runs (real tokens, or padded widths) and the machine's GEMM peak on BERT-shaped matmuls."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bench.runners import MAX_LENGTH


def useful_gflop(model_path: str, texts: list[str]) -> float:
    """GFLOPs of the real tokens only: the QKV/output/FFN GEMMs and the attention products.

    Args:
        model_path: the checkpoint folder (its config and tokenizer).
        texts: the texts, truncated at MAX_LENGTH tokens.

    Returns:
        The GFLOP count.
    """
    from bertlite import AutoConfig
    from bertlite.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    tokenizer.enable_truncation(MAX_LENGTH)
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    return encoder_gflop(AutoConfig.from_pretrained(model_path), lengths)  # any family's config


def encoder_gflop(config: Any, lengths: Sequence[int], first_token_last_layer: bool = False) -> float:
    """GFLOPs an encoder runs over sequences of these lengths: the QKV/output/FFN GEMMs and the two
    attention products (embeddings, LayerNorm and activations are left out: a few percent of the time).

    Args:
        config: the model's BertConfig (hidden, intermediate size, layers).
        lengths: the rows each sequence runs: its real tokens, or the padded width of its batch.
        first_token_last_layer: the last layer computes query, key and value for every row but attention,
            output and FFN for the first row only (bertlite's CrossEncoder and [CLS]-pooled Embedder).

    Returns:
        The GFLOP count.
    """
    n = np.asarray(lengths, dtype=np.float64)
    h, i = config.hidden_size, config.intermediate_size
    full = 2 * n * (4 * h * h + 2 * h * i) + 4 * n**2 * h
    if not first_token_last_layer:
        return float(config.num_hidden_layers * full.sum() / 1e9)
    last = 2 * n * 3 * h * h + 4 * n * h + 2 * (h * h + 2 * h * i)
    return float(((config.num_hidden_layers - 1) * full + last).sum() / 1e9)


def gemm_peak(dtype: torch.dtype, max_seconds: float = 2.0) -> float:
    """The best GFLOP/s the models' own GEMM kernel reaches here, with this run's threads.

    oneDNN's linear, float32 weights packed as the models keep them (linear_pass),
    on BERT-shaped Linears (tokens x 384 -> 1536, 2,048 and 8,192 tokens) and a large square one
    (2,048 x 2,048 -> 2,048), so a model's share of it stays under 100%.

    Args:
        dtype: the GEMMs' dtype.
        max_seconds: per shape, up to 10 timed calls, fewer once they take this long (an emulated bf16
            GEMM is ~10x slower).

    Returns:
        The best GFLOP/s over the shapes.
    """
    name = str(dtype).removeprefix("torch.")
    best = 0.0
    for tokens, (out_features, in_features) in ((2048, (1536, 384)), (8192, (1536, 384)), (2048, (2048, 2048))):
        run = linear_pass(name, [(out_features, in_features)], tokens)
        run()  # oneDNN builds its kernel on the first call
        reps, start = 0, time.perf_counter()
        while reps < 10 and (reps < 2 or time.perf_counter() - start < max_seconds):
            run()
            reps += 1
        gflop = 2 * tokens * out_features * in_features * reps / 1e9
        best = max(best, gflop / (time.perf_counter() - start))
    return best


def linear_pass(name: str, shapes: Sequence[tuple[int, int]], tokens: int = 256) -> Any:
    """A function that runs x @ W.T for each shape, in dtype `name`, on the kernel the model uses.

    Args:
        name: a torch dtype's name ("float32", "bfloat16").
        shapes: (out_features, in_features) of each Linear.
        tokens: the rows of x.

    Returns:
        A function of no arguments that runs the Linears once.
    """
    import torch

    dtype: torch.dtype = getattr(torch, name)
    generator = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(tokens, n, generator=generator).to(dtype) for n in {i for _, i in shapes}}
    weights = [(0.05 * torch.randn(o, i, generator=generator)).to(dtype) for o, i in shapes]
    linear = _onednn_linear(dtype, weights, tokens)
    if linear is None:
        import torch.nn.functional as F

        return lambda: [F.linear(inputs[w.shape[1]], w) for w in weights]
    return lambda: [linear(inputs[i], w) for (_, i), w in zip(shapes, weights, strict=True)]


def _onednn_linear(dtype: torch.dtype, weights: list[torch.Tensor], tokens: int) -> Any:
    """oneDNN's linear, as bertlite.layers.onednn runs it, float32 weights in its packed layout as the model
    keeps them; None where this torch cannot run it."""
    import torch

    try:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, tokens) for w in weights] if dtype == torch.float32 else []
        x = torch.ones(2, weights[0].shape[1], dtype=dtype)
        torch.ops.mkldnn._linear_pointwise(x, (packed or weights)[0], None, "none", [], "")
    except (AttributeError, RuntimeError):
        return None
    weights[:] = packed or weights
    return lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
