"""SPLADE: bertlite SparseEncoder.encode against sentence-transformers' SparseEncoder.encode, in interleaved rounds.

No SPLADE checkpoint ships offline, so the job builds one of real size: the all-MiniLM-L6-v2 encoder
with a masked-LM head (a random prediction transform, the decoder tied to the word embeddings and a
bias set so a text activates about ACTIVE_DIMS vocabulary entries, as a trained SPLADE model does),
saved by sentence-transformers' SparseEncoder (MLM Transformer + SpladePooling max), so both
libraries load the same folder. Both encode the same corpus texts, batch 32, float32; the median
round counts, with the per-round ratio and whether the two give the same vectors.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bench.common import PAUSE_S, add_rounds_arguments, rates, read_corpus, run_on_built_folder, table, timed_rounds
from bench.runners import BATCH_SIZE, MAX_LENGTH

ACTIVE_DIMS = 200  # non-zero dimensions per text the built head's bias aims at


def build_splade_folder(model_path: str, folder: Path, seed: int = 0) -> Path:
    """Save a SPLADE model of real size: `model_path`'s encoder, a random MLM head, SpladePooling("max").

    Args:
        model_path: a BERT checkpoint folder (its encoder weights and tokenizer are used).
        folder: where sentence-transformers saves the model.
        seed: the head's random init.

    Returns:
        The folder.
    """
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    torch.manual_seed(seed)
    transformers.logging.set_verbosity_error()  # the head's "newly initialized" note
    model = transformers.BertForMaskedLM.from_pretrained(model_path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    # A random head scores about half the vocabulary above zero; a trained one a few hundred entries.
    batch = tokenizer(read_corpus(32), padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.masked_fill(~batch["attention_mask"].bool()[..., None], -torch.inf)
        top = logits.amax(dim=1).topk(ACTIVE_DIMS, dim=1).values[:, -1]  # each text's ACTIVE_DIMS-th largest
        model.cls.predictions.bias -= top.median()
    base = folder.parent / (folder.name + "-mlm")
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    transformer = Transformer(str(base), transformer_task="fill-mask", max_seq_length=MAX_LENGTH)
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(folder))
    return folder


def bench_sparse(folder: Path, texts: list[str], rounds: int, pause_s: float = PAUSE_S) -> dict[str, Any]:
    """Time both libraries' encode on `texts` in rotated rounds and compare their vectors.

    Args:
        folder: the SPLADE folder (build_splade_folder's).
        texts: the texts each encodes per round.
        rounds: timed rounds, after a warm-up call on 64 texts.
        pause_s: seconds idle before each timed run.

    Returns:
        Per library its seconds per round, texts/s and per-round ratio to sentence-transformers; whether
        the vectors have the same non-zero dimensions, their max abs difference, and the mean active dims.
    """
    from sentence_transformers import SparseEncoder as STSparseEncoder

    from bertlite import SparseEncoder

    encoders = {
        "bertlite_fp32": SparseEncoder.from_pretrained(folder, dtype="float32"),
        "sentence_transformers_fp32": STSparseEncoder(str(folder), device="cpu"),
    }
    for encoder in encoders.values():
        encoder.encode(texts[:64], batch_size=BATCH_SIZE, show_progress_bar=False)
    runs = {
        name: partial(encoder.encode, texts, batch_size=BATCH_SIZE, show_progress_bar=False)
        for name, encoder in encoders.items()
    }
    seconds, vectors = timed_rounds(runs, rounds, pause_s, len(texts))
    ours, theirs = vectors["bertlite_fp32"].to_dense(), vectors["sentence_transformers_fp32"].to_dense()
    configs = rates(seconds, len(texts), "sentence_transformers_fp32", "per_round_x_sentence_transformers")
    return {
        "texts": len(texts),
        "rounds": rounds,
        "pause_s": pause_s,
        "batch_size": BATCH_SIZE,
        "threads": torch.get_num_threads(),
        "configs": configs,
        "same_active_dims": bool(torch.equal(ours != 0, theirs != 0)),
        "rows_with_other_active_dims": int(((ours != 0) != (theirs != 0)).any(dim=1).sum()),
        "max_abs_diff": float((ours - theirs).abs().max()),
        # a logit within rounding of 0 is active on one side only; its weight says how little that matters
        "max_weight_active_on_one_side": float(torch.where((ours != 0) != (theirs != 0), ours + theirs, 0).max()),
        "mean_active_dims": float((theirs != 0).sum(dim=1).float().mean()),
    }


def format_sparse(result: dict[str, Any]) -> str:
    """The table of bench_sparse's result."""
    return table(
        f"SPLADE encode: {result['texts']} corpus texts, batch {result['batch_size']}, float32, "
        f"{result['threads']} threads, median of {result['rounds']} interleaved rounds",
        f"{'library':30} {'texts/s':>8} {'x ST/rnd':>9}",
        (
            f"{name:30} {r['texts_per_s']:8.1f} {r['per_round_x_sentence_transformers']:9.2f}"
            for name, r in result["configs"].items()
        ),
        f"same active dims: {result['same_active_dims']} ({result['rows_with_other_active_dims']} rows differ), "
        f"largest weight active on one side only {result['max_weight_active_on_one_side']:.2e}, "
        f"max abs diff {result['max_abs_diff']:.2e}, mean active dims {result['mean_active_dims']:.1f}",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sparse job's flags."""
    add_rounds_arguments(parser, texts=1000, pause=True)
    parser.add_argument("--folder", type=Path, help="build the SPLADE model here (default: a temporary folder)")


def run(args: argparse.Namespace) -> None:
    """Build the SPLADE folder, run the sparse job and write the JSON."""
    run_on_built_folder(args, "sparse", ("sentence-transformers",), build_splade_folder, bench_sparse, format_sparse)
