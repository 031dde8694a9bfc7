"""Int8Linear's per-token input quantization compiled into one kernel (torch.compile), where that works.

Eagerly, quantizing a (tokens, K) input costs one memory pass per op: SmoothQuant's scale, min, max,
shift, multiply, round. Inductor fuses them into one row reduction and one quantizing pass. The
kernel computes the eager ops' float32 values op for op (inductor's default C++ flags keep IEEE
float32 arithmetic: no unsafe math optimizations, no FMA contraction), and adds the zero point
before rounding as quantize_per_tensor does,
so it gives bitwise the same uint8 values and scales: checked on a probe when it is built (a
mismatch keeps the eager ops) and in tests. Whether it runs changes no vector.

It needs a working torch.compile (inductor and a C++ compiler), and its build takes seconds, so it is
built only when asked for, before the model is quantized (quantize_int8 decides then, for every token the
model will see): build(), or quantize_int8(compile_quantization=True) where bertlite.quant.ops' C++ passes
do not work.
One graph serves the four forms Int8Linear uses (symmetric or not, smoothed or not), with dynamic
shapes, so batches of any size reuse it. Without a compiler, or with BERTLITE_INT8_COMPILE=0, the eager
ops run throughout; a failure at run time falls back to them too, with one warning.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bertlite.errors import CompiledQuantizationWarning
from bertlite.utils import native
from bertlite.utils.graph import recording_graph
from bertlite.utils.warn import warn_user


def fusable_quantize_rows(x: Tensor, input_scale: Tensor, constants: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """bertlite.quant.rows.quantize_rows as functional ops inductor can fuse, one graph for every form
    (a form per graph would be a C++ build each): (M, K) float, (K,) input scale (ones: none; x * 1 is
    x), constants() -> (M, K) uint8 q, (M, 1) scale and (M, 1) row minimum (the asymmetric offset's base).
    Each form's own values come out bitwise: the other form's terms are exact zeros (x - 0, y + 0)."""
    x = x.to(torch.float32) * input_scale
    low, high = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)
    asymmetric = constants[0] > 0
    symmetric_scale = torch.maximum(high, -low) / constants[2]
    scale = torch.where(asymmetric, (high - low) / constants[3], symmetric_scale).clamp(min=1e-30)
    shift = torch.where(asymmetric, low, torch.zeros_like(low))
    # the zero point added in float32 before rounding, as quantize_per_tensor does: the same integers
    q = ((x - shift) * scale.reciprocal() + constants[1]).round()
    return q.to(torch.uint8), scale, low


_constants: dict[tuple[bool, int, int], Tensor] = {}
_ones: dict[int, Tensor] = {}


def constants(asymmetric: bool, activation_max: int, zero_point: int) -> Tensor:
    """The form as data, so that no form needs a graph of its own: [asymmetric, the zero point added
    before rounding, the symmetric divisor, the asymmetric divisor]."""
    key = (asymmetric, activation_max, zero_point)
    if key not in _constants:
        values = [1.0, 0.0, 1.0, activation_max] if asymmetric else [0.0, zero_point, zero_point - 1, 1.0]
        _constants[key] = torch.tensor(values, dtype=torch.float32)
    return _constants[key]


def ones(depth: int) -> Tensor:
    """The input scale of an unsmoothed Linear: made outside inference mode, as the smoothing buffers
    are, so that both are the same kind of tensor to dynamo (another kind would be another graph)."""
    if depth not in _ones:
        with torch.inference_mode(False):
            _ones[depth] = torch.ones(depth)
    return _ones[depth]


def _load() -> Any:
    """torch.compile's kernel of fusable_quantize_rows, for every form and input size."""
    return torch.compile(fusable_quantize_rows, dynamic=True)


def _check(kernel: Any) -> str | None:
    """Why the kernel's uint8 values and scales differ from the eager ops' (quant.rows, at activation_max 255
    and zero point 128) on a probe, or None where they are the same bits. Running it builds it (seconds)."""
    from bertlite.quant.rows import _reference_rows

    generator = torch.Generator().manual_seed(0)
    # Rows with an outlier channel and one-sided ones; a size that leaves the vector loops a scalar tail.
    x = torch.randn(97, 401, generator=generator) * 3
    x[:, 7] *= 40
    x[48:] = x[48:].clamp(min=-0.17)
    # A row at scale 1 a hair below k + 1/2, where adding the zero point before rounding gives another integer.
    x[0] = torch.linspace(-127.0, 127.0, 401).round()
    x[0, 1:-1] = x[0, 1:-1].clamp(-126, 126) + (0.5 - 2.0**-20)
    smooth = torch.rand(401, generator=generator) + 0.5
    # As Embedder calls it: activations made in inference mode, the smoothing scale a buffer made outside it
    # (the other way round is one more graph per form).
    with torch.inference_mode():
        x = x.clone()
        for asymmetric in (False, True):
            for input_scale in (None, smooth):
                scaling = ones(x.shape[1]) if input_scale is None else input_scale
                q, scale, _ = kernel(x, scaling, constants(asymmetric, 255, 0 if asymmetric else 128))
                expected_q, expected_scale = _reference_rows(x, input_scale, asymmetric)
                if not (torch.equal(q, expected_q) and torch.equal(scale, expected_scale)):
                    return "its uint8 values differ from the eager ops' on this machine"
    return None


# The kernel's life in this process: built only when asked for (seconds), untimed (the lambdas read this
# module's functions when called, so tests can swap them).
OP = native.NativeOp(
    load=lambda: _load(),
    check=lambda kernel: _check(kernel),
    variables=("BERTLITE_INT8_COMPILE",),
    failed="torch.compile",
)
# The kernel's verbs under this module's names: build() (once per process), built(), reason().
build, built, reason = OP.build, OP.built, OP.reason


def describe() -> str:
    """Which quantization Int8Linear runs now, in words (for a benchmark's or a summary's record)."""
    if built():
        return "compiled (torch.compile)"
    why = reason() or ("not built in this process" if OP.enabled_by_environment() else "BERTLITE_INT8_COMPILE=0")
    return f"eager ops: {why}"


def quantize(
    x: Tensor, input_scale: Tensor | None, asymmetric: bool, activation_max: int, zero_point: int
) -> tuple[Tensor, Tensor, Tensor] | None:
    """The compiled kernel's (q, scale, low), or None where the eager ops must run: not built, grad
    enabled (int8 is inference only; a graph with grad would be a second compile), or a graph being
    recorded (trace, export: the compiled call cannot be recorded)."""
    kernel = OP.ops
    if kernel is None or torch.is_grad_enabled() or recording_graph():
        return None
    try:
        scaling = ones(x.shape[-1]) if input_scale is None else input_scale
        return kernel(x, scaling, constants(asymmetric, activation_max, zero_point))  # type: ignore[operator]
    except Exception as error:  # e.g. a recompile for a new input form that fails: same numbers eagerly
        OP.fail(f"it failed at run time ({type(error).__name__})")
        warn_user(
            f"int8: the compiled quantization kernel failed ({type(error).__name__}: {str(error)[:200]}); "
            "the eager ops run from now on (the same numbers, slower)",
            CompiledQuantizationWarning,
        )
        return None
