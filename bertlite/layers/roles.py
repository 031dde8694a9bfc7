"""Where a layer keeps its parts: each family's layer class declares, by role, the paths of its query, key,
value and dense Linears, so the code that swaps modules (layers.onednn, quant.int8, jobs.prepare) reaches
them under any family's names (BERT's `attention.self.query`, DistilBERT's `attention.q_lin`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

# The Linear roles a module swap replaces, in the order a layer runs them; "qkv" is query|key|value as one.
LINEAR_ROLES = ("qkv", "attention_output", "intermediate", "output")
# The Linears whose output the layer adds the residual to.
RESIDUAL_ROLES = ("attention_output", "output")


@dataclass(frozen=True)
class LayerRoles:
    """A layer's parts by role, each a dotted path inside one layer (what `layer.get_submodule` takes).

    A family declares its names with a class attribute on its layer class, `roles = LayerRoles(...)`, and
    its attention module subclasses BertSelfAttention (which runs the kernels by name and takes `qkv`).
    BERT's (BertLayer.roles): attention "attention.self", query "attention.self.query", attention_output
    "attention.output.dense", intermediate "intermediate.dense", output "output.dense". DistilBERT's
    (TransformerBlock.roles): attention "attention", query "attention.q_lin", attention_output
    "attention.out_lin", intermediate "ffn.lin1", output "ffn.lin2". MPNet's (MPNetLayer.roles): attention
    "attention.attn", query "attention.attn.q", ... attention_output "attention.attn.o".

    Attributes:
        attention: the module that runs attention: `attn_implementation` (the kernel's name) and `qkv` (None,
            or a module giving query|key|value in one call, which the swaps install) are its attributes.
        query, key, value: the three projections' Linears.
        attention_output: the Linear on the attention's context; the residual is added to its output.
        intermediate: the feed-forward's first Linear.
        activation: the attribute holding the activation after `intermediate` (owner path, then its name);
            the owner keeps the activation's name (an ACT2FN key) in `hidden_act`.
        output: the feed-forward's second Linear; the residual is added to its output.
        residual_owners: for attention_output and output, the module whose `fuses_residual` flag makes the
            layer call that Linear as `forward(x, residual=)`, the add inside its GEMM (inference only).
        qkv: a Linear that already gives query|key|value in one GEMM (ModernBERT's "attn.Wqkv"), swapped as it
            is; query, key and value are then "". "": the attention module's `qkv` slot, which the swaps fill.
        gated: the feed-forward is gated, act(gate) * up: `intermediate` gives both halves (ModernBERT's GeGLU
            mlp.Wi, input|gate) or, where `up` names the other Linear, the activated one alone (EuroBERT's
            gate_proj). Its activation then stays outside the intermediate's GEMM, and the swaps may install a
            module giving the product in the activation owner's `gated_product` slot (layers.gated).
        up: a gated feed-forward's multiplied Linear where it is its own (EuroBERT's and GTE's mlp.up_proj,
            NomicBERT's mlp.fc11); "" where `intermediate` gives both halves.
        activated_first: a fused gated intermediate's activation reads its first half (ModernBERT's input|gate,
            JinaBERT-v2's gated|non_gated); False: its second (JinaBERT-v2's up|gated mlp.up_gated_layer).
    """

    attention: str
    query: str
    key: str
    value: str
    attention_output: str
    intermediate: str
    activation: str
    output: str
    residual_owners: dict[str, str] = field(default_factory=dict)
    qkv: str = ""
    gated: bool = False
    up: str = ""
    activated_first: bool = True

    def feed_forward_inputs(self) -> tuple[str, ...]:
        """The roles of the Linears that read the feed-forward's input: "intermediate", and "up" where it is its own."""
        return ("intermediate", "up") if self.up else ("intermediate",)

    def path(self, role: str) -> str:
        """The path of a role: one of LayerRoles' fields, or "qkv" (the fused Linear, or the attention's slot)."""
        if role == "qkv":
            return self.qkv or f"{self.attention}.qkv"
        return getattr(self, role)


# BERT's (BertLayer.roles): also RoBERTa's and ELECTRA's, whose layers are BERT's.
BERT_ROLES = LayerRoles(
    attention="attention.self",
    query="attention.self.query",
    key="attention.self.key",
    value="attention.self.value",
    attention_output="attention.output.dense",
    intermediate="intermediate.dense",
    activation="intermediate.intermediate_act_fn",
    output="output.dense",
    residual_owners={"attention_output": "attention.output", "output": "output"},
)


def model_layers(model: nn.Module) -> nn.ModuleList | None:
    """A bertlite model's layers: its base model's encoder.layer (BERT's; DistilBERT's transformer.layer, under
    `encoder` too), or its layers (ModernBERT's).

    Args:
        model: a base model or a head (its base_model's layers).

    Returns:
        The layers, or None for a model that has neither.
    """
    base = getattr(model, "base_model", model)
    encoder = getattr(base, "encoder", None)
    layers = getattr(encoder, "layer", None) if encoder is not None else getattr(base, "layers", None)
    return layers if isinstance(layers, nn.ModuleList) else None


def roles_of(layer: nn.Module) -> LayerRoles:
    """The roles a layer's class declares.

    Raises:
        TypeError: the class declares none (no `roles` LayerRoles attribute).
    """
    roles = getattr(type(layer), "roles", None)
    if not isinstance(roles, LayerRoles):
        raise TypeError(f"{type(layer).__name__} declares no layer roles (a `roles = LayerRoles(...)` class attribute)")
    return roles


def get_part(layer: nn.Module, path: str) -> Any:
    """The module or attribute at a dotted `path` in `layer` ("" is the layer itself)."""
    part: Any = layer
    for name in filter(None, path.split(".")):
        part = getattr(part, name)
    return part


def set_part(layer: nn.Module, path: str, value: Any) -> None:
    """Put `value` at a dotted `path` in `layer` (a submodule, or a plain attribute such as a flag)."""
    owner, _, name = path.rpartition(".")
    setattr(get_part(layer, owner), name, value)


def part(layer: nn.Module, role: str) -> Any:
    """A layer's part by role (a field of LayerRoles, or "qkv")."""
    return get_part(layer, roles_of(layer).path(role))


def replace(layer: nn.Module, role: str, value: Any) -> None:
    """Put `value` in a layer's place for `role`."""
    set_part(layer, roles_of(layer).path(role), value)


def set_fuses_residual(layer: nn.Module, role: str, value: bool) -> None:
    """Say whether the layer passes the residual into its `role` Linear (one of RESIDUAL_ROLES)."""
    owner = roles_of(layer).residual_owners.get(role)
    if owner is not None:
        get_part(layer, owner).fuses_residual = value


def activation_owner(layer: nn.Module) -> nn.Module:
    """The module holding a layer's intermediate activation, and its name in `hidden_act`."""
    return get_part(layer, roles_of(layer).activation.rpartition(".")[0])


def attention_of(layer: nn.Module) -> nn.Module:
    """The module that runs a layer's attention (its attn_implementation and qkv)."""
    return part(layer, "attention")
