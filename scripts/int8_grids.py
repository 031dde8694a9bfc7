"""The vectors each int8 grid gives, on any CPU: min / mean cosine to bertlite fp32 on corpus texts.

Every grid of bertlite.quant.int8.INT8_GRIDS runs on the "dequantize" kernel (a float32 GEMM on the
dequantized weight, exact for these integers up to float32 rounding), so a machine with VNNI shows
what a CPU without it gets from its own grid, without that CPU's kernels. Each grid runs with the
inputs quantize_int8 would make asymmetric on it, and with every input asymmetric.

Usage: python scripts/int8_grids.py [--texts 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

from bertlite.embed.embedder import Embedder
from bertlite.quant import int8 as quantization


def cosines(model_path: str, texts: list[str], reference: np.ndarray, asymmetric: tuple[str, ...] | None) -> np.ndarray:
    embedder = Embedder.from_pretrained(model_path, dtype="float32")
    quantization.quantize_int8(embedder.model, embedder.tokenizer, kernel="dequantize", asymmetric=asymmetric)
    vectors = embedder.encode(texts, show_progress_bar=False)
    return (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)


def main() -> None:
    from bench import default_model_path, read_corpus  # scripts/bench.py, beside this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_path, texts = default_model_path(), read_corpus(args.texts)
    reference = Embedder.from_pretrained(model_path, dtype="float32").encode(texts, show_progress_bar=False)
    print(f"{len(texts)} corpus texts, min / mean cosine to bertlite fp32, exact int8 products (kernel 'dequantize')")
    warnings.simplefilter("ignore", quantization.Int8PrecisionWarning)  # the table says what it would
    for grid in quantization.INT8_GRIDS:
        quantization._grids["dequantize"] = grid
        for label, asymmetric in (
            ("quantize_int8's inputs", None),
            ("every input asymmetric", quantization.LAYER_LINEARS),
        ):
            cos = cosines(model_path, texts, reference, asymmetric)
            print(f"{grid!s:<70} {label:<24} {cos.min():.5f} / {cos.mean():.5f}", flush=True)


if __name__ == "__main__":
    main()
