"""The throughput harness: configs of bench.configs timed on the same texts in rotated rounds, with their
vectors' distance to transformers eager fp32. The throughput job's main table and its families both run it."""

from __future__ import annotations

import functools
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bench.common import PAUSE_S, per_round_ratio, timed_rounds
from bench.configs import CONFIGS
from bench.flops import gemm_peak, useful_gflop
from bench.runners import PeerMissing
from bench.runners.transformers import transformers_runner
from bertlite.quant.allocator import keep_freed_memory


def bench_throughput(
    model_path: str,
    texts: list[str],
    configs: list[str],
    rounds: int,
    pause_s: float = PAUSE_S,
    peaks: dict[str, float] | None = None,
    reference: Callable[[list[str]], np.ndarray] | None = None,
) -> dict[str, Any]:
    """Time each config on the texts in rotated rounds and compare its vectors with transformers eager fp32.

    Args:
        model_path: the checkpoint folder.
        texts: the texts every config embeds in each round.
        configs: names in bench.configs.CONFIGS; a peer that is not installed is skipped.
        rounds: timed rounds (after one warm-up call per config on 64 texts).
        pause_s: seconds idle before each timed run.
        peaks: the GEMM peaks by dtype ("fp32", "bf16"), when measured already; None: measured here.
        reference: the runner the vectors are compared with, for a model transformers has no module for (its
            *_vs_hf_eager_fp32 fields then hold the distances to it); None: transformers eager fp32.

    Returns:
        Per config its seconds per round, median, texts/s, useful GFLOP/s, % of peak, distances to the
        reference and per-round ratio to bertlite fp32; the skipped configs; "vectors" (for the caller).
    """
    # The int8 path sets glibc's allocator thresholds for the process (bertlite.quant.allocator); set here
    # first, every engine runs with the same allocator, whichever configs are chosen.
    allocator_kept = keep_freed_memory()
    runners, skipped = {}, {}
    for name in configs:
        print(f"  loading {name}", file=sys.stderr)
        try:
            runners[name] = CONFIGS[name][1](model_path)
        except PeerMissing as e:
            skipped[name] = str(e)
            print(f"  skipped {name}: {e}", file=sys.stderr)
            continue
        runners[name](texts[:64])  # warm-up: first-call allocations and kernel selection
    configs = list(runners)
    if reference is None:
        reference = transformers_runner(model_path, "eager", torch.float32, sort=False)
    reference = reference(texts)
    runs = {name: functools.partial(runners[name], texts) for name in configs}
    seconds, vectors = timed_rounds(runs, rounds, pause_s, len(texts))
    gflop = useful_gflop(model_path, texts)
    peaks = dict(peaks or measure_peaks())
    # what dtype="auto" ran: bfloat16 where the CPU kind and the bar allow it (BaseEncoder.settle_auto)
    auto = getattr(runners.get("bertlite_auto"), "precision", "float32")
    peaks["auto"] = peaks["bf16" if auto == "bfloat16" else "fp32"]
    base = seconds.get("bertlite_fp32")
    results = {}
    for name in configs:
        peak = peaks.get(CONFIGS[name][0])  # none measured for int8
        median = statistics.median(seconds[name])
        cosine = (vectors[name] * reference).sum(1) / (
            np.linalg.norm(vectors[name], axis=1) * np.linalg.norm(reference, axis=1)
        )
        results[name] = {
            "seconds": seconds[name],
            "median_s": median,
            "texts_per_s": len(texts) / median,
            "useful_gflops": gflop / median,
            "pct_of_peak": 100 * gflop / median / peak if peak else None,
            "max_abs_diff_vs_hf_eager_fp32": float(np.abs(vectors[name] - reference).max()),
            "min_cosine_vs_hf_eager_fp32": float(cosine.min()),
            "mean_cosine_vs_hf_eager_fp32": float(cosine.mean()),
            "per_round_x_bertlite_fp32": per_round_ratio(base, seconds[name]) if base else None,
        }
    return {
        "texts": len(texts),
        "rounds": rounds,
        "pause_s": pause_s,
        "allocator_thresholds_raised": allocator_kept,
        "useful_gflop": gflop,
        "gemm_peak_gflops": peaks,
        "threads": torch.get_num_threads(),
        "configs": results,
        "skipped": skipped,
        "vectors": vectors,
    }


def measure_peaks() -> dict[str, float]:
    """The GEMM peaks bench_throughput's % of peak reads: {"fp32": GFLOP/s, "bf16": GFLOP/s}."""
    return {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
