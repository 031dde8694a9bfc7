import dataclasses
import json
import subprocess
import sys

import pytest
import transformers

from bertlite import BertConfig
from bertlite.config import SUPPORTED_ACTIVATIONS
from bertlite.layers.activations import ACT2FN
from tests.helpers import TINY


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
        (dict(model_type="vit"), "model_type='vit' is not a BERT config"),
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
    path.write_text('{"model_type": "vit"}')
    with pytest.raises(ValueError, match=r"config.json: model_type='vit' is not a BERT config"):
        BertConfig.from_json_file(path)


def test_activation_lists_agree():
    assert set(SUPPORTED_ACTIVATIONS) == set(ACT2FN)


@pytest.mark.slow
def test_config_import_needs_no_torch_and_package_no_transformers():
    code = (
        "import sys, bertlite.config; assert 'torch' not in sys.modules, 'torch';"
        "import bertlite, bertlite.checkpoint.load; bertlite.BertModel;"
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


# Each value is refused by transformers' strict BertConfig too (asserted below, in the same run).
WRONG_JSON_TYPES = [
    ("is_decoder", "false"),  # a non-empty string is truthy: the model would silently become causal
    ("add_cross_attention", "false"),
    ("use_cache", 1),
    ("tie_word_embeddings", 0),
    ("vocab_size", True),
    ("num_hidden_layers", 2.0),
    ("hidden_dropout_prob", True),
    ("initializer_range", "0.02"),
    ("classifier_dropout", "0.1"),
    ("bos_token_id", True),
    ("eos_token_id", "2"),
    ("eos_token_id", [1, "2"]),
]


@pytest.mark.parametrize("field, value", WRONG_JSON_TYPES)
def test_field_of_the_wrong_json_type_is_refused_naming_field_and_file(tmp_path, field, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({field: value}))
    with pytest.raises(Exception, match=field):
        transformers.BertConfig.from_json_file(path)
    with pytest.raises(ValueError) as e:
        BertConfig.from_json_file(path)
    message = str(e.value)
    assert message.startswith(f"{path}: {field} must be ") and message.endswith(f"got {value!r}"), message


def test_booleans_and_numbers_that_are_right_still_load(tmp_path):
    path = tmp_path / "config.json"
    fields = dict(is_decoder=True, use_cache=False, hidden_dropout_prob=0, classifier_dropout=None, eos_token_id=[1, 2])
    path.write_text(json.dumps(fields))
    config = BertConfig.from_json_file(path)
    assert (config.is_decoder, config.use_cache, config.hidden_dropout_prob, config.eos_token_id) == (
        True,
        False,
        0,
        [1, 2],
    )


@pytest.mark.parametrize(
    "field, literal",
    [
        ("layer_norm_eps", "NaN"),
        ("layer_norm_eps", "Infinity"),
        ("initializer_range", "NaN"),
        ("initializer_range", "-Infinity"),
        ("hidden_dropout_prob", "NaN"),
        ("classifier_dropout", "Infinity"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path, field, literal):
    # Python's json reads these non-standard literals as floats; NaN compares false with every bound.
    path = tmp_path / "config.json"
    path.write_text(f'{{"{field}": {literal}}}')
    with pytest.raises(ValueError) as e:
        BertConfig.from_json_file(path)
    assert str(e.value).startswith(f"{path}: {field} must be a finite number, got "), str(e.value)


@pytest.mark.parametrize(
    "write, message",
    [
        pytest.param(
            lambda p: p.write_text('{"hidden_size": 32}', encoding="utf-16"),
            "not UTF-8 text (invalid start byte at byte 0); save it as UTF-8",
            id="utf-16",
        ),
        pytest.param(
            lambda p: p.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            "its JSON is nested too deeply to read",
            id="nested-100000-deep",
        ),
    ],
)
def test_config_json_that_cannot_be_read_names_the_file(tmp_path, write, message):
    path = tmp_path / "config.json"
    write(path)
    with pytest.raises(ValueError) as e:
        BertConfig.from_json_file(path)
    assert str(e.value) == f"{path}: {message}"


def test_config_methods_users_call_match_transformers(tmp_path, real_model_path):
    ours, theirs = BertConfig(**TINY), transformers.BertConfig(**TINY)
    for config in (ours, theirs):
        config.update({"hidden_dropout_prob": 0.2, "num_hidden_layers": 3, "my_key": "x"})
        config.custom_field = [1, 2]  # a new attribute is a config key, as in transformers
    for name in ("hidden_dropout_prob", "num_hidden_layers", "my_key", "custom_field"):
        assert getattr(ours, name) == getattr(theirs, name), name
        assert ours.to_dict()[name] == theirs.to_dict()[name], name
    # transformers diffs against its base config's defaults, bertlite against BertConfig's: ours is a subset,
    # and either reads back the same config.
    diff = ours.to_diff_dict()
    assert diff["hidden_dropout_prob"] == 0.2 and "layer_norm_eps" not in diff
    assert diff.items() <= theirs.to_diff_dict().items()
    assert transformers.BertConfig.from_dict(diff).to_dict() == theirs.to_dict()
    ours.save_pretrained(tmp_path / "ours")
    theirs.save_pretrained(tmp_path / "theirs")
    assert transformers.BertConfig.from_pretrained(tmp_path / "ours").custom_field == [1, 2]
    reloaded = BertConfig.from_pretrained(tmp_path / "theirs")
    assert (reloaded.custom_field, reloaded.num_hidden_layers, reloaded.hidden_dropout_prob) == ([1, 2], 3, 0.2)
    assert BertConfig.from_pretrained(real_model_path).architectures == ["BertModel"]  # config.json keys read
    with pytest.raises(ValueError, match="hidden_dropout_prob must be in"):
        ours.update({"hidden_dropout_prob": 2.0, "num_hidden_layers": 5})
    assert (ours.hidden_dropout_prob, ours.num_hidden_layers) == (0.2, 3)  # nothing changed
    assert BertConfig.from_dict(diff, num_labels=4).num_labels == 4
    with pytest.raises(AttributeError, match="'BertConfig' object has no attribute 'colour'"):
        ours.colour  # noqa: B018


def test_models_take_transformers_config_objects(tmp_path):
    # bertlite.BertModel(transformers.BertConfig(...)) and the other ways a transformers config reaches a model.
    import torch

    import bertlite

    hf_config = transformers.BertConfig(**TINY, num_labels=3, id2label={0: "a", 1: "b", 2: "c"})
    torch.manual_seed(0)
    theirs = transformers.BertForSequenceClassification(hf_config).eval()
    theirs.save_pretrained(tmp_path)
    ids = torch.tensor([[2, 5, 7, 9, 3], [2, 11, 3, 0, 0]])
    mask = (ids != 0).long()
    expected = theirs(input_ids=ids, attention_mask=mask).logits
    auto_config = transformers.AutoConfig.from_pretrained(tmp_path)
    builds = {
        "constructor": lambda: bertlite.BertForSequenceClassification(hf_config),
        "from_config": lambda: bertlite.BertForSequenceClassification.from_config(hf_config),
        "AutoModel.from_config": lambda: bertlite.AutoModelForSequenceClassification.from_config(auto_config),
        "AutoModel.from_pretrained": lambda: bertlite.AutoModelForSequenceClassification.from_pretrained(
            tmp_path, config=auto_config
        ),
    }
    for how, build in builds.items():
        ours = build().eval()
        ours.load_state_dict(theirs.state_dict())
        assert isinstance(ours.config, BertConfig) and ours.bert.config is ours.config, how
        assert ours.config.id2label == {0: "a", 1: "b", 2: "c"} and ours.config.num_labels == 3, how
        torch.testing.assert_close(ours(input_ids=ids, attention_mask=mask).logits, expected, msg=how)
    with pytest.raises(TypeError, match="config must be a bertlite.BertConfig or a transformers BertConfig, got dict"):
        bertlite.BertModel({"hidden_size": 32})
    with pytest.raises(ValueError, match="model_type='gpt2' is a decoder; bertlite serves encoders"):
        bertlite.BertModel(transformers.GPT2Config())
