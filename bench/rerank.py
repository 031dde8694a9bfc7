"""Rerank throughput: bertlite CrossEncoder.predict vs sentence-transformers' on the same (query, passage) pairs.

The pairs come from the corpus: each query is the first words of one paragraph, scored against that
paragraph and its neighbours. The model is a cross-encoder of MiniLM-L6 size: all-MiniLM-L6-v2's
weights under a seeded random one-label classifier (no real cross-encoder checkpoint is offline), saved
with sentence-transformers' CrossEncoder, so both libraries load the same folder; --model takes a real
cross-encoder folder instead. Both run fp32 in rotated rounds after an idle pause; the median round
counts, with the per-round ratio, the largest score difference and whether every query's ranking is the same.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import (
    add_model_and_json_arguments,
    add_rounds_arguments,
    default_model_path,
    environment,
    per_round_ratio,
    read_corpus,
    rotated,
    write_json,
)

# Idle seconds before each timed run, so the other library's spinning threads are quiet (see bench.throughput).
PAUSE_S = 0.5
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


def bench_rerank(folder: str, pairs: list[tuple[str, str]], per_query: int, rounds: int, pause_s: float) -> dict:
    """Time both libraries' predict on the pairs in rotated rounds and compare their scores.

    Args:
        folder: the cross-encoder folder both load.
        pairs: the pairs every round scores.
        per_query: passages per query, for the ranking check.
        rounds: timed rounds (after one warm-up call each on 64 pairs).
        pause_s: seconds idle before each timed run.

    Returns:
        Per library its seconds per round, median and pairs/s; the per-round ratio; the largest
        score difference; how many queries rank their passages the same.
    """
    from sentence_transformers import CrossEncoder as STCrossEncoder

    from bertlite import CrossEncoder

    st = STCrossEncoder(folder, device="cpu")
    ours = CrossEncoder.from_pretrained(folder, dtype="float32")
    runners: dict[str, Callable[[list], np.ndarray]] = {
        "sentence_transformers": lambda p: st.predict(p, batch_size=32),
        "bertlite": lambda p: ours.predict(p),
    }
    for run in runners.values():
        run(pairs[:64])
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    scores: dict[str, np.ndarray] = {}
    for r in range(rounds):
        for name in rotated(list(runners), r):
            time.sleep(pause_s)
            start = time.perf_counter()
            scores[name] = runners[name](pairs)
            seconds[name].append(time.perf_counter() - start)
            print(f"  round {r + 1}/{rounds} {name}: {len(pairs) / seconds[name][-1]:.1f} pairs/s", file=sys.stderr)
    expected, got = scores["sentence_transformers"], scores["bertlite"]
    queries = len(pairs) // per_query
    same_order = sum(
        np.array_equal(np.argsort(-expected[q * per_query : (q + 1) * per_query], kind="stable"),
                       np.argsort(-got[q * per_query : (q + 1) * per_query], kind="stable"))
        for q in range(queries)
    )  # fmt: skip
    results = {
        name: {"seconds": s, "median_s": statistics.median(s), "pairs_per_s": len(pairs) / statistics.median(s)}
        for name, s in seconds.items()
    }
    return {
        "pairs": len(pairs),
        "per_query": per_query,
        "rounds": rounds,
        "pause_s": pause_s,
        "threads": torch.get_num_threads(),
        "max_length": ours.max_length,
        "libraries": results,
        "per_round_x_sentence_transformers": per_round_ratio(seconds["sentence_transformers"], seconds["bertlite"]),
        "max_abs_diff_scores": float(np.abs(got - expected).max()),
        "queries": queries,
        "queries_same_order": int(same_order),
    }


def format_rerank(result: dict[str, Any]) -> str:
    """bench_rerank's result as a short table."""
    lines = [
        f"Rerank: {result['pairs']} (query, passage) pairs, {result['per_query']} per query, fp32, "
        f"{result['threads']} threads, max_length {result['max_length']}, median of {result['rounds']} rounds",
        f"{'library':<24}{'pairs/s':>10}{'median s':>10}",
    ]
    for name, r in result["libraries"].items():
        lines.append(f"{name:<24}{r['pairs_per_s']:>10.1f}{r['median_s']:>10.3f}")
    lines += [
        f"bertlite / sentence-transformers, per round: {result['per_round_x_sentence_transformers']:.2f}x",
        f"max |score diff|: {result['max_abs_diff_scores']:.2e}; queries ranked the same: "
        f"{result['queries_same_order']}/{result['queries']}",
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The rerank job's flags."""
    parser.add_argument("--pairs", type=int, default=1000, help="(query, passage) pairs (default 1000)")
    parser.add_argument("--per-query", type=int, default=20, help="passages per query (default 20)")
    add_rounds_arguments(parser)
    parser.add_argument("--pause", type=float, default=PAUSE_S, help=f"idle seconds per run (default {PAUSE_S})")
    parser.add_argument(
        "--cross-encoder",
        default=None,
        help="a cross-encoder folder to run (default: one built from --model's weights and a random classifier)",
    )
    add_model_and_json_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the rerank job and write the JSON."""
    torch.set_num_threads(args.threads)
    model_path = args.model or default_model_path()
    env = environment(args.cross_encoder or model_path, ("sentence-transformers",))
    pairs = rerank_pairs(read_corpus(), args.pairs, args.per_query)
    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp:
        folder = args.cross_encoder or str(build_cross_encoder(model_path, Path(tmp) / "cross-encoder"))
        result = bench_rerank(folder, pairs, args.per_query, args.rounds, args.pause)
    result["cross_encoder"] = "given" if args.cross_encoder else "built: --model weights + seeded random classifier"
    print(f"CPU: {env['cpu']}; {env['cores']} cores")
    print(format_rerank(result))
    write_json(args.json, "rerank", result, env)
