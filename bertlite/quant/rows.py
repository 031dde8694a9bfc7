"""Per-token (per-row) quantization of a Linear's input to uint8, in eager ops.

bertlite.quant.compiled generates one kernel for the same integers; _reference_rows is what it must reproduce.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

_fused_round: dict[str, bool] = {}


def _round_to_uint8(y: Tensor, zero_point: int) -> Tensor:
    """round(y + zero_point) as uint8 (y already in range; the zero point added in float32 first, as
    quantize_per_tensor does, so both ways give the same integers), in one pass where torch can:
    quantize_per_tensor rounds, shifts, clamps and narrows together (faster than .to(torch.uint8)
    alone), and its quantized storage is read back as plain integers without a copy.
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
