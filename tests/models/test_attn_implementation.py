"""`config._attn_implementation` as transformers' code reads and sets it, each case beside transformers.

Each test builds the same tiny random model with transformers and with bertlite, does the same thing to
both and compares what `model.config._attn_implementation` reads; the outputs show the attention really
run: eager bitwise equal to transformers' eager, sdpa not.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import pickle
from pathlib import Path

import pytest
import torch
import transformers

import bertlite
from bertlite.layers import onednn
from tests.helpers import TINY, random_batch

EXACT = dict(rtol=0.0, atol=0.0)


def twins(attn: str | None = None) -> tuple[transformers.BertModel, bertlite.BertModel]:
    """A random transformers BertModel and bertlite's with its weights, each built from a config whose
    _attn_implementation was set to `attn` first (None: left unset)."""
    torch.manual_seed(0)
    theirs_config, ours_config = transformers.BertConfig(**TINY), bertlite.BertConfig(**TINY)
    if attn is not None:
        theirs_config._attn_implementation = attn
        ours_config._attn_implementation = attn
    theirs, ours = transformers.BertModel(theirs_config), bertlite.BertModel(ours_config)
    assert (theirs.config is theirs_config, ours.config is ours_config) == (True, True)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0.0, 0.3)
    ours.load_state_dict(theirs.state_dict())
    return theirs.eval(), ours.eval()


def eager_reference(model: transformers.BertModel) -> torch.Tensor:
    """last_hidden_state of a copy of `model` that runs transformers' eager attention."""
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("eager")
    with torch.no_grad():
        return reference(**random_batch(model.config)).last_hidden_state


def assert_runs(ours: bertlite.BertModel, theirs: transformers.BertModel, name: str) -> None:
    """Both read `name`, and bertlite's layers run it: eager is transformers' eager bit for bit, sdpa is not."""
    assert (ours.config._attn_implementation, theirs.config._attn_implementation) == (name, name)
    reference = eager_reference(theirs)
    with torch.no_grad():
        out = ours(**random_batch(theirs.config)).last_hidden_state
    torch.testing.assert_close(out, reference)
    assert torch.equal(out, reference) == (name == "eager")


def test_a_config_reads_what_was_set_before_any_model() -> None:
    for kwargs in ({}, {"attn_implementation": "eager"}):
        theirs, ours = transformers.BertConfig(**kwargs), bertlite.BertConfig(**kwargs)
        assert ours._attn_implementation == theirs._attn_implementation == kwargs.get("attn_implementation")
    # Any name is kept until a model is built from the config, where it is checked.
    theirs, ours = transformers.BertConfig(), bertlite.BertConfig()
    theirs._attn_implementation = ours._attn_implementation = "not-an-attention"
    assert ours._attn_implementation == theirs._attn_implementation == "not-an-attention"


@pytest.mark.parametrize("attn", [None, "eager", "sdpa"])
def test_building_a_model_reads_and_sets_the_config(attn: str | None) -> None:
    theirs, ours = twins(attn)
    assert_runs(ours, theirs, attn or "sdpa")
    # The `if model.config._attn_implementation == "sdpa"` idiom takes the same branch.
    assert (ours.config._attn_implementation == "sdpa") == (theirs.config._attn_implementation == "sdpa")


def test_from_pretrained_and_from_config(tmp_path: Path) -> None:
    theirs, _ = twins()
    theirs.save_pretrained(tmp_path)
    for kwargs in ({}, {"attn_implementation": "eager"}, {"attn_implementation": "sdpa"}):
        loaded = transformers.BertModel.from_pretrained(tmp_path, **kwargs).eval()
        assert_runs(
            bertlite.BertModel.from_pretrained(tmp_path, **kwargs), loaded, kwargs.get("attn_implementation", "sdpa")
        )
        new_theirs = transformers.BertModel._from_config(transformers.BertConfig(**TINY), **kwargs)
        new_ours = bertlite.BertModel.from_config(bertlite.BertConfig(**TINY), **kwargs)
        assert new_ours.config._attn_implementation == new_theirs.config._attn_implementation


def test_set_attn_implementation_then_reading() -> None:
    theirs, ours = twins()
    for name in ("eager", "sdpa", "eager"):
        theirs.set_attn_implementation(name)
        ours.set_attn_implementation(name)
        assert_runs(ours, theirs, name)


@pytest.mark.parametrize("name", ["eager", "sdpa"])
def test_setting_it_on_a_built_models_config_switches_the_model(name: str) -> None:
    # transformers' layers read the attribute at every forward; bertlite's model switches when it is set.
    before = "sdpa" if name == "eager" else "eager"
    theirs, ours = twins(before)
    assert_runs(ours, theirs, before)
    theirs.config._attn_implementation = name
    ours.config._attn_implementation = name
    assert_runs(ours, theirs, name)


def test_a_head_reads_and_sets_it_through_its_config() -> None:
    theirs = transformers.BertForSequenceClassification(transformers.BertConfig(**TINY))
    ours = bertlite.BertForSequenceClassification(bertlite.BertConfig(**TINY))
    assert ours.config._attn_implementation == theirs.config._attn_implementation == "sdpa"
    theirs.config._attn_implementation = ours.config._attn_implementation = "eager"
    assert ours.config._attn_implementation == theirs.config._attn_implementation == "eager"
    assert ours.bert.attn_implementation == "eager"


def test_a_transformers_config_set_before_building_picks_bertlite_attention() -> None:
    theirs, _ = twins("eager")
    ours = bertlite.BertModel(theirs.config)
    ours.load_state_dict(theirs.state_dict())
    assert_runs(ours.eval(), theirs, "eager")


def test_unknown_names_are_a_value_error_naming_the_choices(tmp_path: Path) -> None:
    theirs, ours = twins()
    theirs.save_pretrained(tmp_path)
    attempts = {
        "built from the config": (
            lambda: transformers.BertModel(transformers.BertConfig(**TINY, attn_implementation="flash")),
            lambda: bertlite.BertModel(bertlite.BertConfig(**TINY, attn_implementation="flash")),
        ),
        "from_pretrained": (
            lambda: transformers.BertModel.from_pretrained(tmp_path, attn_implementation="flash"),
            lambda: bertlite.BertModel.from_pretrained(tmp_path, attn_implementation="flash"),
        ),
        "set_attn_implementation": (
            lambda: theirs.set_attn_implementation("flash"),
            lambda: ours.set_attn_implementation("flash"),
        ),
    }
    for what, (build_theirs, build_ours) in attempts.items():
        with pytest.raises(ValueError, match='"flash"'):
            build_theirs()
        with pytest.raises(ValueError) as error:
            build_ours()
        message = str(error.value)
        assert message.count("\n") == 0 and "'flash'" in message and "'eager'" in message and "'sdpa'" in message, what
    # On a built model's config transformers fails at the next forward (a KeyError); bertlite when it is set.
    with pytest.raises(ValueError, match="'flash' is not one of"):
        ours.config._attn_implementation = "flash"
    with pytest.raises(ValueError, match="'flash' is not one of"):
        ours.config.update({"hidden_dropout_prob": 0.5, "_attn_implementation": "flash"})
    assert (ours.config._attn_implementation, ours.config.hidden_dropout_prob) == ("sdpa", TINY["hidden_dropout_prob"])


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="transformers would run flash-attn")
def test_flash_attention_names_are_an_import_error(tmp_path: Path) -> None:
    # Code catches the ImportError to fall back to sdpa.
    theirs, ours = twins()
    theirs.save_pretrained(tmp_path)
    with pytest.raises(ImportError):
        transformers.BertModel.from_pretrained(tmp_path, attn_implementation="flash_attention_2")
    with pytest.raises(ImportError, match="flash_attention_2"):
        bertlite.BertModel.from_pretrained(tmp_path, attn_implementation="flash_attention_2")
    config = bertlite.BertConfig(**TINY)
    config._attn_implementation = "flash_attention_2"
    with pytest.raises(ImportError, match="flash_attention_2"):
        bertlite.BertModel(config)


def test_it_is_not_written_to_config_json(tmp_path: Path) -> None:
    theirs, ours = twins("eager")
    theirs.save_pretrained(tmp_path / "theirs")
    ours.save_pretrained(tmp_path / "ours")
    for config in (theirs.config, ours.config):
        assert not [key for key in config.to_dict() if "attn" in key]
        assert "attn" not in config.to_json_string()
    for folder in ("theirs", "ours"):
        saved = json.loads((tmp_path / folder / "config.json").read_text())
        assert not [key for key in saved if "attn" in key], folder
    # A loaded model runs the default again; from config.json both read only the public key.
    loaded = transformers.BertModel.from_pretrained(tmp_path / "theirs")
    assert bertlite.BertModel.from_pretrained(tmp_path / "ours").config._attn_implementation == "sdpa"
    assert loaded.config._attn_implementation == "sdpa"
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    for key, expected in (("_attn_implementation", None), ("attn_implementation", "eager")):
        (tmp_path / "ours" / "config.json").write_text(json.dumps({**saved, key: "eager"}))
        theirs_config = transformers.BertConfig.from_pretrained(tmp_path / "ours")
        ours_config = bertlite.BertConfig.from_pretrained(tmp_path / "ours")
        assert ours_config._attn_implementation == theirs_config._attn_implementation == expected, key
        assert key not in ours_config.to_dict()


def test_config_keywords_update_and_copies(tmp_path: Path) -> None:
    transformers.BertConfig(**TINY).save_pretrained(tmp_path)
    theirs = transformers.BertConfig.from_pretrained(tmp_path, attn_implementation="eager")
    ours = bertlite.BertConfig.from_pretrained(tmp_path, attn_implementation="eager")
    assert ours._attn_implementation == theirs._attn_implementation == "eager"
    theirs, ours = transformers.BertConfig(), bertlite.BertConfig()
    theirs.update({"_attn_implementation": "eager"})
    ours.update({"_attn_implementation": "eager"})
    assert ours._attn_implementation == theirs._attn_implementation == "eager"
    assert "_attn_implementation" not in ours.to_dict()
    for clone in (copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c))):
        assert clone(ours)._attn_implementation == clone(theirs)._attn_implementation == "eager"


def test_a_copied_model_switches_alone() -> None:
    for model in twins("sdpa"):
        clone = copy.deepcopy(model)
        clone.config._attn_implementation = "eager"
        assert (clone.config._attn_implementation, model.config._attn_implementation) == ("eager", "sdpa")
    _, ours = twins("sdpa")
    clone = pickle.loads(pickle.dumps(ours))
    clone.config._attn_implementation = "eager"
    assert (clone.attn_implementation, ours.attn_implementation) == ("eager", "sdpa")


def test_models_sharing_a_config_keep_their_own_attention() -> None:
    # bertlite's constructor keyword chooses per model (in transformers both would run the last name set);
    # the config reads the last model built from it.
    config = bertlite.BertConfig(**TINY)
    eager = bertlite.BertModel(config, attn_implementation="eager")
    sdpa = bertlite.BertModel(config, attn_implementation="sdpa")
    assert (eager.attn_implementation, sdpa.attn_implementation, config._attn_implementation) == (
        "eager",
        "sdpa",
        "sdpa",
    )
    eager.set_attn_implementation("eager")  # the config reads the model switched last
    assert (eager.attn_implementation, sdpa.attn_implementation, config._attn_implementation) == (
        "eager",
        "sdpa",
        "eager",
    )


def test_bertlite_only_names_read_as_themselves() -> None:
    # transformers reads a name registered with its AttentionInterface as that name; bertlite's own names
    # (packed-batch variants, "auto") read so too.
    name = "bertlite_test_attention"
    transformers.AttentionInterface.register(name, transformers.AttentionInterface._global_mapping["sdpa"])
    try:
        theirs, ours = twins()
        theirs.set_attn_implementation(name)
        ours.set_attn_implementation("per_sequence")
        assert (theirs.config._attn_implementation, ours.config._attn_implementation) == (name, "per_sequence")
    finally:
        del transformers.AttentionInterface._global_mapping[name]
    ours.set_attn_implementation("sdpa")
    onednn.optimize(ours)  # installs "auto"
    assert ours.config._attn_implementation == ours.attn_implementation == "auto"
    ours.config._attn_implementation = "eager"  # undoes optimize, as set_attn_implementation("eager") does
    assert not onednn.is_optimized(ours)
