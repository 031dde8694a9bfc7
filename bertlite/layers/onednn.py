"""Linear modules on oneDNN for inference, installed by `optimize(model)`.

torch.ops.mkldnn._linear_pointwise is the op torch.compile emits for CPU linears: faster than
F.linear here, and it fuses the activation, or the residual add, into the GEMM's epilogue. It is a
private op, so each form is probed once per dtype; `optimize` installs a module only where its form
works. A float32 weight can also be kept in oneDNN's blocked layout (`pack_weight`), which spares the
reorder oneDNN otherwise does on every call, for one more copy of the weights. Whether the intermediate
activation runs inside the GEMM is timed once per CPU (`activation_fusion_pays`): on some CPUs oneDNN's
fused GELU costs more than torch's separate pass over the GEMM's output. Which GEMM runs a float32 Linear,
oneDNN's or MKL's (torch's F.linear), is timed once per CPU and shape (bertlite.layers.linear_choice).

The modules keep the Parameters of the Linears they replace, so state_dict() and saving see
transformers' keys; `restore(model)` puts plain Linears back (the reference path).

`optimize(model, compute=torch.bfloat16)` runs a float32 model's GEMMs on bfloat16 inputs and keeps
everything else in float32: each module casts its input to bf16 and multiplies by a bf16 copy of its
weight (oneDNN accumulates in float32), and its output goes on in float32 (the residual add, LayerNorm,
attention's softmax, the heads), except the intermediate activation's, which only the next GEMM reads. The
biases stay float32: added to the float32 output, or taken in float32 by the activation's epilogue, where
oneDNN runs that form (mixed_bias_works), so each GEMM output is rounded to bf16 once at most.
bf16's 8 bits then touch each GEMM's inputs once instead of compounding through the residual stream,
and the float32 Parameters stay as they were, so going back to float32 is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlite.layers import native_attention
from bertlite.layers.activations import ACT2FN
from bertlite.layers.derived import ONEDNN_DTYPES, KeepsDerived, derived, pack_weight, runs_on_onednn
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.linear_choice import KERNELS, LinearShape, linear_kernel
from bertlite.layers.roles import (
    RESIDUAL_ROLES,
    activation_owner,
    attention_of,
    model_layers,
    part,
    replace,
    roles_of,
    set_fuses_residual,
)
from bertlite.utils.measured import Choice, Rounds, decide, machine_key, time_rounds

# Activations oneDNN fuses into the GEMM: name -> (attr, algorithm) of _linear_pointwise.
FUSED_ACTIVATIONS = {
    "gelu": ("gelu", "none"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
    "silu": ("swish", ""),
}
PACKED_DTYPES = (torch.float32,)
NATIVE_ATTENTION_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the C++ attention runs (in float32)
FUSION_TOKENS = 256  # rows of the timed batch that decides activation fusion: a few ms at BERT-base's sizes
_probed: dict[tuple[str, torch.dtype], bool] = {}


def _works(form: str, dtype: torch.dtype, probe: Callable[[], bool]) -> bool:
    if (form, dtype) not in _probed:
        try:
            _probed[form, dtype] = probe()
        except (AttributeError, RuntimeError):
            _probed[form, dtype] = False
    return _probed[form, dtype]


def linear_works(dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear runs, and is right, for CPU tensors of `dtype`."""
    if dtype not in ONEDNN_DTYPES:
        return False

    def probe() -> bool:
        out = torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 3, dtype=dtype), torch.ones(4, 3, dtype=dtype), None, "none", [], ""
        )
        return bool(torch.equal(out, torch.full((2, 4), 3.0, dtype=dtype)))

    return _works("linear", dtype, probe)


def linear_add_works(dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear with the residual added in its epilogue runs, and is right, for `dtype`."""

    def probe() -> bool:
        ones = torch.ones(2, 3, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise.binary(ones, ones[:, :2], torch.ones(2, 3, dtype=dtype), None, "add")
        return bool(torch.equal(out, torch.full((2, 2), 4.0, dtype=dtype)))

    return linear_works(dtype) and _works("linear_add", dtype, probe)


def activation_fusion_works(activation: str, dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear with `activation` (a name in FUSED_ACTIVATIONS) in its epilogue runs, and
    gives torch's activation of the plain linear, for `dtype`."""
    attr, algorithm = FUSED_ACTIVATIONS[activation]

    def probe() -> bool:
        x = torch.linspace(-3, 3, 6, dtype=dtype).view(2, 3)
        weight = torch.eye(3, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise(x, weight, None, attr, [], algorithm)
        return bool(torch.allclose(out.float(), ACT2FN[activation](x).float(), atol=1e-2))

    return linear_works(dtype) and _works(f"linear_{activation}", dtype, probe)


def mixed_bias_works(dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear on `dtype` inputs takes a float32 bias in its epilogue (adding it before the
    output's one rounding to `dtype`), and is right."""

    def probe() -> bool:
        # 1 + 2^-8 lies halfway between two bf16 numbers: rounded first it becomes 1, and 1 + 2^-10 rounds to 1;
        # kept in float32, 1 + 2^-8 + 2^-10 rounds up to 1 + 2^-7.
        bias = torch.tensor([1.0 + 2.0**-8, 0.0])
        x = torch.full((2, 1), 2.0**-5, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise(x, torch.full((2, 1), 2.0**-5, dtype=dtype), bias, "none", [], "")
        expected = torch.tensor([[1.0 + 2.0**-7, 2.0**-10]] * 2, dtype=dtype)
        return out.dtype == dtype and bool(torch.equal(out, expected))

    return linear_works(dtype) and _works("mixed_bias", dtype, probe)


def packing_works(dtype: torch.dtype) -> bool:
    """Whether a weight in oneDNN's blocked layout gives the plain weight's numbers, for `dtype`."""
    if dtype not in PACKED_DTYPES:
        return False

    def probe() -> bool:
        weight = torch.arange(12, dtype=dtype).view(4, 3)
        x = torch.ones(2, 3, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        plain = torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        added = torch.ops.mkldnn._linear_pointwise.binary(x, plain, packed, None, "add")
        return bool(torch.equal(out, plain) and torch.equal(added, 2 * plain))

    return linear_add_works(dtype) and _works("packed", dtype, probe)


def activation_fusion_pays(activation: str, dtype: torch.dtype, in_features: int, out_features: int) -> bool:
    """Whether the intermediate Linear runs faster with `activation` inside oneDNN's GEMM than followed by
    torch's activation, on this CPU: fused unless the separate activation was timed faster in every round
    (bertlite.utils.measured's rule).

    Args:
        activation: a name in FUSED_ACTIVATIONS.
        dtype: the Linear's dtype.
        in_features, out_features: the Linear's sizes (hidden and intermediate size).

    Returns:
        True to fuse.
    """
    return fusion_choice(activation, dtype, in_features, out_features).picked == "fused"


def fusion_seconds(activation: str, dtype: torch.dtype, in_features: int, out_features: int) -> dict[str, float]:
    """fusion_choice()'s median seconds per pass.

    Args:
        activation, dtype, in_features, out_features: as activation_fusion_pays.

    Returns:
        {"fused": seconds, "separate": seconds}.
    """
    return fusion_choice(activation, dtype, in_features, out_features).seconds()


def fusion_choice(activation: str, dtype: torch.dtype, in_features: int, out_features: int) -> Choice:
    """time_fusion()'s verdict on this CPU: timed once at these sizes, kept where its rounds agree
    (bertlite.utils.measured).

    Args:
        activation, dtype, in_features, out_features: as activation_fusion_pays.

    Returns:
        The Choice between "fused" (the default) and "separate".
    """
    from bertlite.utils.capabilities import detect

    key = machine_key(detect(), f"{activation} epilogue: {dtype} {in_features} -> {out_features}")
    return decide(key, "fused", "separate", lambda: time_fusion(activation, dtype, in_features, out_features))


def time_fusion(activation: str, dtype: torch.dtype, in_features: int, out_features: int) -> Rounds:
    """Time the Linear with `activation` fused into oneDNN's GEMM and followed by torch's, in interleaved rounds.

    Args:
        activation: a name in FUSED_ACTIVATIONS.
        dtype: the Linear's dtype (one activation_fusion_works).
        in_features, out_features: the Linear's sizes.

    Returns:
        The Rounds of "fused" and "separate" (bertlite.utils.measured.time_rounds).
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(FUSION_TOKENS, in_features, generator=generator).to(dtype)
    weight = (0.05 * torch.randn(out_features, in_features, generator=generator)).to(dtype)
    bias = torch.randn(out_features, generator=generator).to(dtype)
    weight = pack_weight(weight) if packing_works(dtype) else weight  # as the model keeps it
    attr, algorithm = FUSED_ACTIVATIONS[activation]
    separate = ACT2FN[activation]
    return time_rounds(
        {
            "fused": lambda: torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm),
            "separate": lambda: separate(torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")),
        }
    )


def torch_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None, residual: Tensor | None
) -> Tensor:
    """activation(x @ W.T + b) [+ residual] by torch's ops, as nn.Linear and the layer compute it (MKL's GEMM for
    float32 on the CPU).

    Args:
        x: the input, (..., in_features).
        weight, bias: the Linear's Parameters (bias may be None).
        activation: a name in ACT2FN applied to the Linear's output, or None.
        residual: added last, or None.

    Returns:
        The output, (..., out_features).
    """
    out = F.linear(x, weight, bias)
    out = ACT2FN[activation](out) if activation else out
    if residual is None:
        return out
    # In place where autograd does not watch: the same numbers without one more output-sized allocation.
    return out + residual if torch.is_grad_enabled() else out.add_(residual)


class OneDNNLinear(KeepsDerived, nn.Linear):
    """activation(x @ W.T + b) [+ residual] in one oneDNN call; the Parameters of the Linear it replaces.

    activation: a name in FUSED_ACTIVATIONS, applied inside the GEMM, or None. pack: keep the weight in
    oneDNN's blocked layout (float32). forward(x, residual): the residual added in the epilogue, one
    pass less over the output (and in bf16 one rounding instead of two). kernel: "onednn", or "mkl" where
    MKL's GEMM (torch_linear: F.linear, then the activation and the add) was timed faster at this shape
    (bertlite.layers.linear_choice); that form reads the plain weight, so it keeps no packed copy.
    """

    kernel = "onednn"  # the class's default: a module pickled before kernels were chosen unpickles with it
    compute = None  # likewise: float32 Parameters computed in their own dtype

    def __init__(
        self,
        linear: nn.Linear,
        activation: str | None = None,
        pack: bool = False,
        kernel: str = "onednn",
        compute: torch.dtype | None = None,
    ) -> None:
        nn.Module.__init__(self)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.activation = activation
        self.kernel = "onednn" if compute is not None else kernel
        self.pack = pack and self.kernel == "onednn" and compute is None
        self.compute = compute

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        if self.compute is not None and runs_on_onednn(x):
            return self._mixed(x, residual)
        if self.kernel == "mkl" or not runs_on_onednn(x):
            return torch_linear(x, self.weight, self.bias, self.activation, residual)
        weight = self.weight
        if self.pack and weight.dtype in PACKED_DTYPES:
            weight = derived(self, "_derived_packed", [self.weight], lambda: pack_weight(self.weight))
        if residual is not None:
            return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, self.bias, "add")
        attr, algorithm = FUSED_ACTIVATIONS[self.activation] if self.activation else ("none", "")
        return torch.ops.mkldnn._linear_pointwise(x, weight, self.bias, attr, [], algorithm)

    def _mixed(self, x: Tensor, residual: Tensor | None) -> Tensor:
        """The GEMM on `compute` inputs, accumulated in float32; the output in float32 but for an activation's."""
        weight = derived(self, "_derived_compute", [self.weight], lambda: self.weight.detach().to(self.compute))
        if self.activation is not None:  # the next GEMM's input, which it would round to `compute` anyway
            attr, algorithm = FUSED_ACTIVATIONS[self.activation]
            # The float32 bias goes in before the output's one rounding (optimize checked mixed_bias_works).
            return torch.ops.mkldnn._linear_pointwise(x.to(self.compute), weight, self.bias, attr, [], algorithm)
        out = torch.ops.mkldnn._linear_pointwise(x.to(self.compute), weight, None, "none", [], "").float()
        if self.bias is not None:
            out.add_(self.bias)
        return out if residual is None else out.add_(residual)

    def extra_repr(self) -> str:
        compute = "" if self.compute is None else f", compute={self.compute}"
        return f"{super().extra_repr()}, activation={self.activation}, pack={self.pack}, kernel={self.kernel}{compute}"


class FusedQKV(KeepsDerived, nn.Module):
    """query|key|value, (..., 3H), in one GEMM over their weights concatenated: oneDNN's on the CPU,
    F.linear elsewhere (jobs.prepare installs it on a GPU model too).

    It holds no Parameters: it reads those of the query/key/value Linears, which stay where they
    are (so state_dict() keeps transformers' keys), and keeps the concatenation (packed: in oneDNN's
    layout) as a derived copy, rebuilt if any of them changes. kernel: as OneDNNLinear's ("mkl": F.linear
    on the CPU too, over the plain concatenation).
    """

    kernel = "onednn"  # as OneDNNLinear's
    compute = None  # as OneDNNLinear's

    def __init__(
        self,
        query: nn.Linear,
        key: nn.Linear,
        value: nn.Linear,
        pack: bool = False,
        kernel: str = "onednn",
        compute: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.__dict__["projections"] = (query, key, value)  # not submodules: no second set of keys
        self.kernel = "onednn" if compute is not None else kernel
        self.pack = pack and self.kernel == "onednn" and compute is None
        self.compute = compute

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled():  # training runs the Parameters themselves
            return torch.cat([m(x) for m in self.projections], dim=-1)
        weight, bias = derived(self, "_derived_fused", self._sources(), self._fuse)
        if self.compute is not None and runs_on_onednn(x):
            # Attention reads query|key|value in float32, as it does a float32 model's.
            out = torch.ops.mkldnn._linear_pointwise(x.to(self.compute), weight, None, "none", [], "").float()
            return out if bias is None else out.add_(bias)
        if self.kernel == "onednn" and runs_on_onednn(x):
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        # MKL's GEMM where it was timed faster, a GPU's, or a dtype oneDNN does not take.
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"pack={self.pack}, kernel={self.kernel}" + ("" if self.compute is None else f", compute={self.compute}")

    def _sources(self) -> list[Tensor]:
        return [t for m in self.projections for t in (m.weight, m.bias) if t is not None]

    def _fuse(self) -> tuple[Tensor, Tensor | None]:
        weight = torch.cat([m.weight.detach() for m in self.projections])
        biases = [m.bias for m in self.projections]
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        if self.compute is not None:
            return weight.to(self.compute), bias
        packs = self.pack and weight.dtype in PACKED_DTYPES and weight.device.type == "cpu"
        return (pack_weight(weight) if packs else weight), bias


def optimize(
    model: nn.Module,
    pack_weights: bool = True,
    fuse_activation: bool | None = None,
    compute: torch.dtype | None = None,
    native: bool = True,
) -> nn.Module:
    """Install the fast inference modules in a bertlite BERT model, in place, and return it.

    Each layer's parts are found by their roles (bertlite.layers.roles), so every family's names work.
    query/key/value run as one FusedQKV (a layer whose one Linear already gives them, ModernBERT's Wqkv, runs it as
    a OneDNNLinear); each encoder dense runs as a OneDNNLinear with its activation (intermediate, where that pays
    on this CPU) or residual add (attention output, output) fused; a gated feed-forward's act(gate) * up runs as
    one GatedProduct (bertlite.layers.gated: the activation and the product in its two GEMMs' epilogues); attention
    "sdpa" becomes "varlen" where this process built the C++ attention and it was timed faster here
    (bertlite.layers.native_attention), else "auto" (bertlite.layers.attention). Only plain float32/bfloat16
    Linears on the CPU are replaced (int8's modules, adapters and other devices are left as they are), and
    only with forms oneDNN runs here.
    A float32 Linear runs MKL's GEMM (torch's F.linear) instead where that was timed faster at its shape
    on this CPU (bertlite.layers.linear_choice; timed once per shape, here, not per call).

    Args:
        model: a BertModel or a head (its base model is optimized).
        pack_weights: keep float32 weights in oneDNN's blocked layout (faster, one more copy of the
            encoder's dense weights; none for a Linear that runs MKL's GEMM).
        fuse_activation: run the intermediate activation inside the GEMM (True, where oneDNN runs that
            form for the dtype: activation_fusion_works) or after it (False); None: whichever
            activation_fusion_pays says on this CPU (with `compute`: inside, where it runs).
        compute: torch.bfloat16: the float32 Linears' GEMMs take bf16 inputs, everything else stays float32
            (the module docstring); None: each Linear computes in its own dtype.
        native: "sdpa" may become the C++ attention where it was built here; False: "auto" always.

    Returns:
        The model.
    """
    layers = model_layers(model)
    if layers is None:
        raise TypeError(f"optimize takes a bertlite BERT model, got {type(model).__name__}")
    if compute is not None and not linear_works(compute):
        raise ValueError(f"compute={compute} does not run on oneDNN here")
    forms = _Forms(pack_weights, compute)
    fuse = True if compute is not None and fuse_activation is None else fuse_activation
    for layer in layers:
        attention, roles = attention_of(layer), roles_of(layer)
        forms.install_qkv(layer)
        if attention.attn_implementation == "sdpa":  # the C++ op computes in float32: not for a float64 model
            use = native and native_attention.built() and next(layer.parameters()).dtype in NATIVE_ATTENTION_DTYPES
            attention.attn_implementation = "varlen" if use else "auto"
        for role in RESIDUAL_ROLES:
            dense = part(layer, role)
            if forms.replaceable(dense) and linear_add_works(dense.weight.dtype):
                epilogue = "add" if role in roles.residual_owners else "none"  # a layer with no owner never passes it
                replace(layer, role, OneDNNLinear(dense, **forms.form(dense, epilogue)))
                set_fuses_residual(layer, role, True)
        if roles.gated and forms.install_gated_product(layer, fuse):
            continue
        for role in roles.feed_forward_inputs():
            linear = part(layer, role)
            if forms.replaceable(linear):
                hidden_act = activation_owner(layer).hidden_act
                fused = None if roles.gated else _fused_activation(hidden_act, linear, fuse, compute)
                replace(layer, role, OneDNNLinear(linear, activation=fused, **forms.form(linear, fused or "none")))
                if fused is not None:
                    replace(layer, "activation", ACT2FN["linear"])  # applied inside the GEMM now
    return model


class _Forms:
    """Which Linears optimize replaces, and each replacement's form: kernel and packing (float32 and bf16 models),
    or `compute` (a float32 model's GEMMs on bf16 inputs)."""

    def __init__(self, pack_weights: bool, compute: torch.dtype | None) -> None:
        self.pack_weights, self.compute = pack_weights, compute

    def replaceable(self, linear: nn.Module) -> bool:
        return _replaceable(linear) and (self.compute is None or linear.weight.dtype == torch.float32)

    def form(self, linear: nn.Linear, epilogue: str, outputs: int = 1) -> dict[str, Any]:
        if self.compute is not None:
            return {"compute": self.compute}
        return _form(linear, epilogue, self.pack_weights, outputs)

    def install_qkv(self, layer: nn.Module) -> None:
        """query|key|value as one module: the layer's own fused Linear (ModernBERT's Wqkv), or a FusedQKV."""
        attention = attention_of(layer)
        if roles_of(layer).qkv:
            qkv = part(layer, "qkv")
            if self.replaceable(qkv):
                replace(layer, "qkv", OneDNNLinear(qkv, **self.form(qkv, "none")))
        elif attention.qkv is None:
            linears = tuple(part(layer, role) for role in ("query", "key", "value"))
            # One bias for the three, or none (EuroBERT's projections have none).
            if all(self.replaceable(m) for m in linears) and len({m.bias is None for m in linears}) == 1:
                attention.qkv = FusedQKV(*linears, **self.form(linears[0], "none", outputs=3))

    def install_gated_product(self, layer: nn.Module, fuse: bool | None) -> bool:
        """A gated feed-forward's act(gate) * up as one GatedProduct in its `gated_product` slot (layers.gated),
        where oneDNN runs the product here: float32 or bf16 weights, not `compute` (whose product would round the
        gate to bf16 first).

        Returns:
            Whether it was installed.
        """
        roles, owner = roles_of(layer), activation_owner(layer)
        linears = tuple(part(layer, role) for role in roles.feed_forward_inputs())
        if self.compute is not None or not all(_replaceable(m) for m in linears):
            return False
        if not product_works(linears[0].weight.dtype):
            return False
        fused = _fused_activation(owner.hidden_act, linears[0], fuse)
        epilogue = None if fused is None else FUSED_ACTIVATIONS[fused]
        pack = _packs(linears[0], self.pack_weights)
        owner.gated_product = GatedProduct(linears, roles.activated_first, owner.hidden_act, epilogue, pack)
        return True


def restore(model: nn.Module) -> nn.Module:
    """Undo `optimize`: plain Linears (the same Parameters), no fused query|key|value, transformers' ops.

    Args:
        model: a bertlite BERT model, optimized or not.

    Returns:
        The model.
    """
    layers = model_layers(model)
    if layers is None:
        raise TypeError(f"restore takes a bertlite BERT model, got {type(model).__name__}")
    for layer in layers:
        if roles_of(layer).qkv:
            if isinstance(part(layer, "qkv"), OneDNNLinear):
                replace(layer, "qkv", _plain(part(layer, "qkv")))
        elif isinstance(attention_of(layer).qkv, FusedQKV):
            attention_of(layer).qkv = None
        for role in RESIDUAL_ROLES:
            if isinstance(part(layer, role), OneDNNLinear):
                replace(layer, role, _plain(part(layer, role)))
                set_fuses_residual(layer, role, False)
        for role in roles_of(layer).feed_forward_inputs():
            if isinstance(part(layer, role), OneDNNLinear):
                replace(layer, role, _plain(part(layer, role)))
                replace(layer, "activation", ACT2FN[activation_owner(layer).hidden_act])
        if getattr(activation_owner(layer), "gated_product", None) is not None:
            activation_owner(layer).gated_product = None
    return model


def is_optimized(model: nn.Module) -> bool:
    """Whether `optimize` installed any of its modules in `model`."""
    return any(isinstance(m, (OneDNNLinear, FusedQKV, GatedProduct)) for m in model.modules())


def _replaceable(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return type(module) is nn.Linear and weight.device.type == "cpu" and linear_works(weight.dtype)


def _fused_activation(
    activation: str, linear: nn.Linear, fuse: bool | None, compute: torch.dtype | None = None
) -> str | None:
    if (
        activation not in FUSED_ACTIVATIONS
        or fuse is False
        or not activation_fusion_works(activation, compute or linear.weight.dtype)
        or (compute is not None and linear.bias is not None and not mixed_bias_works(compute))
    ):
        return None  # the activation runs after the GEMM (with `compute`: in float32, on the float32 output)
    if fuse is None and not activation_fusion_pays(
        activation, linear.weight.dtype, linear.in_features, linear.out_features
    ):
        return None
    return activation


def _packs(linear: nn.Linear, pack_weights: bool) -> bool:
    return pack_weights and packing_works(linear.weight.dtype)


def _form(linear: nn.Linear, epilogue: str, pack_weights: bool, outputs: int = 1) -> dict[str, Any]:
    """The kernel and packing of the module replacing `linear` (`outputs` such Linears concatenated): oneDNN's,
    packed where pack_weights and packing_works, unless MKL's was timed faster at its shape (linear_kernel)."""
    pack = _packs(linear, pack_weights)
    shape = LinearShape(linear.in_features, outputs * linear.out_features, epilogue, linear.bias is not None)
    return {"pack": pack, "kernel": linear_kernel(linear.weight.dtype, shape, pack, OneDNNLinear)}


def _plain(module: OneDNNLinear) -> nn.Linear:
    linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
    linear.weight, linear.bias = module.weight, module.bias
    return linear


def fast_linear(linear: nn.Module, pack_weights: bool = True, compute: torch.dtype | None = None) -> nn.Module:
    """`linear` as a OneDNNLinear (the same Parameters) where optimize would replace it, else `linear` itself.

    For a head's Linear outside the encoder, such as the masked-LM decoder a SPLADE model runs on every token.

    Args:
        linear: the module.
        pack_weights: keep a float32 weight in oneDNN's blocked layout (one more copy of it).
        compute: as optimize's: bf16 inputs to the GEMM of a float32 Linear, its output float32.

    Returns:
        The module to use in its place.
    """
    if not _replaceable(linear):
        return linear
    if compute is not None:
        return OneDNNLinear(linear, compute=compute) if linear.weight.dtype == torch.float32 else linear
    return OneDNNLinear(linear, pack=_packs(linear, pack_weights))
