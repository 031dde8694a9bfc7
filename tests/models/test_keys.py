"""state_dict keys match transformers', the legacy-key remap is a pure function, and the fused Linears' split has
an inverse."""

import pytest
import torch

import bertlite
from bertlite.checkpoint.load import remap_state_dict
from bertlite.checkpoint.plan import split_fused
from bertlite.checkpoint.remap import fused_key, split_key
from bertlite.checkpoint.save import fuse_linears
from tests.helpers import make_hf_model


@pytest.mark.parametrize(
    "overrides",
    [{}, {"num_hidden_layers": 3, "type_vocab_size": 4}, {"num_hidden_layers": 1, "intermediate_size": 8}],
)
@pytest.mark.parametrize("add_pooling_layer", [True, False])
def test_state_dict_keys_and_shapes_equal_transformers(overrides, add_pooling_layer):
    hf = make_hf_model(add_pooling_layer=add_pooling_layer, **overrides)
    ours = bertlite.BertModel(bertlite.BertConfig.from_dict(hf.config.to_dict()), add_pooling_layer=add_pooling_layer)
    theirs = hf.state_dict()
    assert list(ours.state_dict()) == list(theirs)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.items()}
    ours.load_state_dict(theirs, strict=True)


def test_remap_legacy_keys_for_base_model():
    legacy = {
        "bert.embeddings.LayerNorm.gamma": 1,
        "bert.embeddings.LayerNorm.beta": 2,
        "bert.embeddings.position_ids": 3,
        "bert.encoder.layer.0.output.LayerNorm.gamma": 4,
        "bert.pooler.dense.weight": 5,
        "cls.predictions.bias": 6,
        "cls.predictions.transform.LayerNorm.gamma": 7,
        "classifier.weight": 8,
        "something.else": 9,
    }
    assert remap_state_dict(legacy) == {
        "embeddings.LayerNorm.weight": 1,
        "embeddings.LayerNorm.bias": 2,
        "encoder.layer.0.output.LayerNorm.weight": 4,
        "pooler.dense.weight": 5,
        "something.else": 9,  # not a known head: left for the strict check to report
    }


def test_remap_for_head_model_adds_prefix_and_keeps_heads():
    plain = {"embeddings.word_embeddings.weight": 1, "cls.predictions.transform.LayerNorm.beta": 2}
    assert remap_state_dict(plain, with_prefix=True) == {
        "bert.embeddings.word_embeddings.weight": 1,
        "cls.predictions.transform.LayerNorm.bias": 2,
    }


def test_remap_is_identity_on_canonical_keys():
    sd = make_hf_model().state_dict()
    assert remap_state_dict(sd) == sd


def test_fused_linears_split_on_load_and_fuse_on_save():
    assert split_key("gte.encoder.layer.0.attention.qkv_proj.bias", "gte") == tuple(
        f"gte.encoder.layer.0.attention.{x}_proj.bias" for x in "qkv"
    )
    assert split_key("encoder.layers.1.attn.Wqkv.weight", "nomic_bert")[2] == "encoder.layers.1.attn.v_proj.weight"
    assert split_key("encoder.layers.1.mixer.Wqkv.weight", "roberta") is None  # jina-v3 keeps its Wqkv
    assert split_key("qkv_proj.weight", "bert") is None
    assert fused_key("encoder.layer.0.mlp.gate_proj.weight", "gte") == (
        "encoder.layer.0.mlp.up_gate_proj.weight",
        ("encoder.layer.0.mlp.up_proj.weight", "encoder.layer.0.mlp.gate_proj.weight"),
    )
    assert fused_key("encoder.layer.0.attention.o_proj.weight", "gte") is None
    fused = {
        "encoder.layer.0.attention.qkv_proj.weight": torch.randn(6, 2),
        "encoder.layer.0.attn_ln.bias": torch.ones(2),
    }
    parts = {k: t for key, value in fused.items() for k, t in split_fused(key, value, "gte")}
    assert list(parts) == [f"encoder.layer.0.attention.{x}_proj.weight" for x in "qkv"] + [
        "encoder.layer.0.attn_ln.bias"
    ]
    assert torch.equal(
        parts["encoder.layer.0.attention.k_proj.weight"], fused["encoder.layer.0.attention.qkv_proj.weight"][2:4]
    )
    back = fuse_linears(parts, "gte")
    assert list(back) == list(fused) and all(torch.equal(back[k], fused[k]) for k in fused)
    del parts["encoder.layer.0.attention.v_proj.weight"]  # a part without the others stays as it is
    assert list(fuse_linears(parts, "gte")) == list(parts)


def test_fresh_model_is_initialised_like_transformers():
    cfg = bertlite.BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2)
    torch.manual_seed(0)
    model = bertlite.BertModel(cfg)
    w = model.encoder.layer[0].intermediate.dense.weight
    assert abs(w.mean().item()) < 0.002 and abs(w.std().item() - cfg.initializer_range) < 0.002
    assert torch.count_nonzero(model.encoder.layer[0].intermediate.dense.bias) == 0
    assert torch.equal(model.embeddings.LayerNorm.weight, torch.ones(64))
    assert torch.count_nonzero(model.embeddings.word_embeddings.weight[cfg.pad_token_id]) == 0
