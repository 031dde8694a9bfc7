"""Linear layers on oneDNN, for packed inference.

torch.ops.mkldnn._linear_pointwise is the op torch.compile emits for CPU linears: on
the plain weight (no packed copy, so no extra memory) it is faster than F.linear here
and fuses the activation, or the residual add, into the GEMM's epilogue (measured:
+5% fp32, +7% bf16 end to end). It is a private op, so each form is probed once per
dtype and any failure falls back to F.linear + ACT2FN. Only the packed inference path
uses it: the padded path stays op for op transformers' (bitwise in eager, exportable).

Packed weights (`pack_weight`): oneDNN reorders a plain weight into its blocked layout on every
call; a model with `set_weight_packing(True)` (Embedder's default) keeps that layout as a copy,
made once, at its second packed forward (a one-off call neither waits for it nor holds it).
Measured in float32, paired rounds on the corpus: the median per-round gain of seven paired runs
was 1.04-1.13x, the same numbers bitwise; in bf16 +1.5%, within noise, so only float32 is packed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

_FUSED_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "")}
_probed: dict[tuple[str, torch.dtype], bool] = {}
PACKED_DTYPES = (torch.float32,)
# The row count oneDNN is told to expect when it picks the packed layout: Embedder's batches hold
# up to 2048 tokens (features.DEFAULT_MAX_TOKENS); other row counts run on the same layout.
PACK_ROWS = 2048


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


def _packing_ok(dtype: torch.dtype) -> bool:
    def probe() -> bool:
        weight = torch.arange(12, dtype=dtype).view(4, 3)
        x = torch.ones(2, 3, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        plain = torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        added = torch.ops.mkldnn._linear_pointwise.binary(x, plain, packed, None, "add")
        return bool(torch.equal(out, plain) and torch.equal(added, 2 * plain))

    return _works("packed", dtype, probe)


def pack_weight(weight: Tensor) -> Tensor | None:
    """weight (out, in) in oneDNN's blocked layout, for `linear`/`linear_add`'s packed=; None where
    packing does not pay (not float32, not CPU) or this torch build lacks it."""
    if weight.device.type != "cpu" or weight.dtype not in PACKED_DTYPES:
        return None
    if not (_onednn_ok(weight) and _onednn_add_ok(weight.dtype) and _packing_ok(weight.dtype)):
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


def derived(owner: Any, slot: str, sources: Sequence[Tensor], build: Callable[[], Any], tag: object = None) -> Any:
    """build()'s result, kept in owner.__dict__[slot]: a plain attribute, so state_dict() and
    save_pretrained never see it. It is rebuilt when any source tensor is replaced or changed in
    place (its storage, its version counter, dtype or device moves), or when `tag` changes, so
    loading, training or .to() never leave it stale."""
    key = (tag, *((t.data_ptr(), t._version, t.dtype, t.device) for t in sources))
    cached = owner.__dict__.get(slot)
    if cached is None or cached[0] != key:
        owner.__dict__[slot] = cached = (key, build())
    return cached[1]


def linear(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    activation: str | None = None,
    act_fn: Callable | None = None,
    packed: Tensor | None = None,
) -> Tensor:
    """activation(x @ weight.T + bias), the activation fused into the GEMM when oneDNN has it;
    act_fn: the activation's function (ACT2FN[activation]) for the unfused route; packed: the
    weight from pack_weight(), used in its place (weight may then be None)."""
    if _onednn_ok(x):
        attr, algorithm = _FUSED_ACTIVATIONS.get(activation, ("none", ""))
        out = torch.ops.mkldnn._linear_pointwise(x, weight if packed is None else packed, bias, attr, [], algorithm)
        return out if attr != "none" or act_fn is None else act_fn(out)
    out = F.linear(x, weight, bias)
    return out if act_fn is None else act_fn(out)


def linear_add(
    x: Tensor, weight: Tensor, bias: Tensor | None, residual: Tensor, packed: Tensor | None = None
) -> Tensor:
    """x @ weight.T + bias + residual, the residual added in the GEMM's epilogue when possible:
    one pass less over the output and, in bf16, one rounding instead of two."""
    if _onednn_ok(x) and _onednn_add_ok(x.dtype):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight if packed is None else packed, bias, "add")
    return linear(x, weight, bias) + residual
