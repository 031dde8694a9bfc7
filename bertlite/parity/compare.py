"""The comparison engine: run both models with hooks on their sub-modules, and compare weights, module
outputs, attention maps, outputs and a task head's logits, one Row each.

In float32 a tensor passes when it is allclose(atol, rtol) to the reference; in bfloat16 / float16 our
error against the fp32 reference may be at most twice the error of transformers itself run in that dtype
(plus atol), as flash-attention's tests do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from bertlite.checkpoint.save import fuse_linears
from bertlite.config import FAMILIES
from bertlite.parity.report import ParityReport, Row

# The heads `--head auto` compares: architecture -> its logits fields, each per token (padded
# positions excluded) or per sequence. The reference is transformers' Auto class of the same
# architecture (bertlite.models.auto.ARCHITECTURES).
HEAD_LOGITS = {
    "BertForPreTraining": {"prediction_logits": "token", "seq_relationship_logits": "pooled"},
    "BertForMaskedLM": {"logits": "token"},
    "BertLMHeadModel": {"logits": "token"},
    "BertForNextSentencePrediction": {"logits": "pooled"},
    "BertForSequenceClassification": {"logits": "pooled"},
    "BertForMultipleChoice": {"logits": "pooled"},  # each batch runs as one question whose choices are its texts
    "BertForTokenClassification": {"logits": "token"},
    "BertForQuestionAnswering": {"start_logits": "token", "end_logits": "token"},
}
# The other families' heads, by class name -> BERT's head of the same task, whose logits fields and transformers
# Auto class they share (XLMRobertaForSequenceClassification -> BertForSequenceClassification).
FAMILY_HEADS: dict[str, str] = {
    family.prefix + head: "Bert" + head
    for family in FAMILIES.values()
    if family.prefix != "Bert"
    for head in family.heads
    if "Bert" + head in HEAD_LOGITS
}
HEAD_LOGITS |= {name: HEAD_LOGITS[bert] for name, bert in FAMILY_HEADS.items()}
HEAD_LOGITS["ElectraForPreTraining"] = {"logits": "token"}  # the discriminator: one logit per token
# Families whose transformers module tree is not the checkpoint's, which bertlite keeps (GTE: transformers splits
# qkv_proj and up_gate_proj and renames the layer's parts; NomicBERT: Wqkv, fc11/fc12, norm1/norm2, emb_ln;
# jina-embeddings-v3: mixer.Wqkv, norm1/norm2, emb_ln):
# bertlite's module name -> transformers', by pattern.
# Their weights are compared in the checkpoint's layout, both state_dicts converted back as each saves it.
REFERENCE_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "gte": (
        (r"^encoder\.layer\.", "layers."),
        (r"\.attention$", ".self_attn"),
        (r"\.attn_ln$", ".post_attention_layernorm"),
        (r"\.mlp_ln$", ".post_mlp_layernorm"),
    ),
    "nomic_bert": (
        (r"^emb_ln$", "embeddings"),
        (r"^encoder\.layers\.", "layers."),
        (r"\.attn$", ".self_attn"),
        (r"\.norm1$", ".post_attention_layernorm"),
        (r"\.norm2$", ".post_mlp_layernorm"),
    ),
    "jina_embeddings_v3": (
        (r"^emb_ln$", "embeddings"),
        (r"^encoder\.layers\.", "layers."),
        (r"\.mixer$", ".self_attn"),
        (r"\.norm1$", ".post_attention_layernorm"),
        (r"\.norm2$", ".post_mlp_layernorm"),
    ),
}


def reference_names(model_type: str, names: list[str]) -> dict[str, str]:
    """transformers' module name for each of bertlite's compared modules (itself unless REFERENCE_NAMES says).

    Args:
        model_type: the checkpoint's model_type.
        names: bertlite's module names (module_names()).

    Returns:
        bertlite's name -> transformers'.
    """
    patterns = REFERENCE_NAMES.get(model_type, ())
    out = {}
    for name in names:
        theirs = name
        for pattern, replacement in patterns:
            theirs = re.sub(pattern, replacement, theirs)
        out[name] = theirs
    return out


def module_names(model: nn.Module, has_pooler: bool) -> list[str]:
    """List the compared sub-modules in execution order: the first that leaves tolerance is the divergence.

    Args:
        model: bertlite's base model; its layers' parts are named as transformers names them.
        has_pooler: include the pooler.

    Returns:
        The module names: embeddings, each layer's parts (BERT's attention, intermediate, output; DistilBERT's
        attention, sa_layer_norm, ffn, output_layer_norm under transformer.layer; ModernBERT's attn_norm, attn,
        mlp_norm, mlp under layers, then its final_norm; EuroBERT's embed_tokens, its layers' parts, norm), then
        pooler.
    """
    if getattr(model, "encoder", None) is None:  # ModernBERT's, EuroBERT's: the layers and final norm are its own
        names = []
        for name, child in model.named_children():  # the rotary positions hold no weights: left out
            if name == "layers":
                names += [f"layers.{i}.{part}" for i, layer in enumerate(child) for part, _ in layer.named_children()]
            elif any(True for _ in child.parameters()):
                names.append(name)
        return names
    encoder = model.encoder  # DistilBERT's `transformer` under BERT's name
    prefix = next(name for name, child in model.named_children() if child is encoder)
    # The layers' own name: `layer`, NomicBERT's `layers`.
    prefix += "." + next(name for name, child in encoder.named_children() if child is encoder.layer)
    names = ["emb_ln" if hasattr(model, "emb_ln") else "embeddings"]  # NomicBERT's embeddings end in emb_ln
    for i, layer in enumerate(encoder.layer):
        # A dropout changes nothing at inference, and GTE's runs twice a layer.
        parts = (part for part, child in layer.named_children() if not isinstance(child, nn.Dropout))
        names += [f"{prefix}.{i}.{part}" for part in parts]
    return names + (["pooler"] if has_pooler else [])


@contextmanager
def capture(
    model: nn.Module, names: list[str], aliases: dict[str, str] | None = None
) -> Iterator[dict[str, list[tuple[Tensor, Tensor]]]]:
    """Record (first input, output) of each named module on every forward, while the block runs.

    Args:
        model: the model.
        names: its sub-module names.
        aliases: a name -> the module's name in this model, where it differs (reference_names()).

    Yields:
        name -> list of (input, output) tensors, one pair per forward, filled as the model runs.
    """
    found = dict(model.named_modules())
    records: dict[str, list[tuple[Tensor, Tensor]]] = {n: [] for n in names}
    handles = []
    for name in names:

        def hook(module, args, output, name=name):
            out = output[0] if isinstance(output, tuple) else output
            records[name].append((args[0].detach() if args else None, out.detach()))

        handles.append(found[(aliases or {}).get(name, name)].register_forward_hook(hook))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def run(
    model: nn.Module, batches: list[dict[str, Tensor]], names: list[str], aliases: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run every batch and collect what parity compares.

    Args:
        model: a BertModel (bertlite's or transformers').
        batches: make_batches()'s output.
        names: the sub-modules to capture (module_names()).
        aliases: as capture()'s: the records stay under `names`.

    Returns:
        {"modules": capture()'s records, "last_hidden_state", "pooler_output", "attentions"}: one entry
        per batch each.
    """
    with torch.no_grad(), capture(model, names, aliases) as records:
        outs = [model(**b) for b in batches]
    with torch.no_grad():
        # A separate call: asking for probabilities may change the attention path.
        probs = [model(**b, output_attentions=True).attentions for b in batches]
    return {
        "modules": records,
        "last_hidden_state": [o.last_hidden_state for o in outs],
        "pooler_output": [getattr(o, "pooler_output", None) for o in outs],  # none from a model without a pooler
        "attentions": probs,
    }


def select_valid(t: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Keep the elements that belong to real tokens (padded positions excluded).

    Args:
        t: (B, T, ...) per-token values, (B, nh, T, T) attention, or (B, ...) pooled values.
        mask: (B, T) attention mask.
        kind: "token", "attention" or "pooled" (kept whole).

    Returns:
        The kept elements, (valid tokens, ...) or flattened.
    """
    mask = mask.bool()
    if kind == "pooled":
        return t.reshape(-1)
    if kind == "attention":
        pair = mask[:, None, :, None] & mask[:, None, None, :]  # (B, 1, T, T)
        return t[pair.expand_as(t)]
    return t[mask]  # (B, T, ...) -> (valid tokens, ...)


def error_stats(ours: list[Tensor], ref: list[Tensor], atol: float, rtol: float) -> tuple[float, float, float, float]:
    """Measure the error of `ours` against `ref` over all batches.

    Args:
        ours: bertlite's tensors.
        ref: the reference's, same shapes.
        atol, rtol: the tolerances of the allclose bar.

    Returns:
        (max_abs, mean_abs, max_rel, the allclose bar atol + rtol * |ref| at the worst element).
    """
    o = torch.cat([x.double().reshape(-1) for x in ours])
    r = torch.cat([x.double().reshape(-1) for x in ref])
    if o.numel() == 0:
        return 0.0, 0.0, 0.0, atol
    diff = (o - r).abs().nan_to_num(nan=math.inf)
    worst = int((diff - (atol + rtol * r.abs())).argmax())
    max_rel = (diff / (r.abs() + max(atol, 1e-12))).max().item()
    return diff.max().item(), diff.mean().item(), max_rel, atol + rtol * r[worst].abs().item()


def make_row(
    kind: str, name: str, ours: list[Tensor], ref: list[Tensor], theirs: list[Tensor] | None, atol: float, rtol: float
) -> Row:
    """Compare one tensor and decide whether it passes.

    Args:
        kind: the Row kind ("module", "attention", "output", "logits", ...).
        name: its label.
        ours: bertlite's tensors, one per batch.
        ref: transformers' fp32 tensors.
        theirs: transformers' in the low dtype; None (fp32): pass by allclose(atol, rtol). Given, the
            bar is twice transformers' own error against fp32, plus atol.
        atol, rtol: the tolerances.

    Returns:
        The Row.
    """
    max_abs, mean_abs, max_rel, allowed = error_stats(ours, ref, atol, rtol)
    if theirs is None:
        ok = all(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol) for a, b in zip(ours, ref, strict=True))
        return Row(kind, name, max_abs, mean_abs, max_rel, allowed, ok)
    reference_error = error_stats(theirs, ref, atol, rtol)[0]
    allowed = 2 * reference_error + atol
    return Row(kind, name, max_abs, mean_abs, max_rel, allowed, max_abs <= allowed, reference_error)


def compare_weights(report: ParityReport, ours: nn.Module, ref: nn.Module, low_dtype: torch.dtype | None) -> None:
    """Compare every tensor bertlite loaded with the one transformers loaded for the same name, bit for bit.

    A head's base-model tensors are named without the `bert.` prefix, as the module rows are.

    Args:
        report: gets one "weight" row per shared name, and the names only one side has.
        ours: bertlite's model.
        ref: transformers' fp32 model.
        low_dtype: the dtype bertlite runs in when the fp32 reference must be cast to it first, else None.
    """
    reference = ref.state_dict()
    if getattr(ref.config, "model_type", None) in REFERENCE_NAMES:
        from transformers.core_model_loading import revert_weight_conversion

        reference = revert_weight_conversion(ref, reference)  # the checkpoint's layout, as transformers saves
        mine = fuse_linears(ours.state_dict(), ours.base_model_prefix)  # bertlite's held apart as transformers' are
    else:
        mine = ours.state_dict()
    mine, theirs = _base_names(mine), _base_names(reference)
    report.only_in_bertlite = sorted(set(mine) - set(theirs))
    report.only_in_transformers = sorted(set(theirs) - set(mine))
    for key in (k for k in theirs if k in mine):
        reference = theirs[key].to(low_dtype) if low_dtype is not None else theirs[key]
        max_abs, mean_abs, max_rel, _ = error_stats([mine[key]], [reference], 0.0, 0.0)
        ok = mine[key].shape == reference.shape and torch.equal(mine[key], reference)
        report.rows.append(Row("weight", key, max_abs, mean_abs, max_rel, 0.0, ok))


def _base_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k.removeprefix("bert."): v for k, v in state.items()}


def run_head(model: nn.Module, batches: list[dict[str, Tensor]], architecture: str) -> dict[str, list[Tensor]]:
    """Run a head on every batch and keep its logits.

    Args:
        model: the head model.
        batches: make_batches()'s output (for multiple choice, one question whose choices are the batch).
        architecture: its class name, a key of HEAD_LOGITS.

    Returns:
        Each logits field -> one tensor per batch, only real tokens kept for per-token logits.
    """
    fields = HEAD_LOGITS[architecture]
    out: dict[str, list[Tensor]] = {key: [] for key in fields}
    with torch.no_grad():
        for b in batches:
            if architecture.endswith("ForMultipleChoice"):
                b = {k: v[None] for k, v in b.items()}  # (1, B, T): one question, B choices
            result = model(**b)
            for key, kind in fields.items():
                out[key].append(select_valid(result[key], b["attention_mask"], kind))
    return out


def compare_logits(
    report: ParityReport,
    architecture: str,
    ours: dict[str, list[Tensor]],
    ref: dict[str, list[Tensor]],
    theirs: dict[str, list[Tensor]] | None,
    atol: float,
    rtol: float,
) -> None:
    """Add a "logits" row per logits field of the head to the report (see make_row for ours/ref/theirs)."""
    for key in HEAD_LOGITS[architecture]:
        theirs_key = theirs[key] if theirs is not None else None
        _add_row(report, make_row("logits", key, ours[key], ref[key], theirs_key, atol, rtol), divergence=key)


def _add_row(report: ParityReport, row: Row, divergence: str | None = None) -> None:
    """Append `row`; a failing row that can locate the fault (divergence: its name) is the first divergence
    unless an earlier one is."""
    report.rows.append(row)
    if divergence is not None and not row.ok and report.first_divergence is None:
        report.first_divergence = divergence


def _module_label(name: str) -> str:
    """A module's row label; an output that transformers returns in hidden_states says which one."""
    if name.endswith(".output") and ".layer." in name:
        return f"{name} (hidden_states[{int(name.split('.')[2]) + 1}])"
    if name == "embeddings":
        return "embeddings (hidden_states[0])"
    return name


def compare_activations(
    report: ParityReport,
    batches: list[dict[str, Tensor]],
    names: list[str],
    ours: dict,
    ref: dict,
    theirs: dict | None,
    atol: float,
    rtol: float,
) -> None:
    """Add rows for every module, attention map and output to the report; the first failing module is
    the first divergence, a failing attention map only when no module fails.

    Args:
        report: the report, appended to.
        batches: the batches run (their attention masks select the real tokens).
        names: the compared modules (module_names()).
        ours, ref, theirs: run()'s results for bertlite, transformers fp32 and transformers in the low
            dtype (None in float32); see make_row.
        atol, rtol: the tolerances.
    """
    masks = [b["attention_mask"] for b in batches]

    def pick(run_: dict | None, key: str, kind: str, index: int | None) -> list[Tensor] | None:
        if run_ is None:
            return None
        if key in run_["modules"]:
            tensors = [out for _, out in run_["modules"][key]]
        elif index is not None:
            tensors = [probs[index] for probs in run_[key]]
        else:
            tensors = run_[key]
        return [select_valid(t, m, kind) for t, m in zip(tensors, masks, strict=True)]

    def row(row_kind: str, label: str, key: str, kind: str, index: int | None = None) -> Row:
        picked = (pick(run_, key, kind, index) for run_ in (ours, ref, theirs))
        return make_row(row_kind, label, *picked, atol, rtol)

    # The first failing module is the first divergence; a failing attention map only when no module fails.
    for name in names:
        kind = "pooled" if name == "pooler" else "token"
        _add_row(report, row("module", _module_label(name), name, kind), divergence=name)
    for i in range(len(ours["attentions"][0])):
        _add_row(report, row("attention", f"attentions[{i}]", "attentions", "attention", i), f"attentions[{i}]")
    for key, kind in (("last_hidden_state", "token"), ("pooler_output", "pooled")):
        if ours[key][0] is not None and ref[key][0] is not None:
            _add_row(report, row("output", key, key, kind))
