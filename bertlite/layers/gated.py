"""A gated feed-forward's product, act(gate(x)) * up(x), in two oneDNN GEMMs: the activation in the gate's
epilogue and the product in the up projection's, so no pass of its own reads the intermediate rows.

`optimize` (layers.onednn) installs a GatedProduct in the slot `gated_product` of each gated feed-forward (GTE's
gate_proj/up_proj, NomicBERT's fc11/fc12, EuroBERT's gate_proj/up_proj, ModernBERT's Wi, JinaBERT-v2's), which the
module then calls instead of its own Linears. It holds no Parameters: it reads those of the Linears it
replaces, so state_dict() keeps the checkpoint's keys, and keeps their halves (packed, float32) as derived copies,
rebuilt whenever a Parameter changes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertlite.layers.activations import ACT2FN
from bertlite.layers.derived import KeepsDerived, derived, pack_weight, runs_on_onednn

_probed: dict[torch.dtype, bool] = {}


def product_works(dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear with a multiplication in its epilogue runs, and is right, for `dtype`."""
    if dtype not in _probed:
        try:
            ones = torch.ones(2, 3, dtype=dtype)
            factor = torch.full((2, 2), 2.0, dtype=dtype)
            out = torch.ops.mkldnn._linear_pointwise.binary(ones, factor, torch.ones(2, 3, dtype=dtype), None, "mul")
            _probed[dtype] = bool(torch.equal(out, torch.full((2, 2), 6.0, dtype=dtype)))
        except (AttributeError, RuntimeError):
            _probed[dtype] = False
    return _probed[dtype]


class GatedProduct(KeepsDerived, nn.Module):
    """act(x @ Wg.T + bg) * (x @ Wu.T + bu), (..., intermediate), from the gated feed-forward's Linears.

    Args:
        linears: one Linear giving both halves (its output (..., 2 * intermediate)), or the gate's and the up
            projection's, in that order.
        activated_first: one fused Linear: the activation reads its first half (ModernBERT's input|gate);
            False: its second (JinaBERT-v2's up|gated). Ignored for two Linears.
        activation: the activation's name (an ACT2FN key).
        epilogue: the activation in the gate GEMM's epilogue, as oneDNN names it ((attr, algorithm) of
            layers.onednn.FUSED_ACTIVATIONS, where oneDNN runs it here); None: torch's activation on the gate GEMM's
            output.
        pack: keep the float32 weights in oneDNN's blocked layout.
    """

    def __init__(
        self,
        linears: tuple[nn.Linear, ...],
        activated_first: bool,
        activation: str,
        epilogue: tuple[str, str] | None,
        pack: bool,
    ) -> None:
        super().__init__()
        self.__dict__["linears"] = linears  # not submodules: no second set of keys
        self.activated_first = activated_first
        self.activation = activation
        self.epilogue = epilogue
        self.pack = pack

    def forward(self, x: Tensor) -> Tensor:
        """(..., in_features) -> act(gate) * up, (..., intermediate)."""
        if not runs_on_onednn(x):  # autograd, another device or dtype: the Linears themselves
            return self._reference(x)
        (gate_weight, gate_bias), (up_weight, up_bias) = derived(self, "_derived_halves", self._sources(), self._split)
        gate_weight, up_weight = (
            derived(self, "_derived_packed", self._sources(), self._packed)
            if self.pack and x.dtype == torch.float32
            else (gate_weight, up_weight)
        )
        attr, algorithm = self.epilogue or ("none", "")
        gate = torch.ops.mkldnn._linear_pointwise(x, gate_weight, gate_bias, attr, [], algorithm)
        if self.epilogue is None:
            gate = ACT2FN[self.activation](gate)
        return torch.ops.mkldnn._linear_pointwise.binary(x, gate, up_weight, up_bias, "mul")

    def _reference(self, x: Tensor) -> Tensor:
        """The product by the Linears' own forwards (autograd reaches their Parameters)."""
        if len(self.linears) == 2:
            gate, up = (linear(x) for linear in self.linears)
        else:
            first, second = self.linears[0](x).chunk(2, dim=-1)
            gate, up = (first, second) if self.activated_first else (second, first)
        return ACT2FN[self.activation](gate.contiguous()) * up

    def _sources(self) -> list[Tensor]:
        return [t for m in self.linears for t in (m.weight, m.bias) if t is not None]

    def _split(self) -> tuple[tuple[Tensor, Tensor | None], tuple[Tensor, Tensor | None]]:
        """((gate weight, bias), (up weight, bias)), each half contiguous."""
        if len(self.linears) == 2:
            return tuple((m.weight.detach(), None if m.bias is None else m.bias.detach()) for m in self.linears)
        (linear,) = self.linears
        weights = [w.contiguous() for w in linear.weight.detach().chunk(2)]
        biases = [None, None] if linear.bias is None else [b.contiguous() for b in linear.bias.detach().chunk(2)]
        halves = list(zip(weights, biases, strict=True))
        return (halves[0], halves[1]) if self.activated_first else (halves[1], halves[0])

    def _packed(self) -> tuple[Tensor, Tensor]:
        (gate_weight, _), (up_weight, _) = derived(self, "_derived_halves", self._sources(), self._split)
        return pack_weight(gate_weight), pack_weight(up_weight)

    def extra_repr(self) -> str:
        return f"activation={self.activation}, epilogue={self.epilogue}, pack={self.pack}"
