"""Max abs diff of every task head vs transformers (logits and loss), eager and sdpa, on tiny random
models with padded inputs and labels. Usage: python scripts/heads_parity.py

tests/models/test_heads.py asserts the eager heads within a tolerance; this prints the numbers, for sdpa too.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

import bertlite

HEADS = (
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertLMHeadModel",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForMultipleChoice",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
)
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
# Model shapes every head is compared on, and what each head's config needs.
SHAPES = {
    "tiny": {},
    "gelu_new-2heads-3types-3layers": dict(
        hidden_act="gelu_new", num_attention_heads=2, type_vocab_size=3, num_hidden_layers=3, pad_token_id=5
    ),
}
HEAD_CONFIG: dict[str, dict[str, Any]] = {
    "BertLMHeadModel": dict(is_decoder=True),
    "BertForSequenceClassification": dict(num_labels=3),
    "BertForTokenClassification": dict(num_labels=5),
}
LOGITS = ("logits", "prediction_logits", "seq_relationship_logits", "start_logits", "end_logits")


def models(name: str, attn: str, shape: dict[str, Any]) -> tuple[Any, Any]:
    """A random transformers head (every weight far from its init) and bertlite's with its weights."""
    torch.manual_seed(0)
    config = transformers.BertConfig(**{**TINY, **HEAD_CONFIG.get(name, {}), **shape})
    config._attn_implementation = attn
    hf = getattr(transformers, name)(config)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    ours = getattr(bertlite, name)(bertlite.BertConfig.from_dict(config.to_dict()), attn_implementation=attn)
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf.eval(), ours.eval()


def inputs(name: str, config: transformers.BertConfig, batch: int = 3, seq: int = 11) -> dict[str, torch.Tensor]:
    """Padded rows of two segments, and the head's labels (ignored -100 at padding)."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.linspace(seq, seq // 3, batch).long()
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()  # (B, T)
    ids = torch.randint(1, config.vocab_size, (batch, seq), generator=g).masked_fill(
        mask == 0, config.pad_token_id or 0
    )
    types = ((torch.arange(seq)[None, :] >= lengths[:, None] // 2).long() * mask).clamp(max=config.type_vocab_size - 1)
    x = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    tokens = torch.randint(0, config.vocab_size, (batch, seq), generator=g).masked_fill(mask == 0, -100)
    if name == "BertForPreTraining":
        return {**x, "labels": tokens, "next_sentence_label": torch.tensor([0, 1, 1])}
    if name == "BertForMaskedLM":
        return {**x, "labels": tokens}
    if name == "BertLMHeadModel":
        return {**x, "labels": ids.masked_fill(mask == 0, -100)}
    if name == "BertForMultipleChoice":
        return {
            **{k: torch.stack([v, v.roll(1, dims=0)], dim=1) for k, v in x.items()},
            "labels": torch.tensor([1, 0, 1]),
        }
    if name == "BertForTokenClassification":
        return {
            **x,
            "labels": torch.randint(0, config.num_labels, (batch, seq), generator=g).masked_fill(mask == 0, -100),
        }
    if name == "BertForQuestionAnswering":
        return {**x, "start_positions": torch.tensor([0, 3, 40]), "end_positions": torch.tensor([[5], [4], [2]])}
    return {**x, "labels": torch.tensor([1, 0, 1] if name == "BertForNextSentencePrediction" else [2, 0, 1])}


def main() -> None:
    """Print each head's worst logits and loss difference over SHAPES, eager and sdpa."""
    print(f"{'head':34s} {'attn':5s} {'max|logits diff|':>17s} {'|loss diff|':>12s}")
    for name in HEADS:
        for attn in ("eager", "sdpa"):
            worst_logits = worst_loss = 0.0
            for shape in SHAPES.values():
                hf, ours = models(name, attn, shape)
                batch = inputs(name, hf.config)
                with torch.no_grad():
                    a, b = hf(**batch), ours(**batch)
                for key in LOGITS:
                    if getattr(a, key, None) is not None:
                        worst_logits = max(worst_logits, (a[key] - b[key]).abs().max().item())
                worst_loss = max(worst_loss, (a.loss - b.loss).abs().item())
            print(f"{name:34s} {attn:5s} {worst_logits:17.2e} {worst_loss:12.2e}")


if __name__ == "__main__":
    main()
