"""The drop-in promises beyond the forward, for every family beside BERT, each beside transformers in the same
run: LoRA through PEFT (the family's own Linear names) trains to the same logits and gradients, and
torch.export with a dynamic batch and length gives the eager outputs."""

from __future__ import annotations

import peft
import pytest
import torch
import transformers

from bertlite import integrations
from bertlite.models.modeling_utils import PreTrainedModel

SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
# The Linears LoRA targets in each family (PEFT's defaults where it has them; q/v under the family's names).
LORA_TARGETS = {
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "camembert": ["query", "value"],
    "electra": ["query", "value"],
    "mpnet": ["q", "v"],
    "distilbert": ["q_lin", "v_lin"],
    "eurobert": ["q_proj", "v_proj"],
    "deberta-v2": ["query_proj", "value_proj"],
    "gte": ["q_proj", "v_proj"],
    "nomic_bert": ["q_proj", "v_proj"],
}
# Families whose module tree keeps its checkpoints' names where transformers renames them: bertlite's name ->
# transformers', for the LoRA parameters' names.
RENAMED = {
    "gte": {".encoder.layer.": ".layers.", ".attention.": ".self_attn."},
    "nomic_bert": {".encoder.layers.": ".layers.", ".attn.": ".self_attn."},
}
# Config values beside SIZES: special token ids inside its vocabulary where the defaults lie past it; DeBERTa-v3's
# disentangled attention (transformers' default DeBERTa-v2 config has no relative positions).
OVERRIDES = {
    "eurobert": dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, mask_token_id=3),
    "deberta-v2": dict(
        relative_attention=True,
        position_buckets=8,
        max_relative_positions=64,
        pos_att_type="p2c|c2p",
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
    ),
}


def twins(model_type: str, head: str, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' model of the family and head (random, far from the init) and bertlite's twin of it."""
    config = transformers.AutoConfig.for_model(
        model_type, **SIZES, **OVERRIDES.get(model_type, {}), attn_implementation="eager"
    )
    torch.manual_seed(seed)
    name = type(transformers.AutoModel.from_config(config)).__name__.removesuffix("Model") + head
    hf = getattr(transformers, name)(config)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    return hf.eval(), integrations.to_bertlite(hf, "eager").eval()


def family_batch(model_type: str) -> dict[str, torch.Tensor]:
    """Two texts, the second right-padded with the family's pad id (1, or 0 for DistilBERT, ELECTRA, DeBERTa)."""
    pad = 0 if model_type in ("distilbert", "electra", "deberta-v2") else 1
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (2, 9))
    mask = torch.ones_like(ids)
    ids[1, 6:], mask[1, 6:] = pad, 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # PEFT asks it
@pytest.mark.parametrize("model_type", sorted(LORA_TARGETS))
def test_peft_lora_trains_each_family_as_transformers(model_type: str) -> None:
    batch, labels = family_batch(model_type), torch.tensor([0, 1])
    results = []
    for model in twins(model_type, "ForSequenceClassification"):
        torch.manual_seed(0)  # LoRA's A matrices are drawn at random
        config = peft.LoraConfig(task_type="SEQ_CLS", target_modules=LORA_TARGETS[model_type], r=4, lora_alpha=8)
        lora = peft.get_peft_model(model, config)
        with torch.no_grad():  # B starts at zero: move it, so the adapter changes the logits
            for name, p in lora.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.1)
        out = lora(**batch, labels=labels)
        out.loss.backward()
        grads = {name: p.grad for name, p in lora.named_parameters() if p.requires_grad and p.grad is not None}
        results.append((out.logits.detach(), grads))
    (theirs, their_grads), (ours, our_grads) = results
    for mine, native in RENAMED.get(model_type, {}).items():
        our_grads = {name.replace(mine, native): grad for name, grad in our_grads.items()}
    assert sorted(our_grads) == sorted(their_grads) and any("lora_A" in name for name in our_grads)
    torch.testing.assert_close(ours, theirs, atol=0.0, rtol=0.0)
    for name, grad in their_grads.items():
        torch.testing.assert_close(our_grads[name], grad, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(LORA_TARGETS))
def test_torch_export_of_each_family_gives_the_eager_outputs(model_type: str) -> None:
    hf, _ = twins(model_type, "Model")
    ours = integrations.to_bertlite(hf, "sdpa").eval()  # the attention a user exports
    example = family_batch(model_type)
    batch, length = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("length", min=2, max=32)
    dims = {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}
    with torch.no_grad():
        program = torch.export.export(ours, (), kwargs=example, dynamic_shapes=dims)
        other = {key: value.repeat(3, 2)[:, :15] for key, value in family_batch(model_type).items()}
        other["attention_mask"][:, 12:] = 0
        for inputs in (example, other):
            expected = hf(**inputs).last_hidden_state
            got = program.module()(**inputs)["last_hidden_state"]
            real = inputs["attention_mask"].bool()
            torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    assert isinstance(ours, PreTrainedModel)  # bertlite's module tree was exported, not transformers'
