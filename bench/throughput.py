"""Throughput of bertlite and its peers on the same corpus texts, in interleaved rounds.

Every config embeds the same texts (mean pooling, L2 normalized) in rotated rounds after an idle
pause; the median round counts, with each config's per-round ratio to bertlite fp32, its useful
GFLOP/s as % of the measured GEMM peak, and its vectors' distance to transformers eager fp32.
Optionally in the same run: `bertlite embed` (--cli), the input checks' and load check's costs,
the profile (--profile) and cold start (--cold-rounds), and per job (--jobs: embed, rerank, sparse,
multi-vector) bertlite float32 / auto / int8 with each mode's accuracy bar beside its speed (bench.modes).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench import checks, cold_start, embed_cli, emulate, families, modes, profile
from bench.common import PAUSE_S, read_corpus, write_json
from bench.configs import CONFIGS, GROUPS, expand
from bench.harness import bench_throughput, measure_peaks
from bench.runners import BATCH_SIZE


def format_throughput(result: dict[str, Any], not_capped: dict[str, str]) -> str:
    """The table of bench_throughput's result.

    Args:
        result: bench_throughput()'s result.
        not_capped: under --isa, the configs that ran this CPU's full ISA anyway, and why.

    Returns:
        The table, one line per config.
    """
    configs = result["configs"]
    base = configs.get("hf_sdpa_fp32_corpus", {}).get("texts_per_s")
    peaks = result["gemm_peak_gflops"]
    lines = [
        f"Throughput: {result['texts']} corpus texts, batch {BATCH_SIZE}, median of {result['rounds']} interleaved "
        f"rounds, {result['threads']} threads; GEMM peak fp32 {peaks['fp32']:.0f} / bf16 {peaks['bf16']:.0f} GFLOP/s",
        f"{'config':<36}{'texts/s':>9}{'vs hf corpus':>13}{'x fp32/rnd':>11}{'GFLOP/s':>9}{'% peak':>8}"
        f"{'max|diff|':>11}{'min cos':>9}{'mean cos':>10}",
    ]
    for name, r in configs.items():
        ratio = f"{r['texts_per_s'] / base:.2f}x" if base else "-"
        pct = f"{r['pct_of_peak']:>7.1f}%" if r["pct_of_peak"] is not None else f"{'-':>8}"
        paired = r.get("per_round_x_bertlite_fp32")
        paired = f"{paired:.2f}x" if paired is not None else "-"
        lines.append(
            f"{name:<36}{r['texts_per_s']:>9.1f}{ratio:>13}{paired:>11}{r['useful_gflops']:>9.1f}{pct}"
            f"{r['max_abs_diff_vs_hf_eager_fp32']:>11.2e}{r['min_cosine_vs_hf_eager_fp32']:>9.5f}"
            f"{r['mean_cosine_vs_hf_eager_fp32']:>10.6f}"
        )
    lines += [f"skipped {name}: {reason}" for name, reason in result["skipped"].items()]
    lines += [
        f"not emulated: {name} ran this CPU's full ISA ({why})" for name, why in not_capped.items() if name in configs
    ]
    return "\n".join(lines)


def _configs(spec: str) -> list[str]:
    try:
        return expand(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _families(spec: str) -> list[str]:
    try:
        return families.parse_families(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _jobs(spec: str) -> list[str]:
    names = [name for name in spec.split(",") if name]
    unknown = [name for name in names if name not in modes.JOBS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown jobs {unknown}; choose from {', '.join(modes.JOBS)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The throughput job's flags."""
    parser.add_argument("--texts", type=int, default=1000, help="first N corpus texts; 0 = all 11,491 (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds (default 3)")
    parser.add_argument(
        "--configs",
        type=_configs,
        default="default",
        help=f"comma-separated configs or groups ({', '.join(GROUPS)}) of {', '.join(CONFIGS)}",
    )
    parser.add_argument(
        "--pause", type=float, default=PAUSE_S, help=f"seconds idle before each timed run (default {PAUSE_S})"
    )
    parser.add_argument(
        "--families",
        type=_families,
        default="",
        help="also time each family's random checkpoint (bertlite, transformers sdpa sorted, sentence-transformers): "
        f"comma-separated, or all ({', '.join(families.family_names())})",
    )
    parser.add_argument(
        "--family-shape",
        choices=sorted(families.SHAPES),
        default="minilm",
        help="the families' layer shape: all-MiniLM-L6-v2's (default) or tiny, for a smoke run",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default="",
        help="also time each job in bertlite float32, auto and int8, with each mode's accuracy bar against float32: "
        f"comma-separated of {', '.join(modes.JOBS)} (embed takes --texts texts, the others --job-texts)",
    )
    parser.add_argument(
        "--job-texts",
        type=int,
        default=300,
        help="texts per round for --jobs other than embed (rerank: (query, passage) pairs) (default 300)",
    )
    parser.add_argument("--cli", action="store_true", help="also time `bertlite embed` on the same texts")
    parser.add_argument(
        "--cold-rounds", type=int, default=5, help="cold start: fresh processes per library; 0 skips (default 5)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print torch.profiler's top ops for bertlite fp32/bf16/int8, and int8's ceiling on its GEMMs",
    )
    parser.add_argument("--validation", action="store_true", help="measure the cost of the input checks")
    parser.add_argument("--nonfinite-check", action="store_true", help="measure the cost of the NaN/Inf load check")
    emulate.add_start_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the throughput job, and the optional parts its flags ask for, then write the JSON."""
    model_path, env = emulate.start(args, ("sentence-transformers", "onnxruntime", "openvino", "ctranslate2"))
    texts = read_corpus(args.texts)
    emulated = env["capabilities"]["emulated_cpu"]
    results: dict[str, Any] = {}
    vectors: dict[str, np.ndarray] = {}
    if args.configs:
        results["throughput"] = bench_throughput(model_path, texts, args.configs, args.rounds, args.pause)
        vectors = results["throughput"].pop("vectors")
        print(format_throughput(results["throughput"], emulated["not_capped"] if emulated else {}))
        from bertlite.layers import native_attention

        results["cpu_attention"] = native_attention.describe()
        print(f"bertlite's attention on the CPU: {results['cpu_attention']}")
        if "bertlite_int8" in args.configs:
            from bertlite.quant.int8 import describe_quantization

            results["int8_input_quantization"] = describe_quantization()
            print(f"bertlite_int8's input quantization: {results['int8_input_quantization']}")
    if args.jobs:
        counts = {name: len(texts) if name == "embed" else args.job_texts for name in args.jobs}
        with tempfile.TemporaryDirectory(prefix="bench-modes-") as scratch:
            results["modes"] = modes.bench_modes(model_path, args.jobs, counts, args.rounds, args.pause, Path(scratch))
        print("\n" + modes.format_modes(results["modes"]))
    if args.families:
        peaks = results["throughput"]["gemm_peak_gflops"] if "throughput" in results else measure_peaks()
        results["families"] = families.bench_families(
            args.families, texts, args.rounds, args.family_shape, args.pause, peaks
        )
        print("\n" + families.format_families(results["families"]))
    if args.cli:
        results["cli"] = embed_cli.bench_cli(model_path, texts, vectors.get("hf_sdpa_fp32_corpus"))
        print("\n" + embed_cli.format_cli(results["cli"]))
    if args.profile:
        results |= profile.bench_profile(model_path, texts)
    if args.validation:
        results["validation"] = checks.bench_validation(model_path, texts)
        print("\n" + checks.format_validation(results["validation"]))
    if args.nonfinite_check:
        results["nonfinite_check"] = checks.bench_nonfinite_check(model_path)
        print("\n" + checks.format_nonfinite_check(results["nonfinite_check"]))
    if args.cold_rounds > 0:
        results["cold_start"] = cold_start.bench_cold_start(model_path, args.cold_rounds)
        print("\n" + cold_start.format_cold_start(results["cold_start"]))
    write_json(args.json, "throughput", results, env)
