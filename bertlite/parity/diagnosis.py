"""Diagnosis: turn the pattern of parity's failures into likely causes, most specific first."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bertlite.config import SUPPORTED_ACTIVATIONS
from bertlite.parity.compare import HEAD_LOGITS
from bertlite.parity.report import ParityReport

CAUSES = {
    "embeddings": "embeddings: word/position/token-type tables, position_ids, or the embedding LayerNorm (eps)",
    "attention": "self-attention: softmax scaling, the attention mask value, or the dense/LayerNorm after it",
    "intermediate": "the feed-forward activation: a different GELU variant (gelu vs gelu_new / gelu_pytorch_tanh)",
    "output": "the feed-forward output: dense weights, the residual, or LayerNorm eps",
    "pooler": "the pooler: [CLS] selection or its tanh",
    # DistilBERT's layer parts (transformer.layer.N.*)
    "sa_layer_norm": "the attention's residual add or sa_layer_norm",
    "ffn": "the feed-forward (lin1, the activation, lin2): a different activation (config activation) or weights",
    "output_layer_norm": "the feed-forward's residual add or output_layer_norm",
    "head": "the task head: its weights (cls / classifier / qa_outputs), num_labels or id2label in config.json, "
    "or the activation of cls.predictions.transform (hidden_act)",
}


def diagnose(
    report: ParityReport,
    ours: nn.Module,
    ref: nn.Module,
    batches: list[dict[str, Tensor]],
    ours_run: dict,
    ref_run: dict,
    atol: float,
    rtol: float,
) -> list[str]:
    """Turn the pattern of failures into likely causes, most specific first.

    Args:
        report: the filled report.
        ours, ref: bertlite's and transformers' fp32 models.
        batches: the batches run.
        ours_run, ref_run: run()'s results for both.
        atol, rtol: the tolerances.

    Returns:
        The likely causes, as sentences.
    """
    causes = []
    bad_weights = [r.name for r in report.rows if r.kind == "weight" and not r.ok]
    if bad_weights:
        causes.append(
            f"{len(bad_weights)} loaded weight(s) differ from transformers' (first: {bad_weights[0]}): "
            "a key remap bug or a different tensor in the file; fix loading before reading activations"
        )
    if report.only_in_bertlite or report.only_in_transformers:
        causes.append("the two models do not have the same parameters: a module is missing on one side")
    eps = _eps_differences(ours, ref)
    if eps:
        causes.append(f"LayerNorm eps differs at {len(eps)} LayerNorm(s), e.g. {eps[0]}: check layer_norm_eps")
    first = report.first_divergence
    if first is None:
        return causes
    specific = len(causes)
    in_first = [w for w in bad_weights if w.startswith(first + ".")]
    if in_first:
        causes[0] += f"; {first} uses {in_first[0]}"
    part = first.rsplit(".", 1)[-1] if ".layer." in first else first  # encoder.layer.N.x, transformer.layer.N.x
    if report.head and first in HEAD_LOGITS[report.head]:
        part = "head"
    if part == "intermediate":
        activation = _probe_activation(first, ours, ref, ours_run, ref_run)
        if activation:
            causes.append(activation)
    if first in ours_run["modules"] and _only_in_padded_sequences(first, batches, ours_run, ref_run, atol, rtol):
        causes.append(
            f"{first} differs only in sequences that contain padding: the attention mask value or how "
            "padded keys are excluded differs (transformers adds finfo(dtype).min)"
        )
    if len(causes) == specific and not in_first:
        causes.append(f"{first} is the first module out of tolerance; look at {CAUSES.get(part, part)}")
    return causes


def _eps_differences(ours: nn.Module, ref: nn.Module) -> list[str]:
    """The LayerNorms whose eps differs between the two models, as "name (bertlite eps, transformers eps)"."""
    return [
        f"{name} (bertlite {m.eps:g}, transformers {dict(ref.named_modules())[name].eps:g})"
        for name, m in ours.named_modules()
        if isinstance(m, nn.LayerNorm)
        and name in dict(ref.named_modules())
        and m.eps != dict(ref.named_modules())[name].eps
    ]


def _probe_activation(name: str, ours: nn.Module, ref: nn.Module, ours_run: dict, ref_run: dict) -> str | None:
    """Which activation function reproduces each side's intermediate output; None if the same one does."""
    from transformers.activations import ACT2FN  # the reference's own functions, whatever bertlite does

    (x_ref, ref_out), (x_ours, ours_out) = ref_run["modules"][name][0], ours_run["modules"][name][0]
    with torch.no_grad():
        pre_ref = dict(ref.named_modules())[name].dense(x_ref)
        pre_ours = dict(ours.named_modules())[name].dense(x_ours)

    def matches(out: Tensor, z: Tensor) -> list[str]:
        return [
            n
            for n in SUPPORTED_ACTIVATIONS
            if torch.allclose(ACT2FN[n](z).double(), out.double(), atol=1e-6, rtol=1e-5)
        ]

    theirs_like, ours_like = matches(ref_out, pre_ref), matches(ours_out, pre_ours)
    if set(theirs_like) & set(ours_like):
        return None
    return (
        f"{name}: transformers' activation behaves like {theirs_like or '?'}, bertlite's like {ours_like or '?'} "
        f"(config hidden_act={ours.config.hidden_act!r}): a different GELU variant / activation function"
    )


def _only_in_padded_sequences(
    name: str, batches: list[dict[str, Tensor]], ours_run: dict, ref_run: dict, atol: float, rtol: float
) -> bool:
    """Whether module `name` leaves tolerance in rows that hold padding and in no row without any."""
    padded_bad = unpadded_bad = False
    for b, (_, o), (_, r) in zip(batches, ours_run["modules"][name], ref_run["modules"][name], strict=True):
        mask = b["attention_mask"].bool()
        for row in range(mask.shape[0]):
            if o.dim() < 3:
                continue
            valid = mask[row]
            bad = not torch.allclose(o[row][valid].double(), r[row][valid].double(), atol=atol, rtol=rtol)
            if bad and bool(valid.all()):
                unpadded_bad = True
            elif bad:
                padded_bad = True
    return padded_bad and not unpadded_bad
