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

import os
import threading
from collections.abc import Callable

import torch
from torch import Tensor

from bertlite.errors import CompiledQuantizationWarning
from bertlite.utils.graph import recording_graph
from bertlite.utils.warn import warn_user

# "kernel": the compiled function once built and checked (None if that failed); "reason": why it is not used
_state: dict[str, object] = {}
_lock = threading.Lock()


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


def enabled_by_environment() -> bool:
    return os.environ.get("BERTLITE_INT8_COMPILE", "1") != "0"


Reference = Callable[[Tensor, Tensor | None, bool], tuple[Tensor, Tensor]]


def build(reference: Reference) -> bool:
    """Build the kernel once per process (later calls return at once): whether it is usable. Why not,
    if not: reason()."""
    with _lock:
        if "kernel" not in _state:
            _state["kernel"], _state["reason"] = _build(reference)
        return _state["kernel"] is not None


def built() -> bool:
    return _state.get("kernel") is not None


def describe() -> str:
    """Which quantization Int8Linear runs now, in words (for a benchmark's or a summary's record)."""
    if built():
        return "compiled (torch.compile)"
    why = reason() or ("not built in this process" if enabled_by_environment() else "BERTLITE_INT8_COMPILE=0")
    return f"eager ops: {why}"


def reason() -> str | None:
    """Why the compiled kernel is not used (None when it is, or while it builds)."""
    return _state.get("reason")  # type: ignore[return-value]


def _build(reference: Reference) -> tuple[object, str | None]:
    """The compiled function checked against `reference` (input, input_scale, asymmetric -> the eager
    uint8 values and scales at activation_max 255 and zero point 128), or None and why not."""
    if not enabled_by_environment():
        return None, "BERTLITE_INT8_COMPILE=0"
    generator = torch.Generator().manual_seed(0)
    # Rows with an outlier channel and one-sided ones; a size that leaves the vector loops a scalar tail.
    x = torch.randn(97, 401, generator=generator) * 3
    x[:, 7] *= 40
    x[48:] = x[48:].clamp(min=-0.17)
    # A row at scale 1 a hair below k + 1/2, where adding the zero point before rounding gives another integer.
    x[0] = torch.linspace(-127.0, 127.0, 401).round()
    x[0, 1:-1] = x[0, 1:-1].clamp(-126, 126) + (0.5 - 2.0**-20)
    smooth = torch.rand(401, generator=generator) + 0.5
    try:
        kernel = torch.compile(fusable_quantize_rows, dynamic=True)
        # As Embedder calls it: activations made in inference mode, the smoothing scale a buffer made outside it
        # (the other way round is one more graph per form).
        with torch.inference_mode():
            x = x.clone()
            for asymmetric in (False, True):
                for input_scale in (None, smooth):
                    scaling = ones(x.shape[1]) if input_scale is None else input_scale
                    q, scale, _ = kernel(x, scaling, constants(asymmetric, 255, 0 if asymmetric else 128))
                    expected_q, expected_scale = reference(x, input_scale, asymmetric)
                    if not (torch.equal(q, expected_q) and torch.equal(scale, expected_scale)):
                        return None, "its uint8 values differ from the eager ops' on this machine"
    except Exception as error:  # no compiler, an inductor that cannot build here: keep the eager ops
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, f"torch.compile failed here ({type(error).__name__}: {first[:200]})"
    return kernel, None


def quantize(
    x: Tensor, input_scale: Tensor | None, asymmetric: bool, activation_max: int, zero_point: int
) -> tuple[Tensor, Tensor, Tensor] | None:
    """The compiled kernel's (q, scale, low), or None where the eager ops must run: not built, grad
    enabled (int8 is inference only; a graph with grad would be a second compile), or a graph being
    recorded (trace, export: the compiled call cannot be recorded)."""
    kernel = _state.get("kernel")
    if kernel is None or torch.is_grad_enabled() or recording_graph():
        return None
    try:
        scaling = ones(x.shape[-1]) if input_scale is None else input_scale
        return kernel(x, scaling, constants(asymmetric, activation_max, zero_point))  # type: ignore[operator]
    except Exception as error:  # e.g. a recompile for a new input form that fails: same numbers eagerly
        _state["kernel"], _state["reason"] = None, f"it failed at run time ({type(error).__name__})"
        warn_user(
            f"int8: the compiled quantization kernel failed ({type(error).__name__}: {str(error)[:200]}); "
            "the eager ops run from now on (the same numbers, slower)",
            CompiledQuantizationWarning,
        )
        return None
