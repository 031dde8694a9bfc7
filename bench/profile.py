"""Where bertlite's encode time goes: torch.profiler's top ops for fp32, bf16 and int8, and int8's ceiling.

The ceiling is how fast int8 could be on its GEMM kernels if quantizing, scaling and its GELU cost nothing:
float32's time over int8's GEMMs plus all that float32 spends outside its own GEMMs.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from bench import emulate
from bench.common import read_corpus, timed, write_json
from bench.runners.bertlite import load_bertlite

PROFILED_DTYPES = (("fp32", None), ("bf16", "bfloat16"), ("int8", "int8"))
# The profiler's leaf ops that run the encoder's Linear GEMMs on each path (their fused epilogues included):
# float32's oneDNN linears, bf16's addmm, int8's oneDNN qlinear (torch._int_mm: the int_mm kernel).
GEMM_OPS = ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "onednn::qlinear_pointwise", "aten::_int_mm")


def profile_bertlite(model_path: str, texts: list[str], dtype: str | None, rows: int = 12) -> tuple[str, dict]:
    """Profile one Embedder.encode with default settings (after a warm-up on 200 texts); int8 runs with
    its compiled quantization built, as a long job does.

    Args:
        model_path: the checkpoint folder.
        texts: the texts to encode.
        dtype: Embedder's dtype (None: float32).
        rows: operators in the table.

    Returns:
        The table of the top operators by self-CPU time, under a header line, and time_split()'s numbers.
    """
    from torch.profiler import ProfilerActivity, profile

    embedder = load_bertlite(model_path, dtype)
    embedder.encode(texts[:200])

    def encode_profiled() -> Any:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            embedder.encode(texts)
        return prof

    seconds, prof = timed(encode_profiled)
    events = prof.key_averages()
    header = f"Profile: bertlite {dtype or 'float32'}, {len(texts)} texts in {seconds:.2f} s (profiler on)"
    return header + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=rows), time_split(events, seconds)


def time_split(events: Iterable[Any], seconds: float) -> dict[str, float]:
    """The self-CPU seconds of all torch ops and of the GEMM_OPS.

    The wall clock also holds tokenization, Python and the profiler's own work (the first profile in a
    process about 1 s more: its start-up), so the ratios use the ops' time.

    Args:
        events: the profiler's key_averages().
        seconds: the wall-clock seconds of the profiled call.

    Returns:
        wall_s, total_s (all ops), gemm_s (the GEMM_OPS).
    """
    return {
        "wall_s": seconds,
        "total_s": sum(e.self_cpu_time_total for e in events) / 1e6,
        "gemm_s": sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS) / 1e6,
    }


def int8_ceiling(fp32: dict[str, float], int8: dict[str, float]) -> dict[str, float]:
    """How fast int8 could be on these GEMM kernels: float32's time over int8's GEMMs plus all that float32
    spends outside its own (attention, LayerNorm, embeddings, pooling).

    Args:
        fp32: time_split() of float32.
        int8: time_split() of int8.

    Returns:
        The ceiling as a multiple of float32, with the GEMM shares, the GEMM speed-up and the profiled ratio;
        int8's own overhead (the time it spends outside its GEMMs beyond float32's time outside its own:
        quantizing inputs, scaling, dequantizing, a separate activation) as a share of int8's time; and the
        profiled ratio as a share of the ceiling.
    """
    rest = fp32["total_s"] - fp32["gemm_s"]
    ceiling = fp32["total_s"] / (int8["gemm_s"] + rest)
    profiled = fp32["total_s"] / int8["total_s"]
    overhead = max(int8["total_s"] - int8["gemm_s"] - rest, 0.0)
    return {
        "fp32_gemm_share": fp32["gemm_s"] / fp32["total_s"],
        "int8_gemm_share": int8["gemm_s"] / int8["total_s"],
        "int8_gemm_speedup": fp32["gemm_s"] / int8["gemm_s"],
        "int8_x_fp32_profiled": profiled,
        "int8_ceiling_x_fp32": ceiling,
        "int8_overhead_share": overhead / int8["total_s"],
        "int8_x_ceiling": profiled / ceiling,
    }


def format_ceiling(c: dict[str, float]) -> str:
    """int8_ceiling()'s numbers in two lines."""
    return (
        f"Time split (torch ops' self-CPU time, profiled): float32's GEMMs take "
        f"{100 * c['fp32_gemm_share']:.0f}% of its time, int8's {100 * c['int8_gemm_share']:.0f}% of its; "
        f"int8's GEMMs run {c['int8_gemm_speedup']:.2f}x float32's; int8 is {c['int8_x_fp32_profiled']:.2f}x "
        f"float32 here.\nint8's ceiling on these GEMM kernels: {c['int8_ceiling_x_fp32']:.2f}x float32 (its "
        "GEMMs plus float32's time outside its own: quantizing, scaling and GELU free); int8 runs at "
        f"{c['int8_x_ceiling']:.2f} of it.\nint8's own overhead (quantize, scale, dequantize, separate "
        f"activation: its time outside its GEMMs beyond float32's outside its own): "
        f"{100 * c['int8_overhead_share']:.0f}% of int8's time"
    )


def bench_profile(model_path: str, texts: list[str]) -> dict[str, Any]:
    """Profile each of PROFILED_DTYPES and print the tables and int8's ceiling.

    Args:
        model_path: the checkpoint folder.
        texts: the texts each profile encodes.

    Returns:
        profile (the tables), profile_time_split (per dtype) and, when both profiles found GEMMs, int8_ceiling.
    """
    profiled = {name: profile_bertlite(model_path, texts, dtype) for name, dtype in PROFILED_DTYPES}
    results: dict[str, Any] = {"profile": [table for table, _ in profiled.values()]}
    results["profile_time_split"] = {name: split for name, (_, split) in profiled.items()}
    print("\n" + "\n\n".join(results["profile"]))
    fp32, int8 = results["profile_time_split"]["fp32"], results["profile_time_split"]["int8"]
    if fp32["gemm_s"] and int8["gemm_s"]:
        results["int8_ceiling"] = ceiling = int8_ceiling(fp32, int8)
        print("\n" + format_ceiling(ceiling))
    else:  # another torch's op names: say so rather than divide by nothing
        print(f"\nno GEMM op of {GEMM_OPS} in the float32 or int8 profile: no int8 ceiling")
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The profile job's flags."""
    parser.add_argument("--texts", type=int, default=1000, help="first N corpus texts; 0 = all 11,491 (default 1000)")
    emulate.add_start_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the profile job and write the JSON."""
    model_path, env = emulate.start(args)
    write_json(args.json, "profile", bench_profile(model_path, read_corpus(args.texts)), env)
