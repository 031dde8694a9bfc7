"""save_pretrained: what transformers reads back, sharding, tied tensors, fused QKV, and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open

import bertlite
import bertlite.checkpoint.save
from bertlite.checkpoint.save import parse_size
from tests.helpers import (
    HEADS,
    assert_same,
    assert_tied,
    head_inputs,
    make_hf_head,
    make_hf_model,
    random_batch,
    to_bertlite,
    to_ours,
)


def stored_keys(folder: Path) -> dict[str, str]:
    """key -> file name over every safetensors file in the folder."""
    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            out.update(dict.fromkeys(f.keys(), path.name))
    return out


@pytest.mark.parametrize("name", HEADS)
def test_round_trip_with_transformers(tmp_path, name):
    hf = make_hf_head(name)
    inputs = head_inputs(name, hf.config)
    with torch.no_grad():
        expected = hf(**inputs)
    # transformers -> bertlite
    hf.save_pretrained(tmp_path / "theirs")
    ours = getattr(bertlite, name).from_pretrained(tmp_path / "theirs", attn_implementation="eager")
    with torch.no_grad():
        assert_same(ours(**inputs), expected)
    # bertlite -> transformers: no missing or unexpected keys, same outputs
    ours.save_pretrained(tmp_path / "ours")
    again, info = getattr(transformers, name).from_pretrained(
        tmp_path / "ours", output_loading_info=True, attn_implementation="eager"
    )
    assert not any(info.values()), info
    with torch.no_grad():
        assert_same(again.eval()(**inputs), expected)
    # the same keys as transformers' own save, so tied tensors are stored once, under the embedding's name
    assert stored_keys(tmp_path / "ours").keys() == stored_keys(tmp_path / "theirs").keys()
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "bert" and config["dtype"] == "float32"


def test_bert_model_keys_have_no_prefix_and_transformers_loads_them(tmp_path):
    hf = make_hf_model()
    to_bertlite(hf).save_pretrained(tmp_path)
    keys = stored_keys(tmp_path)
    assert keys.keys() == hf.state_dict().keys()
    assert not any(k.startswith("bert.") or k.endswith(("gamma", "beta")) for k in keys)
    again, info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]
    inputs = random_batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(**inputs).last_hidden_state, hf(**inputs).last_hidden_state)


def test_legacy_gamma_beta_checkpoint_saves_canonical_keys(tmp_path):
    hf = make_hf_model()
    legacy = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
              for k, v in hf.state_dict().items()}  # fmt: skip
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    torch.save(legacy, folder / "pytorch_model.bin")
    with pytest.warns(UserWarning, match="newly initialised"):  # a base checkpoint: the MLM head is new
        bertlite.BertForMaskedLM.from_pretrained(folder).save_pretrained(tmp_path / "out")
    keys = stored_keys(tmp_path / "out")
    assert "bert.embeddings.LayerNorm.weight" in keys and not any(k.endswith(("gamma", "beta")) for k in keys)


def test_sharded_save_both_ways(tmp_path):
    hf = make_hf_head("BertForPreTraining")
    ours = to_ours(hf)
    ours.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (tmp_path / "model.safetensors").exists()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    hf.save_pretrained(tmp_path / "hf", max_shard_size="20KB")  # the same tensors in the same shards
    assert index == json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    keys = stored_keys(tmp_path)
    assert index["weight_map"] == keys
    state = {k: v for k, v in hf.state_dict().items() if k in keys}
    assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in state.values())
    for path in tmp_path.glob("model-*.safetensors"):  # no shard over the limit unless one tensor is
        with safe_open(path, "pt") as f:
            sizes = [f.get_tensor(k).numel() * 4 for k in f.keys()]
        assert sum(sizes) <= 20_000 or len(sizes) == 1
    inputs = head_inputs("BertForPreTraining", hf.config)
    with torch.no_grad():
        expected = hf(**inputs)
        again, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
        assert not any(info.values()), info
        assert_same(again.eval()(**inputs), expected)
        reloaded = bertlite.BertForPreTraining.from_pretrained(tmp_path, attn_implementation="eager")
        assert_same(reloaded(**inputs), expected)
    assert_tied(reloaded)


def test_tie_survives_save_and_reload(tmp_path):
    ours = to_ours(make_hf_head("BertForMaskedLM"))
    ours.save_pretrained(tmp_path)
    assert_tied(ours)  # saving does not untie the model
    assert "cls.predictions.decoder.weight" not in stored_keys(tmp_path)
    reloaded = bertlite.BertForMaskedLM.from_pretrained(tmp_path)
    assert_tied(reloaded)
    torch.testing.assert_close(reloaded.cls.predictions.decoder.weight, ours.bert.embeddings.word_embeddings.weight)


def test_untied_save_keeps_the_decoder(tmp_path):
    hf = make_hf_head("BertForMaskedLM", tie_word_embeddings=False)
    to_ours(hf).save_pretrained(tmp_path)
    assert stored_keys(tmp_path).keys() == hf.state_dict().keys()
    reloaded = bertlite.BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    inputs = head_inputs("BertForMaskedLM", hf.config)
    with torch.no_grad():
        assert_same(reloaded(**inputs), hf(**inputs))


def test_dtype_is_written_and_auto_reads_it(tmp_path):
    ours = to_bertlite(make_hf_model()).to(torch.bfloat16)
    ours.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    reloaded = bertlite.BertModel.from_pretrained(tmp_path, dtype="auto")
    assert reloaded.pooler.dense.weight.dtype == torch.bfloat16
    assert torch.equal(reloaded.pooler.dense.weight, ours.pooler.dense.weight)


@pytest.mark.parametrize(
    "size, expected",
    [(1000, 1000), ("5GB", 5 * 10**9), ("200KB", 200_000), ("1GiB", 2**30), ("3MiB", 3 * 2**20), ("8Mb", 10**6)],
)
def test_parse_size(size, expected):
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", ["5 gigabytes", "", "-1KB", 0, 1.5])
def test_bad_sizes_are_named(size):
    with pytest.raises((ValueError, TypeError), match="max_shard_size"):
        parse_size(size)


def folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_failed_save_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    ours = to_bertlite(make_hf_model())
    ours.save_pretrained(tmp_path)
    before = folder_state(tmp_path)
    real_save_file = bertlite.checkpoint.save.save_file
    calls = []

    def fail_on_second_shard(tensors, path, metadata=None):
        calls.append(path)
        real_save_file(tensors, path, metadata=metadata)  # a complete first shard...
        if len(calls) == 2:
            raise OSError("disk full")  # ...then a failure

    monkeypatch.setattr(bertlite.checkpoint.save, "save_file", fail_on_second_shard)
    with pytest.raises(OSError, match="disk full"):
        ours.save_pretrained(tmp_path, max_shard_size="20KB")
    assert len(calls) == 2
    assert folder_state(tmp_path) == before  # no shard, no temporary file, old checkpoint intact


def test_resave_replaces_stale_weight_files(tmp_path):
    ours = to_bertlite(make_hf_model())
    ours.save_pretrained(tmp_path, max_shard_size="20KB")
    (tmp_path / "README.md").write_text("mine")
    ours.save_pretrained(tmp_path)  # unsharded now: the old shards and index must go
    assert sorted(os.listdir(tmp_path)) == ["README.md", "config.json", "model.safetensors"]
    ours.save_pretrained(tmp_path, max_shard_size="20KB")  # and back: the single file must go
    assert "model.safetensors" not in os.listdir(tmp_path)
    assert bertlite.BertModel.from_pretrained(tmp_path) is not None


def test_save_into_a_file_path_is_an_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        to_bertlite(make_hf_model()).save_pretrained(tmp_path / "file")


def test_saved_files_get_the_umask_mode_not_the_temp_files(tmp_path):
    # mkstemp makes 0600 files; a saved model must be readable as transformers' is (0644 under umask 022).
    model = to_bertlite(make_hf_model())
    old_umask = os.umask(0o022)
    try:
        model.save_pretrained(tmp_path / "model")
        model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    finally:
        os.umask(old_umask)
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777) for p in tmp_path.glob("*/*")}
    assert len(modes) > 3 and set(modes.values()) == {"0o644"}, modes
    os.chmod(tmp_path / "model" / "config.json", 0o600)  # a replaced file keeps its mode, as the embed outputs do
    model.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "config.json").stat().st_mode & 0o777 == 0o600
