"""Int8 inference: quantize_int8 swaps the encoder's Linears for int8 GEMMs that keep the vectors close to fp32.

Weights are int8 with one scale per output channel; activations are quantized per token at run time
(bertlite.quant.linear.Int8Linear). Outlier channels, which every token shares, are moved from the
activations into the weights before quantizing (SmoothQuant, Xiao et al. 2022): x @ W.T = (x / s) @ (W * s).T,
with s from the weights and the activations of a small built-in calibration set (bertlite.quant.calibration).
Attention, LayerNorm, softmax and pooling stay fp32. Inference only. The per-token quantization runs as eager
ops (bertlite.quant.rows) or as one kernel torch.compile builds (bertlite.quant.compiled), which gives the same
integers. The kernels and the integer grids they multiply exactly: bertlite.quant.kernels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from bertlite.errors import Int8PrecisionWarning
from bertlite.layers.activations import ACT2FN
from bertlite.layers.lora import LoRALinear
from bertlite.layers.onednn import restore
from bertlite.layers.roles import (
    BERT_ROLES,
    LINEAR_ROLES,
    activation_owner,
    attention_of,
    model_layers,
    part,
    replace,
    roles_of,
    set_fuses_residual,
)
from bertlite.quant import compiled as compiled_quant
from bertlite.quant import ops
from bertlite.quant.allocator import keep_freed_memory
from bertlite.quant.calibration import CALIBRATION_TEXTS, activation_ranges, outlier_channels, smoothing_factors
from bertlite.quant.kernels import (
    FULL_GRID,
    INT8_GRIDS,
    INT8_KERNELS,
    REDUCED_GRID_NOTE,
    Int8Grid,
    describe_int8,
    int8_grid,
    int8_kernel_available,
    resolve_kernel,
)
from bertlite.quant.linear import FusedIntoQKV, Int8Linear, quantize_per_channel, widest_pairs
from bertlite.quant.rows import quantize_rows
from bertlite.utils.warn import warn_user

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bertlite.models.bert import BertPreTrainedModel

# The names this module has always offered, from where they live now.
__all__ = [
    "CALIBRATION_TEXTS",
    "FULL_GRID",
    "INT8_GRIDS",
    "INT8_KERNELS",
    "FusedIntoQKV",
    "Int8Grid",
    "Int8Linear",
    "Int8PrecisionWarning",
    "build_compiled_quantization",
    "compiled_quantization_built",
    "describe_quantization",
    "describe_int8",
    "int8_grid",
    "int8_kernel_available",
    "is_quantized",
    "quantize_int8",
    "quantize_per_channel",
    "quantize_rows",
    "resolve_kernel",
    "widest_pairs",
]

DEFAULT_ALPHA = 0.5  # SmoothQuant's migration strength: how much of an outlier moves into the weight
# The Linears below are named by role (bertlite.layers.roles: "qkv", "attention_output", "intermediate",
# "output"), so every family's layer is quantized alike; the comments and the *_LINEARS names are BERT's paths.
# The encoder Linears quantize_int8 replaces: LINEAR_ROLES.
# The Linears SmoothQuant rescales. Not output.dense: its input, GELU's output, has no shared outlier
# channels to move (smoothing it gains nothing), and its 1 / s would cost a pass over the widest activation.
SMOOTHED_ROLES = ("qkv", "attention_output", "intermediate", "up")
# The Linears whose input is quantized over each token's [min, max], on every grid: the one-sided ones.
# GELU's output is one-sided on every token; query|key|value's input (LayerNorm's output) on the [CLS]
# and [SEP] rows, whose massive channel puts their max far above their |min|, so a symmetric range wastes
# about half its levels on exactly the tokens that make up a text of 2-3 tokens. The attention's context is
# two-sided: an asymmetric range gains nothing there.
ASYMMETRIC_ROLES = ("qkv", "intermediate", "up", "output")
# The Linears whose few outlier input channels stay float32. GELU's output in the first layers holds
# "massive activations": one or two fixed channels on the [CLS] token an order of magnitude above the rest,
# so its per-token range would round every other value to a few levels. A text of 2-3 tokens ("" is [CLS]
# [SEP]) is mostly that token, so these channels stay out of the int8 range.
OUTLIER_ROLES = ("output",)
# The same, by their paths in a BertLayer (the names keep_fp32= and asymmetric= take for a BERT model).
LAYER_LINEARS = tuple(BERT_ROLES.path(role) for role in LINEAR_ROLES)
SMOOTHED_LINEARS = tuple(BERT_ROLES.path(role) for role in SMOOTHED_ROLES if role != "up")
ASYMMETRIC_LINEARS = tuple(BERT_ROLES.path(role) for role in ASYMMETRIC_ROLES if role != "up")
OUTLIER_LINEARS = tuple(BERT_ROLES.path(role) for role in OUTLIER_ROLES)


def is_quantized(model: nn.Module) -> bool:
    """Whether `model` holds any Int8Linear."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


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
    Int8Linear. Those are BERT's names; another family's layer says where its own are (its LayerRoles,
    bertlite.layers.roles: DistilBERT's attention.qkv, attention.out_lin, ffn.lin1, ffn.lin2). Raises
    glibc's malloc thresholds for the whole process (bertlite.quant.allocator.keep_freed_memory;
    BERTLITE_KEEP_FREED_MEMORY=0 keeps them).

    Args:
        model: a float32 bertlite BERT model on the CPU, not yet quantized.
        tokenizer: runs the calibration texts through the fp32 model for SmoothQuant's activation
            ranges; without it, or with alpha=None, no smoothing.
        kernel: one of INT8_KERNELS, or "auto": the fastest that works here.
        alpha: SmoothQuant's migration strength, between 0 and 1 (default DEFAULT_ALPHA); None: no
            smoothing.
        calibration_texts: the texts for the activation ranges; None: CALIBRATION_TEXTS.
        keep_fp32: Linears to leave in fp32, by their path in one layer (LAYER_LINEARS for BERT) or in
            the base model ("encoder.layer.3.output.dense").
        asymmetric: Linears, named the same way, whose input is quantized over each token's
            [min, max]; None: ASYMMETRIC_LINEARS, the one-sided ones.
        compile_quantization: how each Linear quantizes its input and scales its output, decided here for
            every token this model will see (the same numbers every way). None (default): bertlite.quant.ops'
            C++ passes, built here once per process where they build, check and time faster (else torch.compile's
            kernel where this process built it, else the eager ops); True: build_compiled_quantization here (the
            C++ passes, else torch.compile's kernel: seconds), and a machine where neither builds is refused;
            False: the eager ops.

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
    layers = model_layers(model)
    _check_model(model, layers, alpha)
    restore(model)  # quantize the plain Linears (and calibrate on them), not layers.onednn's modules
    names = _LinearNames(base, layers)
    keep = names.check("keep_fp32", keep_fp32)
    keep_freed_memory()  # see bertlite.quant.allocator: the int8 forwards' page faults cost a third of their time
    one_sided = None if asymmetric is None else names.check("asymmetric", asymmetric)
    compiled = _compiled_inputs(kernel, compile_quantization)
    ranges = _calibrate(model, tokenizer, alpha, calibration_texts)
    for i, layer in enumerate(layers):
        chosen = [role for role in names.roles if not names.named(keep, i, role)]
        asym = set(ASYMMETRIC_ROLES) if one_sided is None else {r for r in names.roles if names.named(one_sided, i, r)}
        _quantize_layer(layer, names.full(i, "qkv"), ranges, alpha, chosen, asym, kernel=kernel, compiled=compiled)
    return model


def build_compiled_quantization() -> bool:
    """Build the int8 Linears' compiled kernels now (once per process; seconds): bertlite.quant.ops' C++
    passes, or where they cannot build, torch.compile's input quantization (bertlite.quant.compiled).

    Models quantized after it (quantize_int8's compile_quantization=None) use them.

    Returns:
        Whether either works here (if not, describe_quantization() says why).
    """
    return ops.build() or compiled_quant.build()


def compiled_quantization_built() -> bool:
    """Whether this process has built the int8 Linears' compiled kernels (either kind)."""
    return ops.built() or compiled_quant.built()


def describe_quantization() -> str:
    """How the int8 Linears quantize their inputs and scale their outputs now, in words (for a record)."""
    if ops.built():
        return "compiled (C++ ops: one pass to quantize, one to scale and activate)"
    described = compiled_quant.describe()
    return described if ops.reason() is None else f"{described}; C++ ops: {ops.reason()}"


def _compiled_inputs(kernel: str, compile_quantization: bool | None) -> bool:
    """Warn when the kernel's grid is reduced here, and decide how the Linears quantize their inputs.

    Args:
        kernel: the resolved kernel (resolve_kernel).
        compile_quantization: quantize_int8's: None the compiled kernel where built, True build it, False not.

    Returns:
        Whether the Int8Linears quantize their inputs with the compiled kernel.

    Raises:
        ValueError: compile_quantization=True where the compiled kernel cannot build.
    """
    if int8_grid(kernel).reduced:
        warn_user(f"int8 on this CPU: {REDUCED_GRID_NOTE}", Int8PrecisionWarning)
    if compile_quantization and not build_compiled_quantization():
        raise ValueError(
            f"compile_quantization=True, but it does not work here: {compiled_quant.reason()} (C++ ops: {ops.reason()})"
        )
    if compile_quantization is None:
        ops.build()  # the C++ passes: built once per machine, loaded in well under a second after that
    return compile_quantization is not False and compiled_quantization_built()


def _calibrate(
    model: BertPreTrainedModel, tokenizer: Tokenizer | None, alpha: float | None, texts: Sequence[str] | None
) -> dict[nn.Linear, Tensor]:
    """Measure the activation ranges SmoothQuant and the float32 outlier channels need, when smoothing.

    Args:
        model: the float32 model, its plain Linears in place.
        tokenizer: runs the texts through the model; None: no calibration.
        alpha: SmoothQuant's migration strength; None: no calibration.
        texts: the calibration texts; None: CALIBRATION_TEXTS.

    Returns:
        Each encoder nn.Linear -> (in_features,) max |input| (activation_ranges); empty without calibration.
    """
    if tokenizer is None or alpha is None:
        return {}
    return activation_ranges(model, tokenizer, CALIBRATION_TEXTS if texts is None else texts)


def _quantize_layer(
    layer: nn.Module,
    qkv_name: str,
    ranges: dict[nn.Linear, Tensor],
    alpha: float | None,
    chosen: list[str],
    one_sided: set[str],
    *,
    kernel: str,
    compiled: bool,
) -> None:
    """Swap one layer's chosen Linears for Int8Linear, in place.

    Args:
        layer: encoder.layer[i]; its parts are found by role (bertlite.layers.roles).
        qkv_name: the fused query|key|value's name in the base model, for FusedIntoQKV's message.
        ranges: the calibration's activation ranges (_calibrate); empty: no smoothing, no float32 channels.
        alpha: SmoothQuant's migration strength.
        chosen: the roles (LINEAR_ROLES, and "up" where the layer has one) to quantize, the others left in fp32.
        one_sided: the roles whose input is quantized over each token's [min, max].
        kernel: the resolved int8 kernel.
        compiled: quantize the inputs with the compiled kernel (_compiled_inputs).
    """
    fused_qkv = roles_of(layer).qkv  # one Linear already gives query|key|value (ModernBERT's Wqkv)
    targets = {
        "qkv": [part(layer, "qkv")] if fused_qkv else [part(layer, "query"), part(layer, "key"), part(layer, "value")],
        "attention_output": [part(layer, "attention_output")],
        "intermediate": [part(layer, "intermediate")],
        "output": [part(layer, "output")],
    }
    if roles_of(layer).up:  # a gated feed-forward's own up projection (EuroBERT's up_proj), read as intermediate
        targets["up"] = [part(layer, "up")]
    smooth = {
        role: smoothing_factors(ranges[targets[role][0]], targets[role], alpha)
        for role in chosen
        if ranges and role in SMOOTHED_ROLES
    }
    # The attention's context is probs @ value, so dividing value's output channels by s divides the
    # context's: attention.output.dense's smoothing then costs nothing at run time.
    fold = "qkv" in chosen and "attention_output" in smooth and not fused_qkv
    if fold:
        targets["qkv"][2] = _divided_rows(targets["qkv"][2], smooth["attention_output"])
    for role in chosen:
        linears = targets[role]
        outliers = outlier_channels(ranges[linears[0]]) if ranges and role in OUTLIER_ROLES else None
        quantized = Int8Linear.from_linear(
            linears,
            smooth.get(role),
            kernel,
            role in one_sided,
            smooth_folded=fold and role == "attention_output",
            compiled=compiled,
            outlier_channels=outliers,
        )
        _install(layer, qkv_name, role, quantized)


def _install(layer: nn.Module, qkv_name: str, role: str, quantized: Int8Linear) -> None:
    """Put an Int8Linear in its role's place in one layer; for q|k|v, FusedIntoQKV where query / key / value were.

    Args:
        layer: encoder.layer[i].
        qkv_name: the fused query|key|value's name in the base model, for FusedIntoQKV's message.
        role: one of LINEAR_ROLES.
        quantized: its Int8Linear.
    """
    if role == "qkv" and roles_of(layer).qkv:
        replace(layer, "qkv", quantized)  # the fused Linear's own place
    elif role == "qkv":
        attention_of(layer).qkv = quantized
        roles = roles_of(layer)
        for projection in ("query", "key", "value"):
            path = roles.path(projection)
            name = f"{qkv_name.removesuffix('qkv')}{path.rpartition('.')[2]}"  # encoder.layer.3.attention.self.key
            replace(layer, projection, FusedIntoQKV(name, qkv_name))
    elif role == "intermediate":
        replace(layer, role, quantized)
        if not roles_of(layer).gated:  # GeGLU's activation reads half of the output: it stays the layer's
            quantized.activation = activation_owner(layer).hidden_act
            replace(layer, "activation", ACT2FN["linear"])  # applied by the Int8Linear now
    else:
        replace(layer, role, quantized)
        set_fuses_residual(layer, role, True)  # attention output, output: the residual add goes in


def _check_model(model: nn.Module, layers: nn.ModuleList | None, alpha: float | None) -> None:
    if layers is None:
        raise TypeError(f"quantize_int8 takes a bertlite BERT model, got {type(model).__name__}")
    if is_quantized(model):
        raise ValueError("the model is already quantized (it holds Int8Linear modules)")
    if any(isinstance(m, LoRALinear) for m in model.modules()):
        # An Int8Linear in a LoRALinear's place would drop its task adapters.
        raise ValueError("quantize_int8: the model has task adapters (jina-embeddings-v3's), which int8 does not keep")
    weight = model.get_input_embeddings().weight
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


class _LinearNames:
    """The names keep_fp32= and asymmetric= take for a model: each Linear's path in one layer (its roles'
    paths; BERT's are LAYER_LINEARS) or in the base model ("encoder.layer.3.output.dense")."""

    def __init__(self, base: nn.Module, layers: nn.ModuleList) -> None:
        roles = roles_of(layers[0]) if len(layers) else BERT_ROLES
        self.roles = LINEAR_ROLES + (("up",) if roles.up else ())  # a gated feed-forward's own up projection too
        self.paths = {role: roles.path(role) for role in self.roles}
        # The layers' path in the base model: "encoder.layer" (BERT), "transformer.layer" (DistilBERT), "layers".
        self.prefix = next((name for name, child in base.named_modules() if child is layers), "encoder.layer")
        self.layers = len(layers)

    def full(self, i: int, role: str) -> str:
        """The name in the base model of layer i's Linear of `role`."""
        return f"{self.prefix}.{i}.{self.paths[role]}"

    def named(self, names: set[str], i: int, role: str) -> bool:
        """Whether `names` (check()'s) name layer i's Linear of `role`."""
        return self.paths[role] in names or self.full(i, role) in names

    def check(self, option: str, names: Iterable[str]) -> set[str]:
        """The names given to `option`, checked.

        Raises:
            TypeError: a string instead of a list.
            ValueError: a name that is no quantizable Linear of this model, naming those that are.
        """
        if isinstance(names, str):
            raise TypeError(f"{option} takes a list of Linear names, got the string {names!r}")
        chosen = set(names)
        paths = tuple(self.paths.values())
        known = {self.full(i, role) for i in range(self.layers) for role in self.roles}
        unknown = sorted(name for name in chosen if name not in paths and name not in known)
        if unknown:
            raise ValueError(
                f"{option}: {', '.join(map(repr, unknown))} not among the quantizable Linears "
                f"({', '.join(paths)}, or {self.prefix}.<i>.<name> for i < {self.layers})"
            )
        return chosen
