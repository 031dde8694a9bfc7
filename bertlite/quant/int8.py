"""Int8 inference: the encoder's Linears as int8 GEMMs that keep the vectors close to fp32.

Weights are int8 with one scale per output channel; activations are quantized per token
(one scale per row, computed at run time), so one outlier token costs only its own row
precision, not the whole batch's as with a per-tensor scale (torch.ao's quantize_dynamic).
Outlier channels, which every token shares, are moved from the activations into the
weights before quantizing (SmoothQuant, Xiao et al. 2022): x @ W.T = (x / s) @ (W * s).T,
with s from the weights and the activations of a small built-in calibration set.
Attention, LayerNorm, softmax and pooling stay fp32. Inference only. The per-token quantization
runs as eager ops (quantize_rows) or, for long jobs, as one kernel torch.compile builds
(bertlite.quant.compiled), which gives the same integers.

Kernels, chosen by name and probed once on this machine (never assumed from the CPU):
"onednn" (torch.ops.onednn.qlinear_pointwise on a prepacked weight: VNNI / AMX where the
CPU has them), "int_mm" (torch._int_mm) and "dequantize" (fp32 matmul on the dequantized
weight: the same numbers on any CPU, without the speed). `python -m bench kernels`
measures them. Where a kernel's int8 product saturates (x86 without VNNI: see INT8_GRIDS), its
weights are quantized so that no pair of them saturates, or failing that to 7 bits.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.errors import Int8PrecisionWarning
from bertlite.layers.onednn import restore
from bertlite.quant import compiled as compiled_quant
from bertlite.quant.allocator import keep_freed_memory
from bertlite.utils.warn import warn_user

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bertlite.models.bert import BertPreTrainedModel

# Fastest first, as measured by `python -m bench kernels` (see docs/int8.md); "auto" picks the first that works.
INT8_KERNELS = ("onednn", "int_mm", "dequantize")
# The kernels that also take uint8 activations at zero point 0: asymmetric inputs (each token's [min, max]
# to [0, top]) need no centring there, and oneDNN has no source zero point to compensate (measured in the
# model, 1,000 corpus texts, AMX: output.dense's GEMMs 145 -> 123 ms, intermediate.dense's 185 -> 169 ms).
# (torch._int_mm takes int8: centred.)
ZERO_POINT_0_KERNELS = ("onednn", "dequantize")
DEFAULT_ALPHA = 0.5  # SmoothQuant's migration strength: how much of an outlier moves into the weight
# The encoder Linears quantize_int8 replaces, by their path inside one BertLayer.
LAYER_LINEARS = ("attention.self.qkv", "attention.output.dense", "intermediate.dense", "output.dense")
# The Linears SmoothQuant rescales. Not output.dense: its input, GELU's output, has no shared outlier
# channels to move (measured on the corpus, all-MiniLM-L6-v2: min / mean cosine 0.99828 / 0.99929
# without, 0.99819 / 0.99922 with), and its 1 / s would cost a pass over the widest activation.
SMOOTHED_LINEARS = ("attention.self.qkv", "attention.output.dense", "intermediate.dense")
# The Linears whose input is quantized over each token's [min, max], on every grid: the one-sided ones.
# GELU's output is one-sided on every token; query|key|value's input (LayerNorm's output) on the [CLS]
# and [SEP] rows, whose massive channel puts their max at 3-20x their |min|, so a symmetric range wastes
# about half its levels on exactly the tokens that make a text of 2-3 tokens (all-MiniLM-L6-v2, full grid:
# min / mean cosine 0.9964 / 0.9978 -> 0.9980 / 0.9986 on such texts, corpus unchanged). The attention's
# context is two-sided: asymmetric there measured no better.
ASYMMETRIC_LINEARS = ("attention.self.qkv", "intermediate.dense", "output.dense")
# The Linears whose few outlier input channels stay float32. GELU's output in the first layers holds
# "massive activations": one or two fixed channels at 13-25 on the [CLS] token (median channel max 1.5;
# all-MiniLM-L6-v2, layers 0-3), so its per-token range is ~100x its other values, which then round to
# a few levels. A text of 2-3 tokens ("" is [CLS] [SEP]) is mostly that token: min cosine 0.995 -> 0.998
# with them kept out of the int8 range (measured on 14 such inputs; the corpus is unchanged or better).
OUTLIER_LINEARS = ("output.dense",)
# A channel is an outlier when its calibration max exceeds this multiple of the median channel's.
OUTLIER_RATIO = 6.0

# Calibration: short, varied English (prose, code talk, questions, lists, numbers), for the
# activation ranges SmoothQuant needs. Written for bertlite, not taken from any data set.
CALIBRATION_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "How do I open a file and read it line by line in Python?",
    "Returns a new list containing all items from the iterable in ascending order.",
    "The meeting was moved to Thursday at 3 p.m. because the room was booked.",
    "Raise ValueError if the argument is negative or not an integer.",
    "She bought two apples, three oranges and a loaf of bread for $7.50.",
    "What is the capital of Australia?",
    "Canberra is the capital city of Australia, not Sydney.",
    "The function returns None when the key is missing from the dictionary.",
    "Use a context manager so the socket is closed even if an exception is raised.",
    "It rained all night, and by morning the river had burst its banks.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "ERROR 404: the requested page could not be found on this server.",
    "Please restart your computer to finish installing the updates.",
    "The court ruled that the contract was void from the beginning.",
    "A binary search runs in O(log n) time on a sorted array.",
    "My flight from Berlin to Lisbon was delayed by two hours.",
    "Mix the flour and sugar, then add the eggs one at a time.",
    "The symphony's second movement is slow and melancholic.",
    "Set the environment variable PYTHONPATH before running the tests.",
    "Thread-safe queues let producers and consumers exchange items without locks.",
    "In 1969, Apollo 11 landed the first humans on the Moon.",
    "The patient reported mild headaches and occasional dizziness.",
    "This parameter is deprecated and will be removed in version 3.0.",
    "Why does my code print the same random number every time?",
    "Seed the generator once at startup, not inside the loop.",
    "The stock fell 4.2% after the company cut its yearly forecast.",
    "Children learn languages faster than adults, according to many studies.",
    "Encode the string as UTF-8 before writing it to the binary file.",
    "He whispered, 'Don't tell anyone where the key is hidden.'",
    "Glaciers in the Alps have lost a third of their volume since 1990.",
    "The decorator caches results so repeated calls with the same arguments are fast.",
    "Is it safe to eat raw cookie dough?",
    "The train to Paris leaves from platform 9 at 08:15.",
    "Our team won the match 3-1 after extra time.",
    "An abstract base class cannot be instantiated directly.",
    "The museum is closed on Mondays and public holidays.",
    "Wear sunscreen: UV radiation is strongest between 10 a.m. and 4 p.m.",
    "The algorithm compares adjacent elements and swaps them if they are out of order.",
    "I can't believe it's already December!",
    "Volcanic ash grounded hundreds of flights across northern Europe.",
    "The dataset contains 11,491 paragraphs from the documentation.",
    "Timeouts are given in seconds as a float; None means wait forever.",
    "The novel follows three generations of a family in rural Ireland.",
    "Compile the regular expression once and reuse the pattern object.",
    "Dolphins use echolocation to find food in murky water.",
    "Your password must contain at least eight characters and one digit.",
    "The committee approved the budget by a vote of seven to two.",
    "Generators produce values lazily, one at a time, as they are requested.",
    "The bridge was closed for repairs after cracks were found in its supports.",
    "How many tablespoons are in a cup?",
    "The server responded with status code 500 and an empty body.",
    "Vaccines train the immune system to recognise a specific pathogen.",
    "Press Ctrl+C to interrupt the running program.",
    "The painting was sold at auction for more than four million euros.",
    "Each worker process gets its own copy of the global variables.",
    "Heavy snow is expected in the mountains over the weekend.",
    "The lecture covers eigenvalues, eigenvectors and matrix diagonalisation.",
    "Return the number of non-overlapping occurrences of a substring.",
    "We hiked for six hours and reached the summit just before sunset.",
    "If the timestamp has no time zone, it is interpreted as local time.",
    "The orchestra tuned their instruments while the audience took their seats.",
    "Shallow copies share nested objects; deep copies duplicate them.",
    "Thank you for your order! It will ship within two business days.",
]


# --- kernels ---------------------------------------------------------------------------


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
# Exact products, all-MiniLM-L6-v2, min / mean cosine to float32 on 1,000 corpus texts | on texts of 2-3 tokens
# (python -m bench grids): 0.99865 / 0.99945 | 0.99764 / 0.99838 with bounded pairs, 0.99725 / 0.99901 |
# 0.99448 / 0.99602 with 7-bit activations, 0.99762 / 0.99881 | 0.99444 / 0.99660 with 7-bit weights,
# against 0.99894 / 0.99958 | 0.99799 / 0.99858 on the full grid.
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
    if compiled_quant.enabled_by_environment():
        after = f"{compiled_quant.BUILD_AFTER_TOKENS:,}"
        quantizing = f"inputs quantized by eager ops, by a torch.compile kernel after {after} tokens where it builds"
    else:
        quantizing = "inputs quantized by eager ops (BERTLITE_INT8_COMPILE=0)"
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


_fused_round: dict[str, bool] = {}


def _round_to_uint8(y: Tensor, zero_point: int) -> Tensor:
    """round(y + zero_point) as uint8 (y already in range; the zero point added in float32 first, as
    quantize_per_tensor does, so both ways give the same integers), in one pass where torch can:
    quantize_per_tensor rounds, shifts, clamps and narrows together (measured 2.4x faster than
    .to(torch.uint8) alone), and its quantized storage is read back as plain integers without a copy.
    torch has deprecated quantized tensors, so this is probed once (its notice silenced) and falls
    back to round, shift and cast when it goes."""
    if "quantize_per_tensor" not in _fused_round:
        probe = torch.tensor([[-0.6, 0.4, 2.5, 126.6]])
        expected = torch.tensor([[127, 128, 130, 255]], dtype=torch.uint8)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _fused_round["quantize_per_tensor"] = torch.equal(_quantized_as_plain(probe, 128), expected)
        except (AttributeError, NotImplementedError, RuntimeError):
            _fused_round["quantize_per_tensor"] = False
    if _fused_round["quantize_per_tensor"]:
        return _quantized_as_plain(y, zero_point)
    return y.add_(zero_point).round_().to(torch.uint8)


def _quantized_as_plain(y: Tensor, zero_point: int) -> Tensor:
    q = torch.quantize_per_tensor(y, 1.0, zero_point, torch.quint8)
    return torch.empty(0, dtype=torch.uint8).set_(q.untyped_storage(), 0, q.shape, q.stride())


def quantize_rows(
    x: Tensor, input_scale: Tensor | None, asymmetric: bool, activation_max: int, zero_point: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Quantize each row (token) of x in eager ops.

    Symmetric: q = round(x / scale + zero_point), scale = max|x| / (zero_point - 1); asymmetric:
    q = round((x - min) / scale), scale = (max - min) / activation_max.

    Args:
        x: (M, K) float.
        input_scale: (K,), multiplies x first; None: no scaling.
        asymmetric: quantize over each row's [min, max] instead of [-max|x|, max|x|].
        activation_max: the largest uint8 value (the grid's).
        zero_point: the symmetric zero point (the grid's).

    Returns:
        (M, K) uint8 q, (M, 1) scale and (M, 1) row minimum.
    """
    # Each pass over (M, K) costs more than all the (M, 1) arithmetic around it (the passes are
    # memory-bound), so: one reduction each for min and max, and every pass after them in place
    # on a tensor of our own, never a fresh (M, K) allocation per step.
    own = x.dtype != torch.float32 or input_scale is not None
    x = x.to(torch.float32) * input_scale if input_scale is not None else x.to(torch.float32)
    low, high = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)
    if not asymmetric:
        scale = torch.maximum(high, low.neg()).div_(zero_point - 1).clamp_(min=1e-30)
        y = x.mul_(scale.reciprocal()) if own else torch.mul(x, scale.reciprocal())
        return _round_to_uint8(y, zero_point), scale, low
    scale = (high - low).div_(activation_max).clamp_(min=1e-30)
    y = x.sub_(low) if own else torch.sub(x, low)
    return _round_to_uint8(y.mul_(scale.reciprocal()), 0), scale, low


def _reference_rows(x: Tensor, input_scale: Tensor | None, asymmetric: bool) -> tuple[Tensor, Tensor]:
    """The eager ops' uint8 values and scales on the full grid: what the compiled kernel must reproduce."""
    return quantize_rows(x, input_scale, asymmetric, 255, 0 if asymmetric else 128)[:2]


def _gemm_int_mm(x: Tensor, zero_point: int, weight: Tensor, weight_scale: Tensor) -> Tensor:
    return torch._int_mm(_as_int8(x, zero_point), weight.T) * weight_scale


def _gemm_dequantize(x: Tensor, zero_point: int, weight: Tensor, weight_scale: Tensor) -> Tensor:
    return F.linear(x.to(torch.float32).sub_(zero_point), weight.to(torch.float32) * weight_scale[:, None])


# (M, K) uint8 activations and their zero point, packed weight, (N,) weight scales
# -> (M, N) float32 = (x - zero_point) @ weight.T * weight_scale
_GEMMS = {"onednn": _gemm_onednn, "int_mm": _gemm_int_mm, "dequantize": _gemm_dequantize}


# --- the module ------------------------------------------------------------------------


class Int8Linear(nn.Module):
    """y = x @ W.T + b with W int8 per output channel and x quantized per token at run time.

    Input of any leading shape (..., in_features); output float32. Runs on the CPU in float32 only.
    """

    is_quantized = True  # checkpoint.save refuses a model holding one, without importing this module

    def __init__(
        self,
        weight: Tensor,
        weight_scale: Tensor,
        bias: Tensor | None,
        input_scale: Tensor | None = None,
        kernel: str = "auto",
        asymmetric: bool = False,
        compiled: bool = False,
        outliers: tuple[Tensor, Tensor] | None = None,
    ) -> None:
        """Wrap an already quantized weight; Int8Linear.from_linear quantizes a float Linear.

        Args:
            weight: (out_features, in_features) int8, within the kernel's grid (int8_grid).
            weight_scale: (out_features,) float scales, one per output channel.
            bias: (out_features,), or None.
            input_scale: (in_features,), when set, multiplies x before quantizing (SmoothQuant's 1 / s;
                the weight was built as W * s); None: no scaling.
            kernel: one of INT8_KERNELS, or "auto": the fastest that works here.
            asymmetric: each token's int8 range spans its own [min, max] instead of [-max|x|, max|x|],
                twice the resolution for one-sided inputs such as GELU's output; the offset is added back
                through the weight's row sums.
            compiled: quantize the input with bertlite.quant.compiled's kernel, once it is built.
            outliers: (channels (k,) long, weight (out_features, k) float) for input channels that stay
                float32: they are left out of each token's int8 range and multiplied by this weight
                (the int8 weight's columns there are 0); None: every channel is quantized.

        Raises:
            ValueError: a weight that is not int8 or not within the kernel's grid, or a kernel that does
                not work here.
        """
        super().__init__()
        self.kernel = resolve_kernel(kernel)
        self.out_features, self.in_features = weight.shape
        self.grid = int8_grid(self.kernel)
        limit = self.grid.weight_limit
        largest = int(weight.to(torch.int16).abs().max()) if weight.numel() else 0
        if weight.dtype != torch.int8 or largest > limit:
            raise ValueError(
                f"the {self.kernel!r} int8 kernel is exact here for int8 weights in [-{limit}, {limit}]; "
                f"got {weight.dtype} up to {largest} (use Int8Linear.from_linear)"
            )
        pair_limit = self.grid.pair_limit
        if pair_limit is not None and weight.numel() and (widest := int(widest_pairs(weight).max())) > pair_limit:
            raise ValueError(
                f"the {self.kernel!r} int8 kernel is exact here for int8 weights whose pairs (k, k + 1) sum to "
                f"at most {pair_limit} per sign; got a pair summing to {widest} (use Int8Linear.from_linear)"
            )
        # The plain int8 weight is kept only where the kernel reads it; oneDNN's packed copy replaces it.
        self.register_buffer("weight", weight if self.kernel != "onednn" else None)
        self.packed_weight = _pack(self.kernel, weight)
        self.register_buffer("weight_scale", weight_scale.to(torch.float32))
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32))
        self.register_buffer("input_scale", None if input_scale is None else input_scale.to(torch.float32))
        self.asymmetric = asymmetric
        # Quantize the input with bertlite.quant.compiled's kernel once it is built (the same numbers).
        self.compiled = compiled
        # What the GEMM subtracts from the uint8 activations: 0 for asymmetric ones where the kernel allows.
        self.zero_point = 0 if asymmetric and self.kernel in ZERO_POINT_0_KERNELS else self.grid.zero_point
        # sum_k W[n, k] in real units: what a per-token offset c contributes to output n (c * row sum).
        row_sums = weight.to(torch.float32).sum(dim=1) * self.weight_scale
        self.register_buffer("row_sums", row_sums if asymmetric else None)
        channels, outlier_weight = outliers if outliers is not None else (None, None)
        self.register_buffer("outlier_channels", channels)
        self.register_buffer("outlier_weight", None if outlier_weight is None else outlier_weight.to(torch.float32))

    def check_apply(self, fn: Callable[[Tensor], Tensor]) -> None:
        """Refuse a .to() / .half() / .cuda() that would move this layer off float32 on the CPU.

        Its packed weight (a oneDNN object, not a buffer) and its kernels live there.

        Args:
            fn: the function Module._apply would apply to every tensor.

        Raises:
            ValueError: `fn` moves tensors off the CPU or off float32.
        """
        probe = fn(torch.zeros(1))
        if probe.device.type != "cpu" or probe.dtype != torch.float32:
            raise ValueError(
                f"an int8-quantized model runs on the CPU with float32 activations; it cannot move to "
                f"{probe.dtype} on {probe.device} (quantize the float32 model after moving it, or load it again)"
            )

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Int8Linear:
        self.check_apply(fn)
        return super()._apply(fn, recurse)

    @classmethod
    @torch.no_grad()
    def from_linear(
        cls,
        linear: nn.Linear | Sequence[nn.Linear],
        smooth: Tensor | None = None,
        kernel: str = "auto",
        asymmetric: bool = False,
        smooth_folded: bool = False,
        compiled: bool = False,
        outlier_channels: Tensor | None = None,
    ) -> Int8Linear:
        """Quantize one Linear, or several with the same input concatenated on the output dim (q|k|v).

        Args:
            linear: an nn.Linear, or several with the same in_features.
            smooth: (in_features,) SmoothQuant's s; the weight is quantized as W * s and the input is
                multiplied by 1 / s at run time. None: no smoothing.
            kernel: one of INT8_KERNELS, or "auto".
            asymmetric: as in __init__.
            smooth_folded: the layer before already divides by s, so the input is not scaled here.
            compiled: quantize the input with bertlite.quant.compiled's kernel, once it is built.
            outlier_channels: (k,) input channels kept in float32 (see __init__'s outliers); None: none.
                Not with smooth.

        Returns:
            The Int8Linear.

        Raises:
            ValueError: outlier_channels with smooth.
        """
        linears = [linear] if isinstance(linear, nn.Linear) else list(linear)
        weight = torch.cat([m.weight.detach() for m in linears]).to(torch.float32)  # (N, K)
        has_bias = [m.bias is not None for m in linears]
        bias = None
        if any(has_bias):
            bias = torch.cat(
                [m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
            )
        if smooth is not None:
            weight = weight * smooth
        outliers = None
        if outlier_channels is not None and len(outlier_channels):
            if smooth is not None:
                raise ValueError("outlier_channels cannot go with smooth: the kept channels would need 1 / s too")
            channels = torch.as_tensor(outlier_channels, dtype=torch.long)
            outliers = (channels, weight[:, channels].clone())
            weight = weight.index_fill(1, channels, 0.0)  # their products come from the float32 weight
        kernel = resolve_kernel(kernel)
        grid = int8_grid(kernel)
        qweight, weight_scale = quantize_per_channel(weight, grid.weight_limit, grid.pair_limit)
        input_scale = None if smooth is None or smooth_folded else 1.0 / smooth
        return cls(qweight, weight_scale, bias, input_scale, kernel, asymmetric, compiled, outliers)

    def quantize_input(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Quantize the input per token, rounding to nearest.

        uint8 either way: oneDNN's x86 int8 kernels take u8 activations, and with s8 ones some ISAs fall
        back to a far slower reference kernel. With self.compiled, in one compiled kernel
        (bertlite.quant.compiled), the same numbers.

        Args:
            x: (M, K) float.

        Returns:
            (M, K) uint8 q, and (M, 1) per-token scale and offset: x ~ scale * (q - zp) (symmetric,
            offset None) or x ~ scale * (q - zp) + offset (asymmetric), zp = self.zero_point
            (symmetric: the grid's, 128 or 64 for 7-bit activations; asymmetric: 0 where the kernel
            takes it).
        """
        top, zero_point = self.grid.activation_max, self.zero_point
        rows = compiled_quant.quantize(x, self.input_scale, self.asymmetric, top, zero_point) if self.compiled else None
        q, scale, low = rows or quantize_rows(x, self.input_scale, self.asymmetric, top, zero_point)
        if not self.asymmetric:
            return q, scale, None
        # x ~ scale * q + low, so x ~ scale * (q - zp) + offset with offset = low + zp * scale.
        return q, scale, low.add_(scale, alpha=zero_point) if zero_point else low

    def gemm(self, qx: Tensor) -> Tensor:
        """Multiply quantized input by the int8 weight.

        Args:
            qx: (M, K) uint8 in [0, grid.activation_max] with zero point self.zero_point (what
                quantize_input gives).

        Returns:
            (M, N) float32 products times the weight scales (no token scale, no bias).
        """
        return _GEMMS[self.kernel](qx, self.zero_point, self.packed_weight, self.weight_scale)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """Compute x @ W.T + b, plus residual when given.

        Args:
            x: (..., in_features) float.
            residual: (..., out_features), added to the output: the residual add of the layer after
                rides on the scaling pass instead of costing one of its own; None: nothing added.

        Returns:
            (..., out_features) float32.

        Raises:
            ValueError: x or residual of the wrong shape.
        """
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Int8Linear expects (..., {self.in_features}) input, got {tuple(x.shape)}")
        leading = x.shape[:-1]
        if residual is not None and residual.shape != (*leading, self.out_features):
            raise ValueError(
                f"Int8Linear's residual must be {(*leading, self.out_features)}, got {tuple(residual.shape)}"
            )
        if x.numel() == 0:  # no tokens: the per-token reductions have nothing to reduce
            out = x.new_zeros(*leading, self.out_features, dtype=torch.float32)
            return out if residual is None else out + residual
        rows = x.reshape(-1, self.in_features)
        channels = self.outlier_channels
        if channels is None:
            qx, scale, offset = self.quantize_input(rows)
        else:
            kept = rows.index_select(1, channels)  # (M, k)
            if rows.requires_grad:
                qx, scale, offset = self.quantize_input(rows.index_fill(1, channels, 0.0))
            else:  # zeroed in place and put back: touches M x k values, not the whole input
                rows.index_fill_(1, channels, 0.0)
                try:
                    qx, scale, offset = self.quantize_input(rows)
                finally:
                    rows.index_copy_(1, channels, kept)
        out = self.gemm(qx)
        # products x token scale, plus the residual or else the bias, in one pass
        addend = residual.reshape(-1, self.out_features) if residual is not None else self.bias
        if addend is None:
            out.mul_(scale)
        elif torch.is_grad_enabled():  # autograd takes no out= (scale and a residual carry grad from LayerNorm)
            out = torch.addcmul(addend, out, scale)
        else:
            torch.addcmul(addend, out, scale, out=out)
        if offset is not None:
            # offset (M, 1) x row sums (N,), broadcast: an elementwise pass, at about a third of the time of
            # the same update as an (M, 2) @ (2, N) addmm_ (measured, AVX2, 1600 x 1536: 0.14 vs 0.42 ms)
            out.addcmul_(offset, self.row_sums)
        if residual is not None and self.bias is not None:
            out.add_(self.bias)
        if channels is not None:  # the float32 channels' products
            kept = kept.to(torch.float32)
            out = (
                torch.addmm(out, kept, self.outlier_weight.T)
                if out.requires_grad
                else out.addmm_(kept, self.outlier_weight.T)
            )
        return out.view(*leading, self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"smooth={self.input_scale is not None}, asymmetric={self.asymmetric}, kernel={self.kernel!r}, "
            f"activation_max={self.grid.activation_max}, weight_limit={self.grid.weight_limit}, "
            f"pair_limit={self.grid.pair_limit}, compiled={self.compiled}, "
            f"float32_channels={0 if self.outlier_channels is None else len(self.outlier_channels)}"
        )


def quantize_per_channel(weight: Tensor, limit: int = 127, pair_limit: int | None = None) -> tuple[Tensor, Tensor]:
    """Quantize a weight symmetrically, one scale per output row.

    Args:
        weight: (N, K) float.
        limit: the largest int8 magnitude (default 127).
        pair_limit: also keep every pair's same-sign sum (widest_pairs) within it; None: no pair limit.

    Returns:
        (N, K) int8 in [-limit, limit] and (N,) float scales.
    """
    scale = weight.abs().amax(dim=1).div_(limit)
    if pair_limit is not None:  # each weight rounds by at most 1/2, so pairs at pair_limit - 1 stay within it
        scale = torch.maximum(scale, widest_pairs(weight).div_(pair_limit - 1))
    scale = scale.clamp_(min=1e-30)
    return torch.div(weight, scale[:, None]).round_().to(torch.int8), scale


def widest_pairs(weight: Tensor) -> Tensor:
    """Find each row's widest pair: the pairs an int8 dot product without VNNI sums in int16.

    Args:
        weight: (N, K).

    Returns:
        (N,): per row, the largest sum of the positive parts, or of the negative parts' magnitudes, of
        weights k and k + 1 (k even).
    """
    weight = weight.to(torch.float32)
    pairs = F.pad(weight, (0, weight.shape[1] % 2)).view(weight.shape[0], -1, 2)
    widest = torch.maximum(pairs.clamp(min=0).sum(dim=-1), pairs.clamp(max=0).sum(dim=-1).neg_())
    return widest.amax(dim=1)


class FusedIntoQKV(nn.Module):
    """Stands where query / key / value were once they live in attention.self.qkv: holds no weights."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError(f"{self.name} was quantized into attention.self.qkv; call qkv (the model does)")


# --- the model -------------------------------------------------------------------------


def is_quantized(model: nn.Module) -> bool:
    """Whether `model` holds any Int8Linear."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


def check_quantize(quantize: str | None, dtype: object) -> bool:
    """Check Embedder's int8 options.

    Args:
        quantize: "int8" or None.
        dtype: Embedder's dtype argument ("int8" also asks for int8).

    Returns:
        Whether the options ask for int8.

    Raises:
        ValueError: an unknown quantize, or quantize="int8" with a dtype other than float32 or "auto".
    """
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize={quantize!r} is not supported (use 'int8' or None)")
    if quantize == "int8" and dtype not in (None, "auto", "int8", "float32", torch.float32):
        raise ValueError(f"quantize='int8' quantizes the float32 weights; dtype={dtype!r} cannot go with it")
    return quantize == "int8" or dtype == "int8"


@torch.no_grad()
def quantize_int8(
    model: BertPreTrainedModel,
    tokenizer: Tokenizer | None = None,
    *,
    kernel: str = "auto",
    alpha: float | None = DEFAULT_ALPHA,
    calibration_texts: Sequence[str] | None = None,
    keep_fp32: Iterable[str] = (),
    asymmetric: Iterable[str] | None = None,
    compile_quantization: bool | None = None,
) -> BertPreTrainedModel:
    """Replace the encoder's Linears by Int8Linear, in place, and return the model.

    q/k/v become one Int8Linear at attention.self.qkv (their places hold FusedIntoQKV, so no
    fp32 copy stays alive); attention.output.dense, intermediate.dense and output.dense become
    Int8Linear. Raises glibc's malloc thresholds for the whole process
    (bertlite.quant.allocator.keep_freed_memory; BERTLITE_KEEP_FREED_MEMORY=0 keeps them).

    Args:
        model: a float32 bertlite BERT model on the CPU, not yet quantized.
        tokenizer: runs the calibration texts through the fp32 model for SmoothQuant's activation
            ranges; without it, or with alpha=None, no smoothing.
        kernel: one of INT8_KERNELS, or "auto": the fastest that works here.
        alpha: SmoothQuant's migration strength, between 0 and 1 (default DEFAULT_ALPHA); None: no
            smoothing.
        calibration_texts: the texts for the activation ranges; None: CALIBRATION_TEXTS.
        keep_fp32: Linears to leave in fp32, by their path in one layer (LAYER_LINEARS) or in the
            model ("encoder.layer.3.output.dense").
        asymmetric: Linears, named the same way, whose input is quantized over each token's
            [min, max]; None: ASYMMETRIC_LINEARS, the one-sided ones.
        compile_quantization: quantize each Linear's input in one kernel compiled by torch.compile
            (bertlite.quant.compiled: the same numbers as the eager ops, faster, but seconds to build).
            None (default): built when an Embedder job will bring the process's int8 tokens to
            compiled_quant.BUILD_AFTER_TOKENS (count_int8_tokens), the eager ops running until then,
            where it cannot build, and with BERTLITE_INT8_COMPILE=0; True: built here, and a machine
            where it cannot build is refused; False: the eager ops only.

    Returns:
        The model, quantized in place.

    Raises:
        TypeError: not a bertlite BERT model, or a string for keep_fp32 / asymmetric.
        ValueError: a model already quantized, not float32 on the CPU, alpha out of range, unknown
            Linear names, a kernel that does not work here, or compile_quantization=True where it
            cannot build.
    """
    kernel = resolve_kernel(kernel)
    base = model.base_model
    encoder = getattr(base, "encoder", None)
    _check_model(model, encoder, alpha)
    restore(model)  # quantize the plain Linears (and calibrate on them), not layers.onednn's modules
    keep = _check_names("keep_fp32", keep_fp32, len(encoder.layer))
    keep_freed_memory()  # see bertlite.quant.allocator: the int8 forwards' page faults cost a third of their time
    grid = int8_grid(kernel)
    one_sided = _check_names("asymmetric", ASYMMETRIC_LINEARS if asymmetric is None else asymmetric, len(encoder.layer))
    if grid.reduced:
        warn_user(f"int8 on this CPU: {REDUCED_GRID_NOTE}", Int8PrecisionWarning)
    compiled = compile_quantization is not False and compiled_quant.enabled_by_environment()
    if compile_quantization and not build_compiled_quantization():
        raise ValueError(f"compile_quantization=True, but it does not work here: {compiled_quant.reason()}")
    ranges = {}
    if tokenizer is not None and alpha is not None:
        ranges = activation_ranges(
            model, tokenizer, CALIBRATION_TEXTS if calibration_texts is None else calibration_texts
        )
    for i, layer in enumerate(encoder.layer):
        attention = layer.attention.self
        targets = {
            "attention.self.qkv": [attention.query, attention.key, attention.value],
            "attention.output.dense": [layer.attention.output.dense],
            "intermediate.dense": [layer.intermediate.dense],
            "output.dense": [layer.output.dense],
        }
        chosen = [name for name in targets if name not in keep and f"encoder.layer.{i}.{name}" not in keep]
        smooth = {
            name: smoothing_factors(ranges[targets[name][0]], targets[name], alpha)
            for name in chosen
            if ranges and name in SMOOTHED_LINEARS
        }
        # The attention's context is probs @ value, so dividing value's output channels by s divides the
        # context's: attention.output.dense's smoothing then costs nothing at run time.
        fold = "attention.self.qkv" in chosen and "attention.output.dense" in smooth
        if fold:
            targets["attention.self.qkv"][2] = _divided_rows(attention.value, smooth["attention.output.dense"])
        for name in chosen:
            linears = targets[name]
            asym = name in one_sided or f"encoder.layer.{i}.{name}" in one_sided
            folded = fold and name == "attention.output.dense"
            outliers = outlier_channels(ranges[linears[0]]) if ranges and name in OUTLIER_LINEARS else None
            quantized = Int8Linear.from_linear(
                linears,
                smooth.get(name),
                kernel,
                asym,
                smooth_folded=folded,
                compiled=compiled,
                outlier_channels=outliers,
            )
            if name == "attention.self.qkv":
                attention.qkv = quantized
                for part in ("query", "key", "value"):
                    setattr(attention, part, FusedIntoQKV(f"encoder.layer.{i}.attention.self.{part}"))
            else:
                owner, _, attr = name.rpartition(".")
                block = layer.get_submodule(owner)
                setattr(block, attr, quantized)
                if hasattr(block, "fuses_residual"):  # attention.output, output: the residual add goes in
                    block.fuses_residual = True
    return model


def build_compiled_quantization() -> bool:
    """Build the compiled input-quantization kernel now (once per process; seconds).

    Rather than when a job reaches compiled_quant.BUILD_AFTER_TOKENS.

    Returns:
        Whether it works here (if not, compiled_quant.reason() says why).
    """
    return compiled_quant.build(_reference_rows)


def count_int8_tokens(model: nn.Module, tokens: int, upcoming: int = 0) -> None:
    """Count tokens towards building the compiled quantization kernel (compiled_quant.count).

    Embedder calls this before tokens go through the model. They count only where the model's
    Int8Linears use the compiled kernel and it is not built yet.

    Args:
        model: the model about to run.
        tokens: the tokens about to go through it.
        upcoming: how many more tokens the same job is expected to bring.
    """
    if compiled_quant.built():
        return
    if any(isinstance(m, Int8Linear) and m.compiled for m in model.modules()):
        compiled_quant.count(tokens, _reference_rows, upcoming)


def _check_model(model: nn.Module, encoder: nn.Module | None, alpha: float | None) -> None:
    if encoder is None:
        raise TypeError(f"quantize_int8 takes a bertlite BERT model, got {type(model).__name__}")
    if is_quantized(model):
        raise ValueError("the model is already quantized (it holds Int8Linear modules)")
    weight = model.base_model.embeddings.word_embeddings.weight
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise ValueError(f"quantize_int8 needs a float32 model on the CPU, got {weight.dtype} on {weight.device}")
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha!r} must be between 0 and 1 (or None for no smoothing)")


def _divided_rows(linear: nn.Linear, divisor: Tensor) -> nn.Linear:
    """A new Linear whose output channel j is the old one's divided by divisor[j] (the old one is unchanged)."""
    divided = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    divided.weight = nn.Parameter(linear.weight.detach() / divisor[:, None], requires_grad=False)
    if linear.bias is not None:
        divided.bias = nn.Parameter(linear.bias.detach() / divisor, requires_grad=False)
    return divided


def _check_names(option: str, names: Iterable[str], layers: int) -> set[str]:
    if isinstance(names, str):
        raise TypeError(f"{option} takes a list of Linear names, got the string {names!r}")
    chosen = set(names)
    known = {f"encoder.layer.{i}.{name}" for i in range(layers) for name in LAYER_LINEARS}
    unknown = sorted(name for name in chosen if name not in LAYER_LINEARS and name not in known)
    if unknown:
        raise ValueError(
            f"{option}: {', '.join(map(repr, unknown))} not among the quantizable Linears "
            f"({', '.join(LAYER_LINEARS)}, or encoder.layer.<i>.<name> for i < {layers})"
        )
    return chosen


def outlier_channels(activation: Tensor, ratio: float = OUTLIER_RATIO) -> Tensor:
    """Find the input channels whose calibration maximum is an outlier (see OUTLIER_LINEARS).

    Args:
        activation: (K,) max |input| per input channel (activation_ranges).
        ratio: an outlier's maximum exceeds ratio x the median channel's.

    Returns:
        (k,) long channel indices, often empty.
    """
    return (activation > ratio * activation.median()).nonzero().flatten()


def smoothing_factors(activation: Tensor, linears: Sequence[nn.Linear], alpha: float) -> Tensor:
    """Compute SmoothQuant's s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha), per input channel j.

    Args:
        activation: (K,) max |input| per input channel (activation_ranges).
        linears: the Linears that share that input (their weights' column maxima are combined).
        alpha: the migration strength, between 0 and 1.

    Returns:
        (K,) factors s.
    """
    weight = torch.cat([m.weight.detach().abs().amax(dim=0, keepdim=True) for m in linears]).amax(dim=0)
    s = activation.clamp(min=1e-5).pow(alpha) / weight.clamp(min=1e-5).pow(1 - alpha)
    return s.clamp(min=1e-5)


def activation_ranges(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str]) -> dict[nn.Linear, Tensor]:
    """Measure max |input| per input channel of every encoder Linear in the fp32 model.

    Over the real tokens of `texts`, run as one padded batch; padding rows are left out.

    Args:
        model: the fp32 model.
        tokenizer: its tokenizer.
        texts: the calibration texts.

    Returns:
        Each encoder nn.Linear -> (in_features,) maxima.

    Raises:
        ValueError: texts is empty or holds something other than str.
    """
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("calibration_texts must be a non-empty list of str")
    limit = model.config.max_position_embeddings
    encodings = [e.ids[:limit] for e in tokenizer.encode_batch(list(texts))]
    width = max(len(ids) for ids in encodings)
    ids = torch.zeros(len(encodings), width, dtype=torch.long)
    mask = torch.zeros(len(encodings), width, dtype=torch.bool)
    for row, tokens in enumerate(encodings):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = True
    ranges: dict[nn.Linear, Tensor] = {}

    def record(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        channel_max = inputs[0].detach()[mask].abs().amax(dim=0)  # (K,) over real tokens only
        ranges[module] = torch.maximum(ranges[module], channel_max) if module in ranges else channel_max

    hooks = [
        m.register_forward_pre_hook(record) for m in model.base_model.encoder.modules() if isinstance(m, nn.Linear)
    ]
    was_training = model.training
    model.eval()
    try:
        model.base_model(input_ids=ids, attention_mask=mask.long(), token_type_ids=torch.zeros_like(ids))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return ranges
