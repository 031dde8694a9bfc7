"""Int8Linear: y = x @ W.T + b with W int8 per output channel and x quantized per token at run time.

Weights are int8 with one scale per output channel; activations are quantized per token (one scale per
row, computed at run time), so one outlier token costs only its own row precision, not the whole batch's
as with a per-tensor scale (torch.ao's quantize_dynamic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.layers.activations import ACT2FN
from bertlite.quant import compiled as compiled_quant
from bertlite.quant import ops
from bertlite.quant.kernels import _GEMMS, ZERO_POINT_0_KERNELS, _pack, int8_grid, resolve_kernel
from bertlite.quant.rows import quantize_rows


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
        activation: str | None = None,
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
            compiled: run the kernels this process has built (fixed here, for every forward): bertlite.quant.ops'
                passes, else bertlite.quant.compiled's input quantization; with neither built, the eager ops.
            outliers: (channels (k,) long, weight (out_features, k) float) for input channels that stay
                float32: they are left out of each token's int8 range and multiplied by this weight
                (the int8 weight's columns there are 0); None: every channel is quantized.
            activation: a name in ACT2FN applied to the output (the intermediate's GELU, inside
                bertlite.quant.ops' pass where it has it); None: none.

        Raises:
            ValueError: a weight that is not int8 or not within the kernel's grid, or a kernel that does
                not work here.
        """
        super().__init__()
        self.kernel = resolve_kernel(kernel)
        self.out_features, self.in_features = weight.shape
        self.grid = int8_grid(self.kernel)
        self._check_weight(weight)
        # The plain int8 weight is kept only where the kernel reads it; oneDNN's packed copy replaces it.
        self.register_buffer("weight", weight if self.kernel != "onednn" else None)
        self.packed_weight = _pack(self.kernel, weight)
        self.register_buffer("weight_scale", weight_scale.to(torch.float32))
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32))
        self.register_buffer("input_scale", None if input_scale is None else input_scale.to(torch.float32))
        self.asymmetric = asymmetric
        # How this Linear quantizes its input and scales its output, fixed now (each route gives the same
        # numbers): "ops" (bertlite.quant.ops' C++ passes), "compiled" (bertlite.quant.compiled), "eager".
        self.compiled = compiled
        # What the GEMM subtracts from the uint8 activations: 0 for asymmetric ones where the kernel allows.
        self.zero_point = 0 if asymmetric and self.kernel in ZERO_POINT_0_KERNELS else self.grid.zero_point
        # sum_k W[n, k] in real units: what a per-token offset c contributes to output n (c * row sum).
        row_sums = weight.to(torch.float32).sum(dim=1) * self.weight_scale
        self.register_buffer("row_sums", row_sums if asymmetric else None)
        channels, outlier_weight = outliers if outliers is not None else (None, None)
        self.register_buffer("outlier_channels", channels)
        # (k, out_features): one row per float32 channel, as bertlite.quant.ops' dequantize reads it
        kept_weight = None if outlier_weight is None else outlier_weight.to(torch.float32).T.contiguous()
        self.register_buffer("outlier_weight", kept_weight)
        self.activation = activation

    def _check_weight(self, weight: Tensor) -> None:
        """Refuse a weight that self.kernel would not multiply exactly on this machine's grid (self.grid).

        Args:
            weight: (out_features, in_features), as __init__ takes it.

        Raises:
            ValueError: a weight that is not int8, beyond the grid's weight limit, or with a pair (k, k + 1)
                wider than its pair limit.
        """
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

    @property
    def compiled(self) -> bool:
        """Whether this Linear runs built kernels (route "ops" or "compiled") rather than the eager ops."""
        return self.route != "eager"

    @compiled.setter
    def compiled(self, value: bool) -> None:
        """True: the kernels this process has built now, for every later forward; False: the eager ops."""
        self.route = "eager"
        if value:
            self.route = "ops" if ops.built() else "compiled" if compiled_quant.built() else "eager"

    def quantize_input(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Quantize the input per token, rounding to nearest.

        uint8 either way: oneDNN's x86 int8 kernels take u8 activations, and with s8 ones some ISAs fall
        back to a far slower reference kernel. On route "compiled", in one compiled kernel
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
        compiled = self.route == "compiled"
        rows = compiled_quant.quantize(x, self.input_scale, self.asymmetric, top, zero_point) if compiled else None
        q, scale, low = rows or quantize_rows(x, self.input_scale, self.asymmetric, top, zero_point)
        return q, scale, self._offset(scale, low)

    def _offset(self, scale: Tensor, low: Tensor) -> Tensor | None:
        """The per-token offset of an asymmetric input from its rows' minimum (in place), None if symmetric.

        x ~ scale * q + low, so x ~ scale * (q - zp) + offset with offset = low + zp * scale.
        """
        if not self.asymmetric:
            return None
        return low.add_(scale, alpha=self.zero_point) if self.zero_point else low

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
        """Compute x @ W.T + b, plus residual when given, then self.activation when set.

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
            out = out if residual is None else out + residual
            return ACT2FN[self.activation](out) if self.activation else out
        rows = x.reshape(-1, self.in_features)
        if self.route == "ops" and ops.usable():  # usable: no grad, no graph being recorded
            return self._forward_ops(rows, residual).view(*leading, self.out_features)
        qx, scale, offset, kept = self._quantize_around_outliers(rows)
        out = self._dequantize(self.gemm(qx), scale, offset, residual, kept)
        out = ACT2FN[self.activation](out) if self.activation else out
        return out.view(*leading, self.out_features)

    def _forward_ops(self, rows: Tensor, residual: Tensor | None) -> Tensor:
        """forward's numbers with bertlite.quant.ops' two passes around the GEMM.

        Args:
            rows: (M, in_features) float.
            residual: forward's, or None.

        Returns:
            (M, out_features) float32.
        """
        rows = rows.to(torch.float32).contiguous()
        channels, top, zero_point = self.outlier_channels, self.grid.activation_max, self.zero_point
        qx, scale, low, kept = ops.quantize_rows(rows, self.input_scale, channels, self.asymmetric, top, zero_point)
        offset = self._offset(scale, low)
        if residual is not None:
            residual = residual.reshape(-1, self.out_features).to(torch.float32).contiguous()
        # A residual goes in before the activation: then it runs as its own op.
        inside = self.activation if residual is None and self.activation in ops.ACTIVATIONS else None
        row_sums = self.row_sums if self.asymmetric else None
        kept, kept_weight = (kept, self.outlier_weight) if channels is not None else (None, None)
        out = ops.dequantize(self.gemm(qx), scale, offset, row_sums, self.bias, residual, inside, kept, kept_weight)
        return ACT2FN[self.activation](out) if self.activation and not inside else out

    def _quantize_around_outliers(self, rows: Tensor) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """Quantize the input per token, the float32 channels (self.outlier_channels) left out of its range.

        Args:
            rows: (M, in_features) float; without grad, its float32 channels are zeroed in place while it is
                quantized, then put back.

        Returns:
            quantize_input's (q, scale, offset), and the float32 channels' values (M, k); None where every
            channel is quantized.
        """
        channels = self.outlier_channels
        if channels is None:
            return (*self.quantize_input(rows), None)
        kept = rows.index_select(1, channels)  # (M, k)
        if rows.requires_grad:
            qx, scale, offset = self.quantize_input(rows.index_fill(1, channels, 0.0))
        else:  # zeroed in place and put back: touches M x k values, not the whole input
            rows.index_fill_(1, channels, 0.0)
            try:
                qx, scale, offset = self.quantize_input(rows)
            finally:
                rows.index_copy_(1, channels, kept)
        return qx, scale, offset, kept

    def _dequantize(
        self, out: Tensor, scale: Tensor, offset: Tensor | None, residual: Tensor | None, kept: Tensor | None
    ) -> Tensor:
        """Turn the GEMM's products into the output, in place where autograd allows.

        Args:
            out: (M, out_features) float32 products (gemm's).
            scale, offset: (M, 1) per token, as quantize_input gives them.
            residual: forward's, or None.
            kept: (M, k) the float32 channels' input values (_quantize_around_outliers'), or None.

        Returns:
            (M, out_features) float32: products x token scale, + offset x row sums, + residual, + bias, + the
            float32 channels' products.
        """
        # products x token scale, plus the residual or else the bias, in one pass
        addend = residual.reshape(-1, self.out_features) if residual is not None else self.bias
        if addend is None:
            out.mul_(scale)
        elif torch.is_grad_enabled():  # autograd takes no out= (scale and a residual carry grad from LayerNorm)
            out = torch.addcmul(addend, out, scale)
        else:
            torch.addcmul(addend, out, scale, out=out)
        if offset is not None:
            # offset (M, 1) x row sums (N,), broadcast: one elementwise pass, cheaper than the same update as an
            # (M, 2) @ (2, N) addmm_
            out.addcmul_(offset, self.row_sums)
        if residual is not None and self.bias is not None:
            out.add_(self.bias)
        if kept is not None:  # the float32 channels' products
            kept = kept.to(torch.float32)
            weight = self.outlier_weight
            out = torch.addmm(out, kept, weight) if out.requires_grad else out.addmm_(kept, weight)
        return out

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"smooth={self.input_scale is not None}, asymmetric={self.asymmetric}, kernel={self.kernel!r}, "
            f"activation_max={self.grid.activation_max}, weight_limit={self.grid.weight_limit}, "
            f"pair_limit={self.grid.pair_limit}, route={self.route}, "
            f"float32_channels={0 if self.outlier_channels is None else len(self.outlier_channels)}, "
            f"activation={self.activation}"
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
    """Stands where query / key / value were once they live in the fused qkv (attention.self.qkv in BERT):
    holds no weights."""

    def __init__(self, name: str, qkv_name: str = "attention.self.qkv") -> None:
        super().__init__()
        self.name = name
        self.qkv_name = qkv_name

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError(f"{self.name} was quantized into {self.qkv_name}; call qkv (the model does)")
