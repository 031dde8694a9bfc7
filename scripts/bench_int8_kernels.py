"""Micro-benchmark torch's int8 GEMM kernels against fp32 F.linear on BERT's Linear shapes.

Each int8 row is the whole Int8Linear step a model pays for: quantize the fp32 input per
token, the int8 GEMM, and the fp32 output with its scales and bias (the GEMM alone is
shown too). "err" is the relative error (Frobenius) of the output against fp32 F.linear
on random data with a few outlier channels. Kernels this CPU or torch build lacks are
reported as unavailable, not assumed.

Usage: python scripts/bench_int8_kernels.py [--threads 2] [--tokens 2048] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from bertlite.quant.int8 import INT8_KERNELS, Int8Linear, int8_kernel_available

# (in_features, out_features): MiniLM-L6 / BERT-small (H=384) and BERT-base (H=768):
# fused q|k|v, intermediate, output (attention.output.dense is H -> H).
SHAPES = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (768, 2304), (768, 3072), (3072, 768)]


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of one call, after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fbgemm_dynamic(weight: torch.Tensor, bias: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """torch.ao's quantize_dynamic kernel: per-tensor activation scale, per-channel weights."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return None
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    with warnings.catch_warnings():  # torch's deprecation notice for quantized tensors, which this op still needs
        warnings.simplefilter("ignore", UserWarning)
        zero_points = torch.zeros_like(scales, dtype=torch.long)
        qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qweight, bias)
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed)


def bench_shape(tokens: int, k_in: int, n_out: int, kernels: list[str], repeats: int) -> None:
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
    for name, fn in rows.items():
        seconds = timed(fn, repeats)
        fp32_seconds = fp32_seconds or seconds
        err = ""
        if not name.startswith("  gemm"):  # the bare GEMM lacks the token scales and bias
            err = f"{float((fn() - reference).norm() / reference.norm()):.2e}"
        print(
            f"{k_in:>5}->{n_out:<5} {name:>20} {1e3 * seconds:8.3f} {flop / seconds / 1e9:8.1f} "
            f"{fp32_seconds / seconds:7.2f} {err:>8}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2048, help="rows M of the activation matrix")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
        f"mkldnn bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, threads {args.threads}, M={args.tokens}"
    )
    kernels = [k for k in INT8_KERNELS if int8_kernel_available(k)]
    print("int8 kernels available:", ", ".join(kernels), "| unavailable:", ", ".join(set(INT8_KERNELS) - set(kernels)))
    print(f"{'shape':>12} {'kernel':>20} {'ms':>8} {'GFLOP/s':>8} {'x fp32':>7} {'err':>8}")
    with torch.inference_mode():
        for k_in, n_out in SHAPES:
            bench_shape(args.tokens, k_in, n_out, kernels, args.repeats)


if __name__ == "__main__":
    main()
