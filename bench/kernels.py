"""torch's int8 GEMM kernels against fp32 F.linear on BERT's Linear shapes: ms, GFLOP/s, x fp32, error.

Each int8 row is the whole Int8Linear step (quantize the input per token, the GEMM, the fp32 output
with its scales and bias); the bare GEMM is shown too. "err" is the relative (Frobenius) error against
fp32 on random data with a few outlier channels. Kernels this CPU or torch build lacks are listed as such.
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import environment, timed, write_json
from bertlite.quant.int8 import INT8_KERNELS, Int8Linear, int8_kernel_available

# (in_features, out_features): MiniLM-L6 / BERT-small (H=384) and BERT-base (H=768):
# fused q|k|v, intermediate, output (attention.output.dense is H -> H).
SHAPES = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (768, 2304), (768, 3072), (3072, 768)]


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of one call to fn over `repeats`, after two warm-up calls."""
    fn()
    fn()
    return statistics.median(seconds for seconds, _ in (timed(fn) for _ in range(repeats)))


def fbgemm_dynamic(weight: torch.Tensor, bias: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """torch.ao's quantize_dynamic kernel (per-tensor activation scale, per-channel weights), or None
    where this torch has no fbgemm engine."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return None
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    with warnings.catch_warnings():  # torch's deprecation notice for quantized tensors, which this op still needs
        warnings.simplefilter("ignore", UserWarning)
        zero_points = torch.zeros_like(scales, dtype=torch.long)
        qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qweight, bias)
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed)


def bench_shape(tokens: int, k_in: int, n_out: int, kernels: list[str], repeats: int) -> list[dict[str, Any]]:
    """Time fp32 F.linear, each int8 kernel (symmetric and asymmetric input, and its bare GEMM) and fbgemm
    on one Linear shape, printing a line each.

    Args:
        tokens: rows of the input.
        k_in: in_features.
        n_out: out_features.
        kernels: the available INT8_KERNELS.
        repeats: timed calls per row.

    Returns:
        One row per kernel: name, ms, gflops, x_fp32, err (None for a bare GEMM).
    """
    x = torch.randn(tokens, k_in)
    x[:, :4] *= 20  # outlier channels, as BERT's activations have
    linear = torch.nn.Linear(k_in, n_out)
    reference = F.linear(x, linear.weight, linear.bias)
    flop = 2 * tokens * k_in * n_out
    rows: dict[str, Callable[[], torch.Tensor]] = {"fp32 F.linear": lambda: F.linear(x, linear.weight, linear.bias)}
    for kernel in kernels:
        for asymmetric in (False, True):
            q = Int8Linear.from_linear(linear, kernel=kernel, asymmetric=asymmetric)
            rows[f"int8 {kernel}{' asym' if asymmetric else ''}"] = partial(q, x)
        if kernel != "dequantize":
            rows[f"  gemm {kernel}"] = partial(q.gemm, q.quantize_input(x)[0])
    dynamic = fbgemm_dynamic(linear.weight, linear.bias)
    if dynamic is not None:
        rows["fbgemm dynamic"] = partial(dynamic, x)
    fp32_seconds = None
    out = []
    for name, fn in rows.items():
        seconds = median_seconds(fn, repeats)
        fp32_seconds = fp32_seconds or seconds
        err = None
        if not name.startswith("  gemm"):  # the bare GEMM lacks the token scales and bias
            err = float((fn() - reference).norm() / reference.norm())
        out.append(
            {
                "shape": [k_in, n_out],
                "kernel": name.strip(),
                "ms": 1e3 * seconds,
                "gflops": flop / seconds / 1e9,
                "x_fp32": fp32_seconds / seconds,
                "err": err,
            }
        )
        print(
            f"{k_in:>5}->{n_out:<5} {name:>20} {1e3 * seconds:8.3f} {flop / seconds / 1e9:8.1f} "
            f"{fp32_seconds / seconds:7.2f} {'' if err is None else f'{err:.2e}':>8}"
        )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The kernels job's flags."""
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--tokens", type=int, default=2048, help="rows M of the activation matrix (default 2048)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per kernel and shape (default 20)")
    parser.add_argument("--json", type=Path, help="write every number here")


def run(args: argparse.Namespace) -> None:
    """Run the kernels job and write the JSON."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    env = environment(None)
    print(
        f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
        f"mkldnn bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, threads {args.threads}, M={args.tokens}"
    )
    kernels = [k for k in INT8_KERNELS if int8_kernel_available(k)]
    unavailable = [k for k in INT8_KERNELS if k not in kernels]
    print("int8 kernels available:", ", ".join(kernels), "| unavailable:", ", ".join(unavailable))
    print(f"{'shape':>12} {'kernel':>20} {'ms':>8} {'GFLOP/s':>8} {'x fp32':>7} {'err':>8}")
    with torch.inference_mode():
        rows = [row for k_in, n_out in SHAPES for row in bench_shape(args.tokens, k_in, n_out, kernels, args.repeats)]
    result = {"tokens": args.tokens, "repeats": args.repeats, "available": kernels, "unavailable": unavailable}
    write_json(args.json, "kernels", result | {"rows": rows}, env)
