"""Rerank throughput: bertlite CrossEncoder.predict vs sentence-transformers' on the same (query, passage) pairs.

The pairs come from the corpus: each query is the first words of one paragraph, scored against that
paragraph and its neighbours. The model is a cross-encoder of MiniLM-L6 size: all-MiniLM-L6-v2's
weights under a seeded random one-label classifier (no real cross-encoder checkpoint is offline), saved
with sentence-transformers' CrossEncoder, so both libraries load the same folder; --model takes a real
cross-encoder folder instead. sentence-transformers runs float32; bertlite float32 and, unless --no-int8,
int8; all in rotated rounds after an idle pause. The median round counts, with the per-round ratio, the
largest score difference and whether every query's ranking is the same. The GFLOPs each library runs
(sentence-transformers its padded batches, bertlite real tokens) bound the float32 ratio where both run
their GEMMs at the same speed; the report gives each library's GFLOP/s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import (
    add_rounds_arguments,
    default_model_path,
    environment,
    per_round_ratio,
    read_corpus,
    timed_rounds,
    write_json,
)
from bench.flops import encoder_gflop

# Idle seconds before each timed run, so the other library's spinning threads are quiet (see bench.throughput).
QUERY_WORDS = 8
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def rerank_pairs(texts: list[str], pairs: int, per_query: int) -> list[tuple[str, str]]:
    """(query, passage) pairs: query q is the first QUERY_WORDS words of texts[q], scored against
    texts[q .. q + per_query - 1] (its own paragraph, then its neighbours).

    Args:
        texts: the corpus paragraphs (at least pairs // per_query + per_query of them).
        pairs: how many pairs.
        per_query: passages per query.

    Returns:
        The pairs, query by query.
    """
    out = []
    for q in range(-(-pairs // per_query)):
        query = " ".join(texts[q].split()[:QUERY_WORDS])
        out += [(query, texts[q + j]) for j in range(per_query)]
    return out[:pairs]


def build_cross_encoder(model_path: str, folder: Path, seed: int = 0) -> Path:
    """A one-label cross-encoder folder from an embedding checkpoint: its weights, a seeded random
    classifier, saved by sentence-transformers' CrossEncoder.

    Args:
        model_path: a BERT checkpoint folder (all-MiniLM-L6-v2 by default).
        folder: where to write it (created).
        seed: the classifier's init.

    Returns:
        folder.
    """
    import transformers
    from sentence_transformers import CrossEncoder

    torch.manual_seed(seed)
    model = transformers.BertForSequenceClassification.from_pretrained(model_path, num_labels=1)
    raw = folder.with_name(folder.name + "-transformers")
    model.save_pretrained(raw)
    for name in TOKENIZER_FILES:
        if (Path(model_path) / name).exists():
            shutil.copy(Path(model_path) / name, raw / name)
    CrossEncoder(str(raw), device="cpu").save_pretrained(str(folder))
    return folder


def bench_rerank(
    folder: str, pairs: list[tuple[str, str]], per_query: int, rounds: int, pause_s: float, int8: bool = True
) -> dict:
    """Time sentence-transformers' predict and bertlite's (float32, and int8) on the pairs in rotated
    rounds, compare their scores, and count the arithmetic each library runs.

    Args:
        folder: the cross-encoder folder both load.
        pairs: the pairs every round scores.
        per_query: passages per query, for the ranking check.
        rounds: timed rounds (after one warm-up call each on 64 pairs).
        pause_s: seconds idle before each timed run.
        int8: time bertlite with dtype="int8" too.

    Returns:
        Per library its seconds per round, median, pairs/s and GFLOP/s; per bertlite run its per-round
        ratio to sentence-transformers, largest score difference and how many queries rank their passages
        the same; the GFLOPs each library runs (work).
    """
    from sentence_transformers import CrossEncoder as STCrossEncoder

    from bertlite import CrossEncoder

    st = STCrossEncoder(folder, device="cpu")
    ours = CrossEncoder.from_pretrained(folder, dtype="float32")
    runners: dict[str, Callable[[list], np.ndarray]] = {
        "sentence_transformers": lambda p: st.predict(p, batch_size=32),
        "bertlite": lambda p: ours.predict(p),
    }
    if int8:
        quantized = CrossEncoder.from_pretrained(folder, dtype="int8")
        runners["bertlite_int8"] = lambda p: quantized.predict(p)
    for run in runners.values():
        run(pairs[:64])
    work = rerank_work(st, ours.model.config, pairs)
    runs = {name: partial(run, pairs) for name, run in runners.items()}
    seconds, scores = timed_rounds(runs, rounds, pause_s, len(pairs), unit="pairs")
    results: dict[str, dict[str, Any]] = {}
    for name, s in seconds.items():
        gflop = work["sentence_transformers_gflop" if name == "sentence_transformers" else "bertlite_gflop"]
        median = statistics.median(s)
        results[name] = {"seconds": s, "median_s": median, "pairs_per_s": len(pairs) / median, "gflops": gflop / median}
        if name != "sentence_transformers":
            results[name].update(
                per_round_x_sentence_transformers=per_round_ratio(seconds["sentence_transformers"], s),
                **agreement(scores["sentence_transformers"], scores[name], per_query),
            )
    return {
        "pairs": len(pairs),
        "per_query": per_query,
        "rounds": rounds,
        "pause_s": pause_s,
        "threads": torch.get_num_threads(),
        "max_length": ours.max_length,
        "libraries": results,
        "work": work,
    }


def agreement(expected: np.ndarray, got: np.ndarray, per_query: int) -> dict[str, float | int]:
    """How close one library's scores are to another's, and how alike they rank each query's passages.

    Args:
        expected, got: the scores of the same pairs, query by query.
        per_query: passages per query.

    Returns:
        max_abs_diff_scores; queries; queries_same_order (the whole ranking identical), queries_same_top1,
        and the mean over queries of Kendall's tau between the two rankings (1: identical).
    """
    queries = len(expected) // per_query
    first, second = (
        expected[: queries * per_query].reshape(queries, -1),
        got[: queries * per_query].reshape(queries, -1),
    )
    same_order = (np.argsort(-first, axis=1, kind="stable") == np.argsort(-second, axis=1, kind="stable")).all(axis=1)
    # Kendall's tau-a per query: agreeing minus disagreeing passage pairs, over all pairs.
    upper = np.triu(np.ones((per_query, per_query), dtype=bool), k=1)
    agree = np.sign(first[:, :, None] - first[:, None, :]) * np.sign(second[:, :, None] - second[:, None, :])
    return {
        "max_abs_diff_scores": float(np.abs(got - expected).max()),
        "queries": queries,
        "queries_same_order": int(same_order.sum()),
        "queries_same_top1": int((first.argmax(axis=1) == second.argmax(axis=1)).sum()),
        "mean_kendall_tau": float(agree[:, upper].mean()),
    }


def rerank_work(st: Any, config: Any, pairs: list[tuple[str, str]], batch_size: int = 32) -> dict[str, float]:
    """The encoder GFLOPs each library runs on the pairs: sentence-transformers' batches as it pads them
    (read from its tokenized batches during one predict), bertlite's real tokens with the last
    layer on [CLS] rows only.

    Args:
        st: the sentence-transformers CrossEncoder.
        config: the model's BertConfig.
        pairs: the pairs.
        batch_size: sentence-transformers' batch size (the timed runs use 32).

    Returns:
        Both GFLOP counts, their ratio (the speedup at equal GEMM speed), the real and padded token counts.
    """
    masks: list[torch.Tensor] = []
    preprocess = st.preprocess

    def keep_mask(*args: Any, **kwargs: Any) -> Any:
        features = preprocess(*args, **kwargs)
        masks.append(features["attention_mask"])
        return features

    st.preprocess = keep_mask  # its tokenized batches, as predict pads them
    try:
        st.predict(pairs, batch_size=batch_size)
    finally:
        del st.preprocess
    real = [int(n) for mask in masks for n in mask.sum(dim=1)]
    padded = [mask.shape[1] for mask in masks for _ in range(mask.shape[0])]
    ours, theirs = encoder_gflop(config, real, first_token_last_layer=True), encoder_gflop(config, padded)
    return {
        "sentence_transformers_gflop": theirs,
        "bertlite_gflop": ours,
        "work_ratio": theirs / ours,
        "real_tokens": sum(real),
        "sentence_transformers_padded_tokens": sum(padded),
    }


def format_rerank(result: dict[str, Any]) -> str:
    """bench_rerank's result as a short table."""
    work = result["work"]
    lines = [
        f"Rerank: {result['pairs']} (query, passage) pairs, {result['per_query']} per query, "
        f"{result['threads']} threads, max_length {result['max_length']}, median of {result['rounds']} rounds",
        f"{'library':<24}{'pairs/s':>10}{'x ST':>7}{'GFLOP/s':>9}  max |score diff|  same ranking  same top 1  tau",
    ]
    for name, r in result["libraries"].items():
        row = f"{name:<24}{r['pairs_per_s']:>10.1f}"
        if "queries" not in r:  # sentence-transformers, the baseline
            lines.append(f"{row}{'1':>7}{r['gflops']:>9.1f}")
            continue
        lines.append(
            f"{row}{r['per_round_x_sentence_transformers']:>7.2f}{r['gflops']:>9.1f}  {r['max_abs_diff_scores']:>16.2e}"
            f"{r['queries_same_order']:>11}/{r['queries']:<3}{r['queries_same_top1']:>8}/{r['queries']:<3}"
            f"{r['mean_kendall_tau']:>6.3f}"
        )
    lines.append(
        f"work: sentence-transformers {work['sentence_transformers_gflop']:.0f} GFLOP (pads "
        f"{work['real_tokens']} tokens to {work['sentence_transformers_padded_tokens']}), bertlite "
        f"{work['bertlite_gflop']:.0f} GFLOP: {work['work_ratio']:.2f}x less at equal GEMM speed"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The rerank job's flags."""
    parser.add_argument("--pairs", type=int, default=1000, help="(query, passage) pairs (default 1000)")
    parser.add_argument("--per-query", type=int, default=20, help="passages per query (default 20)")
    add_rounds_arguments(parser, pause=True)
    parser.add_argument(
        "--cross-encoder",
        default=None,
        help="a cross-encoder folder to run (default: one built from --model's weights and a random classifier)",
    )
    parser.add_argument("--no-int8", action="store_true", help="time bertlite float32 only")


def run(args: argparse.Namespace) -> None:
    """Run the rerank job and write the JSON."""
    torch.set_num_threads(args.threads)
    model_path = args.model or default_model_path()
    env = environment(args.cross_encoder or model_path, ("sentence-transformers",))
    pairs = rerank_pairs(read_corpus(), args.pairs, args.per_query)
    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp:
        folder = args.cross_encoder or str(build_cross_encoder(model_path, Path(tmp) / "cross-encoder"))
        result = bench_rerank(folder, pairs, args.per_query, args.rounds, args.pause, int8=not args.no_int8)
    result["cross_encoder"] = "given" if args.cross_encoder else "built: --model weights + seeded random classifier"
    print(f"CPU: {env['cpu']}; {env['cores']} cores")
    print(format_rerank(result))
    write_json(args.json, "rerank", result, env)
