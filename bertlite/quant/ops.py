"""Int8Linear's passes over its activations as C++ ops (ops.cpp), built once per process where a compiler is.

Eagerly, an Int8Linear reads and writes its activations once per op: each token's min and max, the
quantizing multiply and round, then the output's token scale, offset, bias, residual add and activation,
and its float32 channels zeroed, put back and multiplied by their own GEMM. `quantize_rows` does the
input's in one pass per row (its float32 channels count as zeros, as the eager ops zero them, and their
values come out beside the codes) and `dequantize` the output's, the float32 channels' products and the
activation included (GELU as accurate as torch's float32 GELU). They are checked against the eager ops
on a probe when built (a mismatch keeps the eager ops) and in tests: the same integers, the same outputs
within float32 rounding. They are used unless the eager ops were timed faster on this CPU, once per
machine (OP, a bertlite.utils.native.NativeOp).

Built with torch's C++ extension tools (a C++ compiler and ninja), for this CPU's vector width: the
first build takes about 10 s, later processes load the cached library in about a second. quantize_int8
builds them before it quantizes, and they are used before torch.compile's kernel.
BERTLITE_INT8_OPS=0 leaves it out (BERTLITE_INT8_COMPILE=0 leaves out every compiled kernel).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from bertlite.utils import native
from bertlite.utils.graph import recording_graph
from bertlite.utils.measured import Rounds, time_rounds

# The activations `dequantize` computes, by their config name (ACT2FN's key), and their code in ops.cpp.
ACTIVATIONS = {"gelu": 1}
_SOURCE = Path(__file__).with_name("ops.cpp")
_NO_CHANNELS = torch.empty(0, dtype=torch.long)  # quantize_rows with no float32 channels
# The timed shape: a batch of tokens through a BERT-base-sized feed-forward's middle.
TIMED_TOKENS, TIMED_WIDTH = 256, 3072

# The ops' life in this process (the lambdas read this module's functions when called, so tests can swap them).
OP = native.NativeOp(
    load=lambda: _load(),
    check=lambda ops: _check(ops),
    variables=("BERTLITE_INT8_OPS", "BERTLITE_INT8_COMPILE"),
    timing=native.Timing(
        f"int8 passes: C++ ops vs eager ops, {TIMED_TOKENS} x {TIMED_WIDTH}",
        ("ops", "eager"),
        "the eager ops",
        lambda ops: time_passes(ops),
    ),
)
# The ops' verbs under this module's names: build() (build, check and time once per process; models quantized
# after it run them), built(), reason().
build, built, reason = OP.build, OP.built, OP.reason


def usable() -> bool:
    """Whether this forward can run the ops: built, no grad (int8 is inference only), no graph recorded."""
    return OP.built() and not torch.is_grad_enabled() and not recording_graph()


def time_passes(ops: object) -> Rounds:
    """Time the passes around the feed-forward's two GEMMs as the ops and as the eager ops, interleaved:
    the intermediate's output (token scale, offset, bias, GELU) and the output Linear's input quantization.

    Args:
        ops: torch.ops.bertlite_int8.

    Returns:
        The Rounds of "ops" and "eager" (bertlite.utils.measured.time_rounds).
    """
    from bertlite.layers.activations import ACT2FN
    from bertlite.quant.rows import quantize_rows as eager_rows

    generator = torch.Generator().manual_seed(0)
    products = torch.randn(TIMED_TOKENS, TIMED_WIDTH, generator=generator) * 100
    scale, offset = torch.rand(TIMED_TOKENS, 1, generator=generator) * 0.01, torch.randn(TIMED_TOKENS, 1)
    row_sums, bias = torch.randn(TIMED_WIDTH, generator=generator), torch.randn(TIMED_WIDTH, generator=generator)
    gelu = ACT2FN["gelu"]

    def with_ops() -> None:
        out = ops.dequantize(products.clone(), scale, offset, row_sums, bias, None, None, None, ACTIVATIONS["gelu"])  # type: ignore[attr-defined]
        ops.quantize_rows(out, None, _NO_CHANNELS, True, 255, 0)  # type: ignore[attr-defined]

    def eager() -> None:
        out = torch.addcmul(bias, products.clone(), scale).addcmul_(offset, row_sums)
        eager_rows(gelu(out), None, True, 255, 0)

    with torch.inference_mode():
        return time_rounds({"ops": with_ops, "eager": eager})


def _load() -> object:
    """Build ops.cpp for this CPU (or find it built in torch's extension cache) and load it: torch.ops.bertlite_int8."""
    native.load("bertlite_int8_ops", _SOURCE)
    return torch.ops.bertlite_int8


def _check(ops: object) -> str | None:
    """Why the ops' numbers differ from the eager ops' on a probe, or None where they agree: at most one
    uint8 step apart on at most 1 value in 1,000, scales and outputs within float32 rounding."""
    from bertlite.layers.activations import ACT2FN
    from bertlite.quant.rows import quantize_rows as eager_rows

    generator = torch.Generator().manual_seed(0)
    # Rows with an outlier channel and one-sided ones; a width that leaves the vector loops a scalar tail.
    x = torch.randn(97, 401, generator=generator) * 3
    x[:, 7] *= 40
    x[48:] = x[48:].clamp(min=-0.17)
    smooth = torch.rand(401, generator=generator) + 0.5
    channels = torch.tensor([7, 400])
    forms = ((False, None, _NO_CHANNELS), (False, smooth, _NO_CHANNELS), (True, None, channels))
    for asymmetric, input_scale, skipped in forms:
        zero_point = 0 if asymmetric else 128
        reference = x.index_fill(1, skipped, 0.0)
        q, scale, low = eager_rows(reference, input_scale, asymmetric, 255, zero_point)
        q_ops, scale_ops, low_ops, kept = ops.quantize_rows(x, input_scale, skipped, asymmetric, 255, zero_point)  # type: ignore[attr-defined]
        steps = (q.to(torch.int16) - q_ops.to(torch.int16)).abs()
        close = torch.allclose(scale_ops, scale, rtol=1e-6, atol=0) and torch.allclose(low_ops, low, rtol=1e-6)
        if int(steps.max()) > 1 or int(steps.count_nonzero()) * 1000 > q.numel() or not close:
            return "its uint8 values differ from the eager ops' on this machine"
        if not torch.equal(kept, x[:, skipped]):
            return "the float32 channels' inputs it gives differ from the input's on this machine"
    products = torch.randn(97, 401, generator=generator) * 100
    scale, offset = torch.rand(97, 1, generator=generator) * 0.02, torch.randn(97, 1, generator=generator)
    row_sums, bias = torch.randn(401, generator=generator), torch.randn(401, generator=generator)
    residual = torch.randn(97, 401, generator=generator)
    kept, kept_weight = torch.randn(97, 2, generator=generator) * 20, torch.randn(2, 401, generator=generator)
    outputs = bias + products * scale + offset * row_sums
    expected = (
        (ACT2FN["gelu"](outputs), None, None, "gelu"),
        (ACT2FN["gelu"](torch.addmm(outputs, kept, kept_weight)), None, kept, "gelu"),
        (residual + products * scale + offset * row_sums + bias, residual, None, None),
    )
    for reference, added, channels, activation in expected:
        weight = None if channels is None else kept_weight
        code = ACTIVATIONS.get(activation, 0)
        out = ops.dequantize(products.clone(), scale, offset, row_sums, bias, added, channels, weight, code)  # type: ignore[attr-defined]
        if not torch.allclose(out, reference, rtol=1e-5, atol=1e-5 * float(reference.abs().max())):
            return "its outputs differ from the eager ops' on this machine"
    return None


def quantize_rows(
    x: Tensor, input_scale: Tensor | None, skipped: Tensor | None, asymmetric: bool, top: int, zero_point: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """bertlite.quant.rows.quantize_rows in one pass per row, the channels in `skipped` counted as zeros.

    Args:
        x: (M, K) float32, contiguous.
        input_scale: (K,) multiplies x first; None: no scaling.
        skipped: (k,) int64 channels left out of each row's range (quantized as zeros); None: none.
        asymmetric, top, zero_point: as quantize_rows' activation_max and zero_point.

    Returns:
        (M, K) uint8 q, (M, 1) scale, (M, 1) row minimum, and (M, k) x's values on the skipped channels (what
        the Linear multiplies in float32; (M, 0) with none).
    """
    channels = _NO_CHANNELS if skipped is None else skipped
    return OP.state["ops"].quantize_rows(x, input_scale, channels, asymmetric, top, zero_point)  # type: ignore[union-attr]


def dequantize(
    products: Tensor,
    scale: Tensor,
    offset: Tensor | None,
    row_sums: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    activation: str | None,
    kept: Tensor | None = None,
    kept_weight: Tensor | None = None,
) -> Tensor:
    """Int8Linear's output from its GEMM's products in one pass, in place.

    Args:
        products: (M, N) float32 contiguous, overwritten.
        scale: (M, 1) per token.
        offset: (M, 1) per token with row_sums (N,): adds offset x row_sums; None: both None.
        bias: (N,), or None.
        residual: (M, N) contiguous, added; None: nothing added. Not with an activation.
        activation: a name in ACTIVATIONS applied last, or None.
        kept: (M, k) the inputs on the Linear's float32 channels, with kept_weight (k, N) their weight
            (contiguous): adds kept @ kept_weight before the activation; None: both None.

    Returns:
        products, now activation(products x scale + bias + offset x row_sums + kept @ kept_weight) or
        products x scale + residual + offset x row_sums + bias + kept @ kept_weight.
    """
    code = ACTIVATIONS[activation] if activation else 0
    return OP.state["ops"].dequantize(products, scale, offset, row_sums, bias, residual, kept, kept_weight, code)  # type: ignore[union-attr]
