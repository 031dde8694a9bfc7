"""from_pretrained on folders: formats, legacy keys, dtype, and errors that name the problem."""

import copy
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file
from torch.overrides import TorchFunctionMode

import bertlite
import bertlite.checkpoint.safety
import bertlite.models.bert
from bertlite.errors import CheckpointError, CheckpointNotFoundError
from tests.helpers import ROOT, TINY, make_hf_model, random_batch, write_folder

TOL = dict(atol=1e-5, rtol=1e-5)


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


def test_errors_users_catch_have_transformers_types(folder, tmp_path):
    # transformers raises ImportError for flash_attention_2 without the flash-attn package, and OSError for a
    # folder without weights; user code catches exactly those (falls back to sdpa, or to another checkpoint).
    def load(library, **kwargs):
        try:
            return library.BertModel.from_pretrained(folder, attn_implementation="flash_attention_2", **kwargs)
        except ImportError:
            return library.BertModel.from_pretrained(folder, attn_implementation="sdpa", **kwargs)

    for library in (transformers, bertlite):
        assert load(library).config.hidden_size == TINY["hidden_size"]
    assert load(bertlite).attn_implementation == "sdpa"
    for name in ("flash_attention_2", "flash_attention_3"):
        with pytest.raises(ValueError, match=rf"attn_implementation='{name}' is not available: .*use 'sdpa'"):
            bertlite.BertModel.from_pretrained(folder, attn_implementation=name)  # a ValueError too, as before
    with pytest.raises(ImportError, match="flash_attention_2"):
        bertlite.BertModel(bertlite.BertConfig(**TINY)).set_attn_implementation("flash_attention_2")
    empty = tmp_path / "config-only"
    empty.mkdir()
    shutil.copy(Path(folder) / "config.json", empty / "config.json")
    for library in (transformers, bertlite):
        with pytest.raises(OSError):
            library.BertModel.from_pretrained(empty)
    with pytest.raises(CheckpointError, match="config-only: no weights found"):
        bertlite.BertModel.from_pretrained(empty)  # still a CheckpointError too
    # Weights of another shape (a new num_labels without ignore_mismatched_sizes): RuntimeError in both.
    head = tmp_path / "head"
    transformers.BertForSequenceClassification(transformers.BertConfig(**TINY, num_labels=2)).save_pretrained(head)
    for library in (transformers, bertlite):
        with pytest.raises(RuntimeError):
            library.BertForSequenceClassification.from_pretrained(head, num_labels=3)
    with pytest.raises(CheckpointError, match=r"shape or dtype mismatch \(2\): classifier.bias"):
        bertlite.BertForSequenceClassification.from_pretrained(head, num_labels=3)


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
    from bertlite.checkpoint.load import empty_init

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


# --- files that lie -------------------------------------------------------------------
# Each gives an error that names the file and the problem, never a crash deep inside torch or safetensors.


def _rewrite_header(path: Path, edit) -> None:
    """Rewrite a safetensors file's JSON header (8-byte little-endian length, then the JSON, then the data)."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = edit(json.loads(data[8 : 8 + length]))
    path.write_bytes(struct.pack("<Q", len(header)) + header + data[8 + length :])


def _claim_more_tensor_bytes(header: dict) -> bytes:
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    header[last]["data_offsets"][1] += 4096
    return json.dumps(header).encode()


@pytest.mark.parametrize(
    "corrupt, detail",
    [
        pytest.param(lambda p: p.write_bytes(p.read_bytes()[:-1000]), "file not fully covered", id="truncated"),
        pytest.param(lambda p: p.write_bytes(b""), "header too small", id="empty"),
        pytest.param(lambda p: p.write_bytes(os.urandom(4096)), "", id="random-bytes"),
        pytest.param(
            # The 8-byte length prefix says the header runs far past the end of the file.
            lambda p: p.write_bytes(struct.pack("<Q", p.stat().st_size * 10) + p.read_bytes()[8:]),
            "invalid header length",
            id="header-length-beyond-file",
        ),
        pytest.param(
            # A well-formed header whose last tensor ends 4 KiB after the file does.
            lambda p: _rewrite_header(p, _claim_more_tensor_bytes),
            "offset",
            id="tensor-beyond-file",
        ),
    ],
)
def test_safetensors_that_lie(folder, corrupt, detail):
    corrupt(folder / "model.safetensors")
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert f"{folder / 'model.safetensors'}: not a valid safetensors file" in message
    assert detail in message and "truncated or corrupt: download or convert it again" in message


def test_index_that_is_not_json(tmp_path, hf):
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text('{"weight_map": {')
    with pytest.raises(CheckpointError, match=r"index.json: not a valid shard index .*JSONDecodeError"):
        bertlite.BertModel.from_pretrained(tmp_path / "sharded")


@pytest.mark.parametrize(
    "text, match",
    [
        pytest.param('{"hidden_size": 32,', r"config.json: not valid JSON \(Expecting", id="cut-short"),
        pytest.param("", r"config.json: not valid JSON", id="empty"),
        pytest.param("[32, 4]", r"config.json: expected a JSON object, got list", id="array"),
    ],
)
def test_config_json_that_is_not_a_config(folder, text, match):
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError, match=match):
        bertlite.BertModel.from_pretrained(folder)


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("hidden_size", "32", "hidden_size must be a positive integer, got '32'"),
        ("num_attention_heads", 4.5, "num_attention_heads must be a positive integer, got 4.5"),
        ("hidden_dropout_prob", "0.1", "hidden_dropout_prob must be a number, got '0.1'"),
        ("layer_norm_eps", None, "layer_norm_eps must be a number, got None"),
        ("pad_token_id", "0", "pad_token_id must be an integer or null, got '0'"),
        ("hidden_act", 3, "hidden_act=3 is not implemented"),
    ],
)
def test_config_value_of_the_wrong_type(folder, key, value, match):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ValueError) as e:
        bertlite.BertModel.from_pretrained(folder)
    assert str(e.value).startswith(f"{folder / 'config.json'}: {match}"), str(e.value)


def test_config_of_another_architecture(folder):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match=r"config.json: model_type='gpt2' is a decoder; bertlite serves encoders"):
        bertlite.BertModel.from_pretrained(folder)


def test_config_of_another_size_than_the_weights(folder):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert "shape or dtype mismatch (37): embeddings.LayerNorm.bias: checkpoint (32,) in model.safetensors" in message
    assert "... (17 more)" in message  # 37 tensors, the first 20 listed
    assert "is it the config of these weights?" in message
    assert "missing keys" not in message  # the mismatched ones, not repeated
    assert len(e.value.report.mismatched) == 37  # the report keeps them all


def test_checkpoint_in_another_float_dtype_is_converted(tmp_path, hf):
    half = {k: v.half() for k, v in hf.state_dict().items()}
    model = bertlite.BertModel.from_pretrained(write_folder(tmp_path / "fp16", hf.config.to_dict(), half))
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the default dtype, as transformers
    assert torch.equal(model.pooler.dense.weight, half["pooler.dense.weight"].float())


def test_checkpoint_of_quantized_integers(tmp_path, hf):
    quantized = {k: (v * 100).to(torch.int8) for k, v in hf.state_dict().items()}
    folder = write_folder(tmp_path / "int8", hf.config.to_dict(), quantized)
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert "embeddings.LayerNorm.bias: checkpoint dtype torch.int8 in model.safetensors, model expects floats" in (
        message
    )
    assert "config.json" not in message  # the shapes are right: no hint at the config


def test_plain_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, hf):
    # An old-style (not zip) pickle, as torch < 1.6 or pickle.dump would write it.
    marker = tmp_path / "pwned"
    folder = write_folder(tmp_path / "evil", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"pooler.dense.bias": _Payload(marker)}, protocol=2))
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: refused to load; .* GLOBAL posix.system"):
        bertlite.BertModel.from_pretrained(folder)
    assert not marker.exists()


# --- round 2: non-finite weights, pickle bombs, shard names, configs that do not fit -----------------------


def test_non_finite_weights_are_named_and_loadable_on_request(tmp_path, hf, real_model_path):
    def edit(sd):
        sd["pooler.dense.bias"] = sd["pooler.dense.bias"].clone()
        sd["pooler.dense.bias"][3] = float("nan")
        sd["encoder.layer.1.output.dense.weight"] = sd["encoder.layer.1.output.dense.weight"].clone()
        sd["encoder.layer.1.output.dense.weight"][0, :2] = float("inf")

    folder = edited_folder(tmp_path, hf, edit)
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert "2 tensor(s) hold NaN or Inf: " in message and str(folder) in message
    assert "encoder.layer.1.output.dense.weight in model.safetensors (2 Inf)" in message
    assert "pooler.dense.bias in model.safetensors (1 NaN)" in message
    assert "pass allow_nonfinite=True to load it anyway" in message and "\n" not in message
    with pytest.warns(UserWarning, match=r"hold NaN or Inf: .*allow_nonfinite=True: loaded as they are"):
        model = bertlite.BertModel.from_pretrained(folder, allow_nonfinite=True)
    assert torch.isnan(model.pooler.dense.bias[3]) and torch.isfinite(model.pooler.dense.bias[:3]).all()
    # Embedder.from_pretrained passes the option on (a tokenizer makes the folder an Embedder's)
    shutil.copy(Path(real_model_path) / "tokenizer.json", folder / "tokenizer.json")
    with pytest.raises(CheckpointError, match="hold NaN or Inf"):
        bertlite.Embedder.from_pretrained(folder, dtype="float32")
    with pytest.warns(UserWarning, match="allow_nonfinite=True: loaded as they are"):
        embedder = bertlite.Embedder.from_pretrained(folder, dtype="float32", allow_nonfinite=True)
    assert not torch.isfinite(embedder.model.encoder.layer[1].output.dense.weight).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_non_finite_value_in_a_later_chunk_of_the_file_is_found(tmp_path, hf, monkeypatch, dtype):
    # The check reads safetensors files a chunk at a time: a NaN past the first chunk must count too.
    monkeypatch.setattr(bertlite.checkpoint.safety, "_CHECK_CHUNK", 64)

    def edit(sd):
        for key in sd:
            sd[key] = sd[key].to(dtype)
        sd["encoder.layer.0.intermediate.dense.weight"][-1, -1] = float("nan")  # the tensor's last element

    folder = edited_folder(tmp_path, hf, edit)
    with pytest.raises(CheckpointError, match=r"intermediate\.dense\.weight in model\.safetensors \(1 NaN\)"):
        bertlite.BertModel.from_pretrained(folder, dtype=dtype)


@pytest.mark.slow
def test_loading_leaves_the_checkpoint_pages_it_checked_unmapped(real_model_path):
    # The model holds the safetensors file's mmapped pages; the NaN/Inf check reads the file instead,
    # so only what a forward touches becomes resident (an embedding matrix is mostly rows never read).
    script = (
        "import sys, bertlite\n"
        "model = bertlite.BertModel.from_pretrained(sys.argv[1])\n"
        "rss, inside = 0, False\n"
        "for line in open('/proc/self/smaps'):\n"
        "    if line[0] in '0123456789abcdef' and ' ' in line:\n"
        "        inside = line.rstrip().endswith('model.safetensors')\n"
        "    elif inside and line.startswith('Rss:'):\n"
        "        rss += int(line.split()[1])\n"
        "print(rss)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(real_model_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    file_kib = (Path(real_model_path) / "model.safetensors").stat().st_size // 1024
    # measured: 26,240 of 88,738 KiB; summing each mapped tensor made all of it resident (88,740)
    assert int(done.stdout.split()[-1]) < file_kib // 2


def test_weight_that_overflows_the_requested_dtype_is_named(tmp_path, hf):
    folder = edited_folder(tmp_path, hf, lambda sd: sd.update({"pooler.dense.bias": torch.full((32,), 1e5)}))
    bertlite.BertModel.from_pretrained(folder)  # finite in float32
    with pytest.raises(CheckpointError, match=r"pooler.dense.bias in model.safetensors \(32 Inf once converted to"):
        bertlite.BertModel.from_pretrained(folder, dtype="float16")


def _bomb(folder: Path, nones: int) -> Path:
    """A real torch.save archive whose data.pkl is replaced by a deflated run of NONE opcodes: a few KB on
    disk that expand to `nones` bytes (the reported file: 1 MB on disk, over 5 minutes and 4.3 GB)."""
    import io
    import zipfile

    path = folder / "pytorch_model.bin"
    original = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    with zipfile.ZipFile(path, "w") as bomb:
        for entry in original.infolist():
            data = original.read(entry)
            if entry.filename.endswith("/data.pkl"):
                bomb.writestr(entry.filename, b"\x80\x02" + b"N" * nones + b".", zipfile.ZIP_DEFLATED)
            else:
                bomb.writestr(entry, data)
    return path


def test_pickle_bomb_is_refused_before_unpickling(tmp_path, hf):
    folder = write_folder(tmp_path / "bomb", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    path = _bomb(folder, nones=4 << 20)
    assert path.stat().st_size < 100 << 10  # the tensors (85 KB) and a few KB of deflated pickle
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert message.startswith(f"{path}: refused to load: its data.pkl is 4194307 bytes for 39 tensor records")
    assert "built to exhaust memory" in message


@pytest.mark.parametrize(
    "content, match",
    [
        pytest.param(b"hello, this is a text file\n" * 10, "it starts with b'hello, t'", id="text"),
        pytest.param(b"", r"it starts with b''", id="empty"),
    ],
)
def test_bin_that_is_not_a_checkpoint_names_the_file(tmp_path, hf, content, match):
    folder = write_folder(tmp_path / "text", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    (folder / "pytorch_model.bin").write_bytes(content)
    with pytest.raises(CheckpointError, match=f"pytorch_model.bin: not a PyTorch checkpoint: .*{match}"):
        bertlite.BertModel.from_pretrained(folder)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_archive_is_refused_without_unsafe_advice(tmp_path, hf):
    folder = write_folder(tmp_path / "jit", hf.config.to_dict(), hf.state_dict(), fmt="bin")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    message = str(e.value)
    assert "pytorch_model.bin: a TorchScript archive (torch.jit.save), not a state dict" in message
    assert "weights_only" not in message.replace("weights_only=True", "") and "False" not in message


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_config_with_more_layers_than_the_checkpoint_fails_before_building(tmp_path, hf, fmt, monkeypatch):
    # Building 100000 layers took 250 s and 6.5 GB before the key check failed: none may be built.
    built = []

    def build_layer(self, *args, **kwargs):
        built.append(1)
        assert len(built) <= 2, "the model is being built"
        original(self, *args, **kwargs)

    original = bertlite.models.bert.BertLayer.__init__
    monkeypatch.setattr(bertlite.models.bert.BertLayer, "__init__", build_layer)
    config = {**hf.config.to_dict(), "num_hidden_layers": 100_000}
    folder = write_folder(tmp_path / "deep", config, hf.state_dict(), fmt=fmt)
    name = "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin"
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    assert str(e.value) == (
        f"cannot load BertModel from {folder}: config.json has num_hidden_layers=100000, but the checkpoint "
        f"({name}) holds 2 encoder layers (layers 0 to 1); is config.json the config of these weights?"
    )
    assert not built


@pytest.mark.parametrize(
    "shard",
    ["../outside.safetensors", "/etc/passwd", "sub/../../outside.safetensors", "..\\outside.safetensors", "C:x"],
)
def test_shard_index_may_not_leave_the_folder(tmp_path, hf, shard):
    # A valid checkpoint sits right outside: loading it would succeed, silently, with another model's weights.
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, tmp_path / "outside.safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": dict.fromkeys(hf.state_dict(), shard)}))
    with pytest.raises(CheckpointError) as e:
        bertlite.BertModel.from_pretrained(folder)
    assert str(e.value) == (
        f"{index}: refused shard {shard!r}: it is outside the checkpoint folder; "
        "a shard index may only name files in its own folder"
    )


@pytest.mark.parametrize(
    "index, match",
    [
        (
            {"weight_map": {"pooler.dense.bias": 5}},
            r"weight_map\['pooler.dense.bias'\] must be a shard file name .*got 5",
        ),
        ({"weight_map": ["model-1.safetensors"]}, "'weight_map' must map tensor names to shard files"),
        (["model-1.safetensors"], "not a valid shard index"),
    ],
)
def test_shard_index_of_the_wrong_shape_is_named(tmp_path, hf, index, match):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf.config.to_dict()))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"model.safetensors.index.json: {match}"):
        bertlite.BertModel.from_pretrained(folder)


def test_a_one_output_head_is_bitwise_to_transformers_loading_the_same_folder(tmp_path):
    # Both libraries read safetensors tensors as views into the file's buffer (at the same offsets), so a
    # one-output Linear, whose GEMM path depends on its weight's alignment, gives the same last bit.
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY, num_labels=1, attn_implementation="eager")
    hf = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    hf.save_pretrained(tmp_path)
    theirs = transformers.BertForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    ours = bertlite.BertForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    theirs_offsets = [p.data_ptr() % 64 for p in theirs.parameters()]
    assert [p.data_ptr() % 64 for p in ours.parameters()] == theirs_offsets
    batch = random_batch(hf.config, batch=5, seq=13)
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs.eval()(**batch).logits)
