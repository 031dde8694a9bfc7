"""load_checkpoint's parts: the pure plan (compared with what transformers reports for the same files), and
warnings that name the line of the user's call, however deep bertlite raises them."""

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
import transformers

import bertlite
from bertlite.checkpoint.load import empty_init, expected_shapes, load_checkpoint, plan_load
from bertlite.checkpoint.load import resolve_weight_files as weight_files
from bertlite.errors import CheckpointError
from tests.helpers import TINY, make_hf_model, write_folder


def crafted(state_dict: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """A checkpoint that goes wrong in every way a load tolerates: a legacy LayerNorm.gamma/beta name, a
    missing tensor, one the model has no place for, and one of the wrong shape."""
    out = {}
    for key, value in state_dict.items():
        if key.startswith(prefix + "encoder.layer.0.") and "LayerNorm" in key:
            key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[key] = value.clone()
    del out[prefix + "encoder.layer.1.output.dense.bias"]
    out[prefix + "encoder.layer.0.extra.weight"] = torch.zeros(3)
    out[prefix + "pooler.dense.weight"] = torch.zeros(5, TINY["hidden_size"])
    return out


def pretraining_state_dict() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**TINY))
    # The decoder is tied to the word embeddings (and its bias to cls.predictions.bias): saved once, as
    # transformers' own save_pretrained does.
    tied = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    return {key: value for key, value in model.state_dict().items() if key not in tied}


def as_sets(info: dict) -> dict[str, set[str]]:
    """transformers' loading info with key names only (it lists a mismatch as (key, shape, shape))."""
    return {
        "missing_keys": set(info["missing_keys"]),
        "unexpected_keys": set(info["unexpected_keys"]),
        "mismatched_keys": {item if isinstance(item, str) else item[0] for item in info["mismatched_keys"]},
    }


def transformers_info(cls_name: str, folder: Path) -> dict[str, set[str]]:
    _, info = getattr(transformers, cls_name).from_pretrained(
        folder, output_loading_info=True, ignore_mismatched_sizes=True
    )
    return as_sets(info)


def meta_model(cls_name: str, folder: Path) -> torch.nn.Module:
    with empty_init():
        return getattr(bertlite, cls_name)(bertlite.BertConfig.from_pretrained(folder))


# BertModel from a base model's checkpoint, and a classifier from a pre-training checkpoint (whose cls.*
# heads it does not use, and whose classifier it lacks). bertlite's BertModel drops a head checkpoint's
# cls.* keys without listing them, and names keys as the model does: only these two cases are comparable.
CASES = {
    "BertModel": lambda: crafted(make_hf_model().state_dict()),
    "BertForSequenceClassification": lambda: crafted(pretraining_state_dict(), prefix="bert."),
}


@pytest.mark.parametrize("cls_name", CASES)
def test_plan_reports_what_transformers_reports(tmp_path, cls_name):
    folder = write_folder(tmp_path, transformers.BertConfig(**TINY).to_dict(), CASES[cls_name]())
    theirs = transformers_info(cls_name, folder)
    assert all(theirs.values())  # every kind of problem is there to compare
    model = meta_model(cls_name, folder)
    plan = plan_load(weight_files(folder), expected_shapes(model), ignore_mismatched_sizes=True)
    assert as_sets(plan.report.loading_info()) == theirs
    # Without ignore_mismatched_sizes the same tensor is a mismatch, an error (transformers raises too).
    strict = plan_load(weight_files(folder), expected_shapes(model)).report
    assert {item.split(":")[0] for item in strict.mismatched} == theirs["mismatched_keys"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ours = getattr(bertlite, cls_name).from_pretrained(
            folder, strict=False, ignore_mismatched_sizes=True, output_loading_info=True
        )
    assert as_sets(ours) == theirs


def test_plan_is_pure(tmp_path):
    """Planning twice gives the same plan and changes nothing: not the model (real or on meta), not the
    warnings, even for a checkpoint that warns on load (an untied decoder, missing keys)."""
    state_dict = pretraining_state_dict()
    state_dict["cls.predictions.decoder.weight"] = torch.randn_like(
        state_dict["bert.embeddings.word_embeddings.weight"]
    )
    del state_dict["bert.encoder.layer.1.output.dense.bias"]
    folder = write_folder(tmp_path, transformers.BertConfig(**TINY).to_dict(), state_dict)
    model = bertlite.BertForMaskedLM(bertlite.BertConfig.from_pretrained(folder))
    before = {key: value.clone() for key, value in model.state_dict().items()}
    params = dict(model.named_parameters())
    meta = meta_model("BertForMaskedLM", folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plans = [
            plan_load(weight_files(folder), expected_shapes(m), tied_pairs=m.tied_weights_keys())
            for m in (model, model, meta)
        ]
    assert caught == []
    assert plans[0].report == plans[1].report == plans[2].report
    assert plans[0].report.untied == [("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight")]
    assert plans[0].report.missing == ["bert.encoder.layer.1.output.dense.bias"]
    assert plans[0].tensors.keys() == plans[1].tensors.keys()
    assert all(torch.equal(plans[0].tensors[key], plans[1].tensors[key]) for key in plans[0].tensors)
    assert dict(model.named_parameters()) == params  # the same Parameter objects
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())
    assert all(p.is_meta for p in meta.parameters())


def test_failed_load_leaves_the_model_as_it_was(tmp_path):
    folder = write_folder(tmp_path, transformers.BertConfig(**TINY).to_dict(), crafted(make_hf_model().state_dict()))
    model = bertlite.BertModel(bertlite.BertConfig.from_pretrained(folder))
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"pooler.dense.weight: checkpoint \(5, 32\)"):
        load_checkpoint(model, weight_files(folder))
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())


# --- warnings name the user's line ---------------------------------------------------------


def config_folder(tmp_path: Path, **changes) -> Path:
    hf = make_hf_model()
    folder = write_folder(tmp_path / "ckpt", hf.config.to_dict(), hf.state_dict())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


def without(folder: Path, key: str) -> Path:
    hf = make_hf_model()
    state_dict = {k: v for k, v in hf.state_dict().items() if k != key}
    return write_folder(folder.parent / "edited", hf.config.to_dict(), state_dict)


# A config.json with num_labels and an id2label of another length: transformers warns and keeps id2label.
LABELS = dict(num_labels=3, id2label={"0": "no", "1": "yes"})
CALLS = {
    "BertModel strict=False": lambda folder: bertlite.BertModel.from_pretrained(
        without(folder, "pooler.dense.bias"), strict=False
    ),
    "AutoModel strict=False": lambda folder: bertlite.AutoModel.from_pretrained(
        without(folder, "pooler.dense.bias"), strict=False
    ),
    "new head": lambda folder: bertlite.BertForSequenceClassification.from_pretrained(folder),
    "config.from_dict": lambda folder: bertlite.BertConfig.from_dict(LABELS),
    "config.from_pretrained": lambda folder: bertlite.BertConfig.from_pretrained(folder),
    "BertModel with that config": lambda folder: bertlite.BertModel.from_pretrained(folder),
    "AutoConfig": lambda folder: bertlite.AutoConfig.from_pretrained(folder),
}


@pytest.mark.parametrize("call", CALLS)
def test_warning_points_at_the_callers_file(tmp_path, call):
    folder = config_folder(tmp_path, **LABELS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CALLS[call](folder)
    ours = [w for w in caught if w.category is UserWarning]
    assert ours, [str(w.message) for w in caught]
    assert [w.filename for w in ours] == [__file__] * len(ours), [(w.filename, str(w.message)) for w in ours]


def test_warning_points_at_the_callers_line(tmp_path):
    folder = config_folder(tmp_path, **LABELS)
    with pytest.warns(UserWarning, match="disagrees with id2label") as caught:
        line = sys._getframe().f_lineno + 1
        bertlite.BertModel.from_pretrained(folder)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
