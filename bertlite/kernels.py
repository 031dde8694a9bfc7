"""Linear layers on oneDNN, for packed inference.

torch.ops.mkldnn._linear_pointwise is the op torch.compile emits for CPU linears: on
the plain weight (no packed copy, so no extra memory) it is faster than F.linear here
and fuses the activation, or the residual add, into the GEMM's epilogue (measured:
+5% fp32, +7% bf16 end to end). It is a private op, so each form is probed once per
dtype and any failure falls back to F.linear + ACT2FN. Only the packed inference path
uses it: the padded path stays op for op transformers' (bitwise in eager, exportable).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

_FUSED_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "")}
_probed: dict[tuple[str, torch.dtype], bool] = {}


def _works(form: str, dtype: torch.dtype, probe: Callable[[], bool]) -> bool:
    if (form, dtype) not in _probed:
        try:
            _probed[form, dtype] = probe()
        except (AttributeError, RuntimeError):
            _probed[form, dtype] = False
    return _probed[form, dtype]


def _onednn_ok(x: Tensor) -> bool:
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16):
        return False

    def probe() -> bool:
        out = torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 3, dtype=x.dtype), torch.ones(4, 3, dtype=x.dtype), None, "none", [], ""
        )
        return bool(torch.equal(out, torch.full((2, 4), 3.0, dtype=x.dtype)))

    return _works("linear", x.dtype, probe)


def _onednn_add_ok(dtype: torch.dtype) -> bool:
    def probe() -> bool:
        ones = torch.ones(2, 3, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise.binary(ones, ones[:, :2], torch.ones(2, 3, dtype=dtype), None, "add")
        return bool(torch.equal(out, torch.full((2, 2), 4.0, dtype=dtype)))

    return _works("linear_add", dtype, probe)


def linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None = None, act_fn: Callable | None = None
) -> Tensor:
    """activation(x @ weight.T + bias), the activation fused into the GEMM when oneDNN has it;
    act_fn: the activation's function (ACT2FN[activation]) for the unfused route."""
    if _onednn_ok(x):
        attr, algorithm = _FUSED_ACTIVATIONS.get(activation, ("none", ""))
        out = torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
        return out if attr != "none" or act_fn is None else act_fn(out)
    out = F.linear(x, weight, bias)
    return out if act_fn is None else act_fn(out)


def linear_add(x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor) -> Tensor:
    """x @ weight.T + bias + residual, the residual added in the GEMM's epilogue when possible:
    one pass less over the output and, in bf16, one rounding instead of two."""
    if _onednn_ok(x) and _onednn_add_ok(x.dtype):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")
    return linear(x, weight, bias) + residual
