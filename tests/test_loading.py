"""from_pretrained on folders: formats, legacy keys, dtype, and errors that name the problem."""

import copy
import json
import os
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file
from torch.overrides import TorchFunctionMode

import bertlite
from bertlite.hub import CheckpointNotFoundError
from bertlite.loading import CheckpointError
from tests.conftest import TINY, make_hf_model, random_batch

TOL = dict(atol=1e-5, rtol=1e-5)


def write_folder(folder: Path, config: dict, state_dict: dict, fmt: str = "safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    if fmt == "safetensors":
        save_file(state_dict, folder / "model.safetensors")
    else:
        torch.save(state_dict, folder / "pytorch_model.bin")
    return folder


def assert_same_outputs(ours, hf) -> None:
    inputs = random_batch(hf.config)
    with torch.no_grad():
        a, b = ours(**inputs), hf(**inputs)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, **TOL)
    if b.pooler_output is not None:
        torch.testing.assert_close(a.pooler_output, b.pooler_output, **TOL)


@pytest.fixture
def hf():
    return make_hf_model()


@pytest.fixture
def folder(tmp_path, hf):
    return write_folder(tmp_path / "ckpt", hf.config.to_dict(), hf.state_dict())


def test_safetensors_folder(folder, hf):
    model = bertlite.BertModel.from_pretrained(folder)
    assert not model.training
    assert all(not p.is_meta and p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    assert_same_outputs(model, hf)


def test_legacy_bin_with_prefix_gamma_beta_heads_and_buffers(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY)
    pretraining = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():
        for p in pretraining.parameters():
            p.normal_(0.0, 0.3)
    legacy = {}
    for key, value in pretraining.state_dict().items():
        if "LayerNorm" in key:
            key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy[key] = value
    legacy["bert.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    assert any(k.startswith("cls.") for k in legacy) and any(k.endswith("gamma") for k in legacy)
    folder = write_folder(tmp_path / "legacy", config.to_dict(), legacy, fmt="bin")
    model = bertlite.BertModel.from_pretrained(folder)
    assert_same_outputs(model, pretraining.bert)


def test_sharded_safetensors_from_transformers_save_pretrained(tmp_path, hf):
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    files = os.listdir(tmp_path / "sharded")
    assert "model.safetensors.index.json" in files and sum(f.endswith(".safetensors") for f in files) > 2
    assert_same_outputs(bertlite.BertModel.from_pretrained(tmp_path / "sharded"), hf)


def test_sharded_bin(tmp_path, hf):
    folder = tmp_path / "sharded_bin"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    sd = hf.state_dict()
    keys = list(sd)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2 :])):
        name = f"pytorch_model-0000{i + 1}-of-00002.bin"
        torch.save({k: sd[k] for k in part}, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert_same_outputs(bertlite.BertModel.from_pretrained(folder), hf)


def test_safetensors_preferred_over_bin(folder, hf):
    other = make_hf_model(seed=7)
    torch.save(other.state_dict(), folder / "pytorch_model.bin")
    assert_same_outputs(bertlite.BertModel.from_pretrained(folder), hf)


def test_without_pooler_ignores_pooler_weights(folder, hf):
    model = bertlite.BertModel.from_pretrained(folder, add_pooling_layer=False)
    assert model.pooler is None
    inputs = random_batch(hf.config)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs)[0], hf(**inputs)[0], **TOL)


@pytest.mark.parametrize(
    "dtype, expected",
    [
        ("bfloat16", torch.bfloat16),
        (torch.float16, torch.float16),
        ("torch.float64", torch.float64),
        ("half", torch.float16),
        (None, torch.float32),
    ],
)
def test_dtype(folder, hf, dtype, expected):
    model = bertlite.BertModel.from_pretrained(folder, dtype=dtype, device="cpu")
    assert {p.dtype for p in model.parameters()} == {expected}
    inputs = random_batch(hf.config)
    with torch.no_grad():
        ours = model(**inputs).last_hidden_state
        reference = hf(**inputs).last_hidden_state  # fp32
        theirs = copy.deepcopy(hf).to(expected)(**inputs).last_hidden_state
    assert ours.dtype == expected
    # Low precision is judged against transformers' own error in that dtype.
    our_error = (ours.double() - reference.double()).abs().max().item()
    their_error = (theirs.double() - reference.double()).abs().max().item()
    assert our_error <= 2 * their_error + 1e-5, (our_error, their_error)


def test_bad_dtype(folder):
    with pytest.raises(ValueError, match="dtype='int8' is not supported"):
        bertlite.BertModel.from_pretrained(folder, dtype="int8")


def test_attn_implementation_option(folder):
    assert bertlite.BertModel.from_pretrained(folder, attn_implementation="eager").attn_implementation == "eager"
    assert bertlite.BertModel.from_pretrained(folder).attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="attn_implementation='flash' is not one of"):
        bertlite.BertModel.from_pretrained(folder, attn_implementation="flash")


class RecordOps(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def test_no_random_init_of_loaded_weights(folder):
    with RecordOps() as record:
        bertlite.BertModel.from_pretrained(folder)
    assert "to" in record.names  # the recorder does see the load's torch calls...
    assert not record.names & {"normal_", "uniform_", "kaiming_uniform_", "fill_", "zero_"}  # ...but no init


def test_building_in_another_thread_during_a_load_is_initialised(folder):
    import threading

    built = {}
    start = threading.Event()

    def build():
        start.wait()
        built["linear"] = torch.nn.Linear(256, 256)

    thread = threading.Thread(target=build)
    thread.start()
    from bertlite.loading import empty_init

    with empty_init():
        start.set()
        thread.join()
    assert built["linear"].weight.device.type == "cpu" and built["linear"].weight.std() > 0.01


def test_dtype_auto_follows_config(tmp_path, hf):
    config = {**hf.config.to_dict(), "dtype": "bfloat16"}
    folder = write_folder(tmp_path / "auto", config, hf.state_dict())
    assert bertlite.BertModel.from_pretrained(folder, dtype="auto").embeddings.LayerNorm.weight.dtype == torch.bfloat16
    half = {k: v.half() for k, v in hf.state_dict().items()}
    folder = write_folder(tmp_path / "auto16", {**hf.config.to_dict(), "dtype": None}, half)
    assert bertlite.BertModel.from_pretrained(folder, dtype="auto").pooler.dense.weight.dtype == torch.float16


def test_device_index_is_not_mistaken_for_none(folder):
    with pytest.raises((RuntimeError, AssertionError)):  # device 0 is CUDA; this machine has none
        bertlite.BertModel.from_pretrained(folder, device=0)


# --- errors -------------------------------------------------------------------


def edited_folder(tmp_path: Path, hf, edit) -> Path:
    sd = dict(hf.state_dict())
    edit(sd)
    return write_folder(tmp_path / "edited", hf.config.to_dict(), sd)


def test_missing_key_strict_and_not(tmp_path, hf):
    folder = edited_folder(tmp_path, hf, lambda sd: sd.pop("encoder.layer.1.output.LayerNorm.weight"))
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): encoder.layer.1.output.LayerNorm.weight"):
        bertlite.BertModel.from_pretrained(folder)
    with pytest.warns(UserWarning, match="missing keys"):
        model = bertlite.BertModel.from_pretrained(folder, strict=False)
    # a missing weight gets transformers' initial value, not meta or garbage
    assert torch.equal(model.encoder.layer[1].output.LayerNorm.weight, torch.ones(32))
    assert torch.equal(model.encoder.layer[1].output.LayerNorm.bias, hf.encoder.layer[1].output.LayerNorm.bias)


def test_unexpected_keys_sorted(tmp_path, hf):
    def edit(sd):
        sd["encoder.layer.0.zzz.weight"] = torch.zeros(2)
        sd["encoder.layer.0.aaa.weight"] = torch.zeros(2)

    folder = edited_folder(tmp_path, hf, edit)
    with pytest.raises(
        CheckpointError,
        match=r"unexpected keys \(2\): encoder.layer.0.aaa.weight \(in model.safetensors\), encoder.layer.0.zzz",
    ):
        bertlite.BertModel.from_pretrained(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bertlite.BertModel.from_pretrained(folder, strict=False)
    assert any("unexpected keys" in str(w.message) for w in caught)


def test_shape_mismatch_names_key_shapes_and_file(tmp_path, hf):
    folder = edited_folder(tmp_path, hf, lambda sd: sd.update({"pooler.dense.bias": torch.zeros(31)}))
    with pytest.raises(
        CheckpointError, match=r"pooler.dense.bias: checkpoint \(31,\) in model.safetensors, model \(32,\)"
    ):
        bertlite.BertModel.from_pretrained(folder, strict=False)


def test_integer_tensor_for_weight(tmp_path, hf):
    folder = edited_folder(
        tmp_path, hf, lambda sd: sd.update({"pooler.dense.bias": torch.zeros(32, dtype=torch.int64)})
    )
    with pytest.raises(CheckpointError, match="pooler.dense.bias: checkpoint dtype torch.int64"):
        bertlite.BertModel.from_pretrained(folder)


def test_math_changing_tensor_is_never_dropped(tmp_path, hf):
    key = "encoder.layer.0.attention.self.distance_embedding.weight"
    folder = edited_folder(tmp_path, hf, lambda sd: sd.update({key: torch.zeros(127, 8)}))
    with pytest.raises(CheckpointError, match=f"{key} in model.safetensors \\(relative position embeddings"):
        bertlite.BertModel.from_pretrained(folder, strict=False)


def test_unknown_hidden_act(tmp_path, hf):
    config = {**hf.config.to_dict(), "hidden_act": "gelu_magic"}
    folder = write_folder(tmp_path / "act", config, hf.state_dict())
    with pytest.raises(ValueError, match=r"config.json: hidden_act='gelu_magic' is not implemented"):
        bertlite.BertModel.from_pretrained(folder)


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, hf):
    marker = tmp_path / "pwned"
    folder = write_folder(tmp_path / "evil", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    torch.save({"embeddings.word_embeddings.weight": _Payload(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: refused to load; .* could run code"):
        bertlite.BertModel.from_pretrained(folder)
    assert not marker.exists()


def test_bin_that_is_not_a_pickle(tmp_path, hf):
    folder = write_folder(tmp_path / "junk", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    (folder / "pytorch_model.bin").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(CheckpointError, match="pytorch_model.bin: not a PyTorch checkpoint"):
        bertlite.BertModel.from_pretrained(folder)


def test_garbage_safetensors(folder):
    (folder / "model.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(CheckpointError, match="model.safetensors: not a valid safetensors file"):
        bertlite.BertModel.from_pretrained(folder)


def test_index_naming_missing_shard(tmp_path, hf):
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    shard = sorted(p for p in (tmp_path / "sharded").iterdir() if p.name.endswith(".safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"names shard '{shard.name}', which does not exist"):
        bertlite.BertModel.from_pretrained(tmp_path / "sharded")


def test_folder_without_weights(tmp_path, hf):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    with pytest.raises(CheckpointError, match="no weights found .*model.safetensors"):
        bertlite.BertModel.from_pretrained(folder)


def test_folder_that_does_not_exist(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no such folder"):
        bertlite.BertModel.from_pretrained(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    "extra_key, source",
    [("bert.pooler.dense.bias", "pooler.dense.bias"), ("embeddings.LayerNorm.gamma", "embeddings.LayerNorm.weight")],
)
def test_two_keys_for_one_weight_is_an_error(tmp_path, hf, extra_key, source):
    folder = edited_folder(tmp_path, hf, lambda sd: sd.update({extra_key: torch.randn(sd[source].shape)}))
    with pytest.raises(CheckpointError, match=r"conflicting keys \(1\)") as e:
        bertlite.BertModel.from_pretrained(folder, strict=False)
    assert f"{source}: given twice" in str(e.value) and repr(extra_key) in str(e.value) and repr(source) in str(e.value)


def test_training_checkpoint_bin_names_the_non_tensor(tmp_path, hf):
    folder = write_folder(tmp_path / "train", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    torch.save({"state_dict": hf.state_dict(), "epoch": 3}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="but 'state_dict' is a OrderedDict"):
        bertlite.BertModel.from_pretrained(folder)
