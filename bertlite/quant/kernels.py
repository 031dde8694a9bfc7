"""int8 GEMM kernels and the integer grids on which each multiplies exactly, probed once on this machine.

Kernels, chosen by name and probed once (never assumed from the CPU): "onednn"
(torch.ops.onednn.qlinear_pointwise on a prepacked weight: VNNI / AMX where the CPU has them), "int_mm"
(torch._int_mm) and "dequantize" (fp32 matmul on the dequantized weight: the same numbers on any CPU,
without the speed). `python -m bench kernels` measures them. Where a kernel's int8 product saturates
(x86 without VNNI: see INT8_GRIDS), its weights are quantized so that no pair of them saturates, or failing
that to 7 bits.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from bertlite.quant import compiled as compiled_quant

# Fastest first, as measured by `python -m bench kernels` (see docs/int8.md); "auto" picks the first that works.
INT8_KERNELS = ("onednn", "int_mm", "dequantize")
# The kernels that also take uint8 activations at zero point 0: asymmetric inputs (each token's [min, max]
# to [0, top]) need no centring there, and oneDNN has no source zero point to compensate (measured in the
# model, 1,000 corpus texts, AMX: output.dense's GEMMs 145 -> 123 ms, intermediate.dense's 185 -> 169 ms).
# (torch._int_mm takes int8: centred.)
ZERO_POINT_0_KERNELS = ("onednn", "dequantize")


class Int8Grid(NamedTuple):
    """The integer ranges a kernel multiplies exactly: activations as uint8 in [0, activation_max]
    around zero_point, weights as int8 in [-weight_limit, weight_limit], and where pair_limit is set,
    each row's weights k and k + 1 (k even) with positive parts, and negative parts, summing to at
    most pair_limit."""

    activation_max: int
    weight_limit: int
    pair_limit: int | None = None

    @property
    def zero_point(self) -> int:
        """The symmetric activations' zero point: the middle of [0, activation_max]."""
        return (self.activation_max + 1) // 2  # 128, or 64 for 7-bit activations

    @property
    def activation_bits(self) -> int:
        """Bits of the activations (8, or 7 on a reduced grid)."""
        return self.activation_max.bit_length()  # 255: 8, 127: 7

    @property
    def weight_bits(self) -> int:
        """Bits of the weights, sign included (8, or 7 on a reduced grid)."""
        return self.weight_limit.bit_length() + 1  # with the sign: 127: 8, 63: 7

    @property
    def reduced(self) -> bool:
        """Fewer than 8 bits for the activations or the weights."""
        return self.activation_bits < 8 or self.weight_bits < 8


FULL_GRID = Int8Grid(255, 127)
# Tried in order, the first exact one used. Without VNNI (AVX2, AVX-512 before Cascade Lake) x86 int8
# dot products sum pairs of adjacent u8 x s8 products in int16 (vpmaddubsw), which saturates past
# 32767 (255 x 127 x 2 is 64770). Three ways to keep every pair below it:
# - 8-bit weights whose pairs sum to at most 128 (255 x 128 = 32640): each row's scale covers its
#   widest pair instead of its largest weight (all-MiniLM-L6-v2's rows lose 0.35 bit on average);
# - u8 up to 127 (32258; fbgemm's reduce_range);
# - weights in [-63, 63] (32130).
# Bounded pairs come first: of the three it stays closest to the full grid's accuracy (docs/int8.md,
# `python -m bench grids`).
INT8_GRIDS = (FULL_GRID, Int8Grid(255, 127, pair_limit=128), Int8Grid(127, 127), Int8Grid(255, 63))
_grids: dict[str, Int8Grid | None] = {}
REDUCED_GRID_NOTE = (
    "its int8 kernels are exact only with 7-bit activations or weights, and the vectors drift more from "
    "float32's: measured on all-MiniLM-L6-v2, 1,000 corpus texts, with 7-bit activations, min / mean cosine "
    "0.9973 / 0.9990 (0.9945 / 0.9960 on texts of 2-3 tokens), vs 0.9989 / 0.9996 (0.9980 / 0.9986) with 8 bits; "
    "kernel='dequantize' keeps 8 bits, at about float32's speed"
)


def int8_grid(kernel: str) -> Int8Grid | None:
    """Find the integer ranges on which `kernel` multiplies exactly on this machine (probed once).

    Args:
        kernel: one of INT8_KERNELS.

    Returns:
        The first of INT8_GRIDS on which `kernel` gives the exact int8 product here, or None where it
        gives none.

    Raises:
        ValueError: an unknown kernel.
    """
    if kernel not in INT8_KERNELS:
        raise ValueError(f"kernel={kernel!r} is not one of {', '.join(('auto', *INT8_KERNELS))}")
    if kernel not in _grids:
        _grids[kernel] = next((grid for grid in INT8_GRIDS if _exact(kernel, grid)), None)
    return _grids[kernel]


def _exact(kernel: str, grid: Int8Grid) -> bool:
    # Two depths, so that a kernel whose blocking along K changed past 64 would show it; at 256 the
    # largest sum (255 x 127 x 256) is still exact in float32, as "dequantize" needs.
    return all(_exact_at(kernel, grid, depth) for depth in (64, 256))


def _exact_at(kernel: str, grid: Int8Grid, depth: int) -> bool:
    generator = torch.Generator().manual_seed(depth)
    zero_point, limit = grid.zero_point, grid.weight_limit
    x = torch.randint(0, grid.activation_max + 1, (6, depth), dtype=torch.uint8, generator=generator)
    x[0] = grid.activation_max  # the largest product a weight can meet
    if grid.pair_limit is None:
        weight = torch.randint(-limit, limit + 1, (24, depth), dtype=torch.int8, generator=generator)
        weight[0], weight[1] = limit, -limit
    else:  # every pair at its limit, and rows where any other pairing than (k, k + 1), k even, saturates
        first = torch.randint(grid.pair_limit - limit, limit + 1, (24, depth // 2), generator=generator)
        sign = torch.randint(0, 2, (24, depth // 2), generator=generator) * 2 - 1
        weight = (torch.stack([first, grid.pair_limit - first], dim=-1) * sign[..., None]).view(24, depth)
        small = grid.pair_limit - limit
        weight[0] = torch.tensor([limit, small] * (depth // 2))
        weight[2] = torch.tensor([small, limit, limit, small] * (depth // 4))
        weight[1], weight[3] = -weight[0], -weight[2]
        weight = weight.to(torch.int8)
    try:
        packed = _pack(kernel, weight)
        return all(
            torch.equal(
                _GEMMS[kernel](x, zp, packed, torch.ones(24)),
                ((x.to(torch.int32) - zp) @ weight.to(torch.int32).T).to(torch.float32),
            )
            for zp in ((zero_point, 0) if kernel in ZERO_POINT_0_KERNELS else (zero_point,))
        )
    except (AttributeError, NotImplementedError, RuntimeError):
        return False


def describe_int8() -> dict[str, object]:
    """Describe what dtype="int8" runs here (kernel "auto").

    Returns:
        {"kernel", "grid" (Int8Grid as a dict), "compile_quantization" (how inputs are quantized; not
        probed here: compiling takes seconds), "summary" (one line saying all of it)}.
    """
    kernel = resolve_kernel("auto")
    grid = int8_grid(kernel)
    if not grid.reduced:
        bits = "8-bit activations and weights"
        if grid.pair_limit is not None:
            limit = grid.pair_limit
            bits += f", each row's weights k and k + 1 summing to at most {limit} per sign (its int16 pair sums)"
    else:
        bits = f"{grid.activation_bits}-bit activations, {grid.weight_bits}-bit weights: the vectors drift more "
        bits += "(Int8PrecisionWarning)"
    if compiled_quant.OP.enabled_by_environment():
        quantizing = (
            "inputs quantized and outputs scaled by C++ ops where they build, check and time faster, else by eager "
            "ops (a torch.compile kernel where asked for: quantize_int8(compile_quantization=True))"
        )
    else:
        quantizing = "inputs quantized and outputs scaled by eager ops (BERTLITE_INT8_COMPILE=0)"
    summary = f"kernel {kernel}, {bits}; {quantizing}"
    return {"kernel": kernel, "grid": grid._asdict(), "compile_quantization": quantizing, "summary": summary}


def int8_kernel_available(kernel: str) -> bool:
    """Whether `kernel` (one of INT8_KERNELS) runs on this machine and gives the exact int8 product (probed once).

    Raises:
        ValueError: an unknown kernel.
    """
    return int8_grid(kernel) is not None


def resolve_kernel(kernel: str) -> str:
    """Resolve a kernel name.

    Args:
        kernel: one of INT8_KERNELS, or "auto".

    Returns:
        `kernel`, or for "auto" the fastest one that works here.

    Raises:
        ValueError: a named kernel that does not work here, or an unknown name.
    """
    if kernel == "auto":
        return next(k for k in INT8_KERNELS if int8_kernel_available(k))
    if not int8_kernel_available(kernel):
        raise ValueError(f"int8 kernel {kernel!r} does not work on this machine; use kernel='auto'")
    return kernel


def _pack(kernel: str, weight: Tensor) -> Tensor:
    """The weight as the kernel wants it. oneDNN's op must get its own packed form: a plain tensor crashes it."""
    if kernel == "onednn":
        if not torch.backends.mkldnn.is_available():
            raise RuntimeError("this torch build has no oneDNN")
        return torch.ops.onednn.qlinear_prepack(weight, None)
    return weight


def _gemm_onednn(x: Tensor, zero_point: int, weight: Tensor, weight_scale: Tensor) -> Tensor:
    zero_points = torch.zeros_like(weight_scale, dtype=torch.long)
    # x_scale 1: the per-token scales are applied afterwards (the op takes one scale per tensor).
    return torch.ops.onednn.qlinear_pointwise(
        x, 1.0, zero_point, weight, weight_scale, zero_points, None, 1.0, 0, torch.float32, "none", [], ""
    )


def _as_int8(x: Tensor, zero_point: int) -> Tensor:
    """uint8 with zero point 128 or 64 -> int8 x - zero_point."""
    if zero_point == 128:  # u - 128 is u with its top bit flipped, read as int8
        return x.bitwise_xor(128).view(torch.int8)
    return x.view(torch.int8) - zero_point  # u <= 127 here: the same value as int8


def _gemm_int_mm(x: Tensor, zero_point: int, weight: Tensor, weight_scale: Tensor) -> Tensor:
    return torch._int_mm(_as_int8(x, zero_point), weight.T) * weight_scale


def _gemm_dequantize(x: Tensor, zero_point: int, weight: Tensor, weight_scale: Tensor) -> Tensor:
    return F.linear(x.to(torch.float32).sub_(zero_point), weight.to(torch.float32) * weight_scale[:, None])


# (M, K) uint8 activations and their zero point, packed weight, (N,) weight scales
# -> (M, N) float32 = (x - zero_point) @ weight.T * weight_scale
_GEMMS = {"onednn": _gemm_onednn, "int_mm": _gemm_int_mm, "dequantize": _gemm_dequantize}
