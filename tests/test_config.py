import dataclasses
import json
import subprocess
import sys

import pytest
import transformers

from bertlite import BertConfig
from bertlite.config import SUPPORTED_ACTIVATIONS
from bertlite.modeling import ACT2FN


def test_defaults_match_transformers():
    ours, theirs = BertConfig(), transformers.BertConfig()
    names = [f.name for f in dataclasses.fields(BertConfig) if f.name not in ("extra", "position_embedding_type")]
    for name in names:
        assert getattr(ours, name) == getattr(theirs, name), name
    # transformers v5 no longer has the field; v4's default was "absolute".
    assert ours.position_embedding_type == "absolute"


def test_every_transformers_field_is_a_field():
    ours = {f.name for f in dataclasses.fields(BertConfig)}
    theirs = set(transformers.BertConfig.__annotations__)
    assert theirs <= ours, sorted(theirs - ours)


def test_round_trip_from_transformers_config(tmp_path):
    hf = transformers.BertConfig(hidden_size=48, num_attention_heads=6, hidden_act="gelu_new", layer_norm_eps=1e-7)
    d = hf.to_dict()
    cfg = BertConfig.from_dict(d)
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.hidden_act, cfg.layer_norm_eps) == (48, 6, "gelu_new", 1e-7)
    out = cfg.to_dict()
    assert {k: out[k] for k in d} == d  # unknown keys (id2label, transformers_version, ...) are written back
    cfg.to_json_file(tmp_path / "config.json")
    again = BertConfig.from_json_file(tmp_path / "config.json")
    assert again.to_dict() == out  # id2label: int keys in memory (as transformers), str keys in the file
    assert json.loads((tmp_path / "config.json").read_text())["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"}
    # and transformers reads what we wrote
    assert transformers.BertConfig.from_json_file(tmp_path / "config.json").hidden_act == "gelu_new"


def test_from_pretrained_folder(real_model_path):
    cfg = BertConfig.from_pretrained(real_model_path)
    assert (cfg.hidden_size, cfg.num_hidden_layers) == (384, 6)
    assert cfg.extra["architectures"] == ["BertModel"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(hidden_size=30, num_attention_heads=4), "hidden_size=30 is not divisible by num_attention_heads=4"),
        (dict(hidden_act="gelu_magic"), "hidden_act='gelu_magic' is not implemented"),
        (dict(position_embedding_type="rotary"), "position_embedding_type='rotary' is not implemented"),
        (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer, got 0"),
        (dict(vocab_size=-5), "vocab_size must be a positive integer, got -5"),
        (dict(model_type="gpt2"), "model_type='gpt2' is not a BERT config"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be in [0, 1], got 1.5"),
        (dict(pad_token_id=200, vocab_size=100), "pad_token_id=200 is outside the vocabulary"),
    ],
)
def test_bad_values_name_field_and_value(kwargs, message):
    with pytest.raises(ValueError) as e:
        BertConfig(**kwargs)
    assert message in str(e.value)


def test_bad_json_names_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        BertConfig.from_json_file(path)
    path.write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match=r"config.json: model_type='gpt2' is not a BERT config"):
        BertConfig.from_json_file(path)


def test_activation_lists_agree():
    assert set(SUPPORTED_ACTIVATIONS) == set(ACT2FN)


def test_config_import_needs_no_torch_and_package_no_transformers():
    code = (
        "import sys, bertlite.config; assert 'torch' not in sys.modules, 'torch';"
        "import bertlite, bertlite.loading; bertlite.BertModel;"
        "assert 'torch' in sys.modules and 'transformers' not in sys.modules, 'transformers'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(num_labels=4), dict(id2label={0: "neg", 1: "pos"}), dict(num_labels=1, problem_type="regression")],
)
def test_labels_match_transformers(tmp_path, kwargs):
    ours, theirs = BertConfig(**kwargs), transformers.BertConfig(**kwargs)
    assert (ours.num_labels, ours.id2label, ours.label2id, ours.problem_type) == (
        theirs.num_labels,
        theirs.id2label,
        theirs.label2id,
        theirs.problem_type,
    )
    ours.to_json_file(tmp_path / "config.json")
    back = transformers.BertConfig.from_json_file(tmp_path / "config.json")
    assert (back.num_labels, back.id2label, back.problem_type) == (ours.num_labels, ours.id2label, ours.problem_type)
    ours.num_labels = 3  # the setter renames the labels, as transformers' does
    theirs.num_labels = 3
    assert (ours.id2label, ours.label2id) == (theirs.id2label, theirs.label2id)
