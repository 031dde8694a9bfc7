"""The vectors each int8 grid gives, on any CPU: min / mean cosine to bertlite fp32 on corpus texts.

Every grid of bertlite.quant.int8.INT8_GRIDS runs on the "dequantize" kernel (a float32 GEMM on the
dequantized weight, exact for these integers up to float32 rounding), so any machine shows what a CPU
gets from its own grid. Each grid runs with the inputs quantize_int8 would make asymmetric, and with all,
on corpus texts and on texts of 2-3 tokens (mostly [CLS] and [SEP], where int8 loses most).

JSON rows: grid, inputs, min_cosine / mean_cosine (corpus), short_min_cosine / short_mean_cosine.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

from bench.common import add_model_and_json_arguments, default_model_path, environment, read_corpus, write_json
from bertlite.jobs.embedder import Embedder
from bertlite.quant import int8 as quantization
from bertlite.quant import kernels

# Texts of 2-3 tokens, as a search box sends them ("" is [CLS] [SEP]).
SHORT_TEXTS = ["", "\x00", "\u200b", "\ufeff", " ", "\t", ".", "?", "a", "hi", "[SEP]", "[CLS]"]


def cosines(model_path: str, texts: list[str], reference: np.ndarray, asymmetric: tuple[str, ...] | None) -> np.ndarray:
    """Cosine of each text's int8 vector (kernel "dequantize", the grid set in kernels._grids) to reference.

    Args:
        model_path: the checkpoint folder.
        texts: the texts.
        reference: their bertlite fp32 vectors.
        asymmetric: the Linears whose inputs are quantized asymmetric; None for quantize_int8's choice.

    Returns:
        (N,) cosines.
    """
    embedder = Embedder.from_pretrained(model_path, dtype="float32")
    quantization.quantize_int8(embedder.model, embedder.tokenizer, kernel="dequantize", asymmetric=asymmetric)
    vectors = embedder.encode(texts, show_progress_bar=False)
    return (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The grids job's flags."""
    parser.add_argument("--texts", type=int, default=1000, help="first N corpus texts (default 1000)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    add_model_and_json_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the grids job, printing a line per grid and input choice, and write the JSON."""
    torch.set_num_threads(args.threads)
    model_path, texts = args.model or default_model_path(), read_corpus(args.texts)
    env = environment(model_path)
    fp32 = Embedder.from_pretrained(model_path, dtype="float32")
    reference = fp32.encode(texts + SHORT_TEXTS, show_progress_bar=False)
    print(
        f"min / mean cosine to bertlite fp32 on {len(texts)} corpus texts | on {len(SHORT_TEXTS)} texts of 2-3 tokens,"
    )
    print("exact int8 products (kernel 'dequantize')")
    warnings.simplefilter("ignore", quantization.Int8PrecisionWarning)  # the table says what it would
    rows = []
    for grid in quantization.INT8_GRIDS:
        kernels._grids["dequantize"] = grid
        for label, asymmetric in (
            ("quantize_int8's inputs", None),
            ("every input asymmetric", quantization.LAYER_LINEARS),
        ):
            cos = cosines(model_path, texts + SHORT_TEXTS, reference, asymmetric)
            corpus, short = cos[: len(texts)], cos[len(texts) :]
            rows.append(
                {
                    "grid": str(grid),
                    "inputs": label,
                    "min_cosine": float(corpus.min()),
                    "mean_cosine": float(corpus.mean()),
                    "short_min_cosine": float(short.min()),
                    "short_mean_cosine": float(short.mean()),
                }
            )
            numbers = f"{corpus.min():.5f} / {corpus.mean():.5f} | {short.min():.5f} / {short.mean():.5f}"
            print(f"{grid!s:<70} {label:<24} {numbers}", flush=True)
    write_json(args.json, "grids", {"texts": len(texts), "rows": rows}, env)
