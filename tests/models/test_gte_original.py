"""GTE's original hub layout (model_type "new", auto_map to Alibaba-NLP/new-impl's remote code), read without
running that code: its config.json fields mapped onto GteConfig, its keys under the `new.` prefix, equal to
transformers' native gte bit for bit where the two compute the same (no rope_scaling), and equal to a float64
reference of the original's equations with its fixed-NTK rope_scaling; what GTE's modules do not compute is
refused by name.

The reference is the original's model code as text-embeddings-inference reads it:
huggingface/text-embeddings-inference, backends/candle/src/models/gte.rs (the layer: qkv_proj split in thirds,
rotary on query and key, post-norm attn_ln and mlp_ln, up_gate_proj split into up then gate, act(gate) * up) and
backends/candle/src/layers/rotary.rs (get_inv_freqs, RopeScaling::Ntk: the inverse frequencies of base
theta * factor, each divided by factor ** (2 / head_dim)), commit 0d124dc; a copy of the remote code's
modeling.py (NTKScalingRotaryEmbedding without mixed_b, NewLayer, NewGatedMLP) reads the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

import bertlite
from bertlite.config import GteConfig
from tests.models.test_gte import CONFIGS, batch_for, build_tokenizer, make_hf

NEW_IMPL = "Alibaba-NLP/new-impl"
AUTO_MAP = {
    "AutoConfig": f"{NEW_IMPL}--configuration.NewConfig",
    "AutoModel": f"{NEW_IMPL}--modeling.NewModel",
    "AutoModelForMaskedLM": f"{NEW_IMPL}--modeling.NewForMaskedLM",
    "AutoModelForSequenceClassification": f"{NEW_IMPL}--modeling.NewForSequenceClassification",
}


def original_config(hf: transformers.PreTrainedModel, **overrides) -> dict:
    """The native model's config as the original's config.json writes it (NewConfig's fields, kernel switches on)."""
    c = hf.config
    config = {
        "model_type": "new",
        "architectures": ["New" + type(hf).__name__.removeprefix("Gte")],
        "auto_map": AUTO_MAP,
        **{k: getattr(c, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")},
        **{k: getattr(c, k) for k in ("intermediate_size", "hidden_act", "hidden_dropout_prob", "type_vocab_size")},
        **{k: getattr(c, k) for k in ("attention_probs_dropout_prob", "max_position_embeddings", "layer_norm_eps")},
        "pad_token_id": c.pad_token_id,
        "layer_norm_type": "layer_norm",
        "position_embedding_type": "rope",
        "rope_theta": c.rope_parameters["rope_theta"],
        "rope_scaling": None,
        "pack_qkv": True,
        "unpad_inputs": True,
        "use_memory_efficient_attention": True,
        "logn_attention_scale": False,
        "logn_attention_clip1": False,
        "id2label": {str(i): label for i, label in c.id2label.items()},
    }
    return {**config, **overrides}


def write_original(hf: transformers.PreTrainedModel, folder: Path, **overrides) -> Path:
    """A folder in the original layout with hf's weights: transformers' on-disk names (the original's fused
    qkv_proj, up_gate_proj, attn_ln, mlp_ln) under the original's `new.` prefix (a bare NewModel has none)."""
    native = folder / "native"
    hf.save_pretrained(native)
    with safe_open(native / "model.safetensors", "pt") as f:
        tensors = {("new." + k[len("gte.") :] if k.startswith("gte.") else k): f.get_tensor(k) for k in f.keys()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(original_config(hf, **overrides)))
    return folder


def reference(state: dict[str, torch.Tensor], config: dict, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """last_hidden_state (B, T, H) by the original's equations in float64, from its config.json and weights."""
    sd = {k.removeprefix("new."): v.double() for k, v in state.items()}
    H, nh = config["hidden_size"], config["num_attention_heads"]
    d, eps = H // nh, config["layer_norm_eps"]
    act = {"gelu": F.gelu, "silu": F.silu}[config["hidden_act"]]
    ids, mask = batch["input_ids"], batch["attention_mask"]
    B, T = ids.shape
    x = sd["embeddings.word_embeddings.weight"][ids]
    if config["type_vocab_size"] > 0:
        x = x + sd["embeddings.token_type_embeddings.weight"][batch.get("token_type_ids", torch.zeros_like(ids))]
    x = F.layer_norm(x, (H,), sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"], eps)
    theta, scaling = config["rope_theta"], config["rope_scaling"]
    factor = 1.0 if scaling is None else scaling["factor"]
    inv_freq = 1.0 / (theta * factor) ** (torch.arange(0, d, 2, dtype=torch.float64) / d) / factor ** (2 / d)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq  # (T, d/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (T, d)

    def rotate(t: torch.Tensor) -> torch.Tensor:
        return t * cos + torch.cat((-t[..., d // 2 :], t[..., : d // 2]), -1) * sin

    bias = torch.zeros(B, 1, 1, T, dtype=torch.float64).masked_fill(~mask.bool()[:, None, None], -math.inf)
    inter = config["intermediate_size"]
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        qkv = F.linear(x, sd[p + "attention.qkv_proj.weight"], sd[p + "attention.qkv_proj.bias"])
        q, k, v = (t.view(B, T, nh, d).transpose(1, 2) for t in qkv.split(H, -1))  # (B, nh, T, d)
        probs = torch.softmax(rotate(q) @ rotate(k).transpose(-1, -2) / math.sqrt(d) + bias, -1)
        context = (probs @ v).transpose(1, 2).reshape(B, T, H)
        x = x + F.linear(context, sd[p + "attention.o_proj.weight"], sd[p + "attention.o_proj.bias"])
        x = F.layer_norm(x, (H,), sd[p + "attn_ln.weight"], sd[p + "attn_ln.bias"], eps)
        up, gate = F.linear(x, sd[p + "mlp.up_gate_proj.weight"]).split(inter, -1)
        x = x + F.linear(act(gate) * up, sd[p + "mlp.down_proj.weight"], sd[p + "mlp.down_proj.bias"])
        x = F.layer_norm(x, (H,), sd[p + "mlp_ln.weight"], sd[p + "mlp_ln.bias"], eps)
    return x


def read_state(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(folder / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("head", ["Model", "ForSequenceClassification", "ForMaskedLM"])
def test_the_original_layout_loads_and_equals_transformers_native_gte(head, config, tmp_path) -> None:
    # The original's masked-LM head applies hidden_act where the native one applies gelu: they agree on gelu.
    hf = make_hf(head, config, num_labels=3, **({"hidden_act": "gelu"} if head == "ForMaskedLM" else {}))
    folder = write_original(hf, tmp_path / "new")
    auto = getattr(bertlite, "AutoModel" + ("" if head == "Model" else head))
    ours = auto.from_pretrained(folder, attn_implementation="eager")
    assert type(ours) is getattr(bertlite, "Gte" + head) and ours.config.model_type == "gte"
    assert ours.config.architectures == ["Gte" + head] and "auto_map" not in ours.config.to_dict()
    batch = batch_for(config)
    with torch.no_grad():
        got, expected = ours(**batch), hf(**batch)
    name = "last_hidden_state" if head == "Model" else "logits"
    assert torch.equal(getattr(got, name), getattr(expected, name))
    assert bertlite.AutoConfig.from_pretrained(folder).model_type == "gte"
    # Saved by bertlite, it is a native gte folder: transformers loads it without remote code.
    ours.save_pretrained(tmp_path / "saved")
    theirs = getattr(transformers, "Gte" + head).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(getattr(theirs.eval()(**batch), name), getattr(got, name))


def test_the_tokenizer_and_the_embedder_read_an_original_folder(tmp_path) -> None:
    hf = make_hf("Model", "types")
    folder = write_original(hf, tmp_path / "new")
    build_tokenizer(folder)
    build_tokenizer(tmp_path / "new" / "native")
    texts = ["the list of items", "sort a <mask> by value"]
    expected = bertlite.AutoTokenizer.from_pretrained(tmp_path / "new" / "native")(texts, padding=True)
    assert bertlite.AutoTokenizer.from_pretrained(folder)(texts, padding=True) == expected
    vectors = bertlite.Embedder.from_pretrained(str(folder)).encode(texts)
    native = bertlite.Embedder.from_pretrained(str(tmp_path / "new" / "native")).encode(texts)
    np.testing.assert_array_equal(vectors, native)


def test_the_cross_encoder_reads_an_original_reranker_folder(tmp_path) -> None:
    hf = make_hf("ForSequenceClassification", "types", num_labels=1)
    folder = write_original(hf, tmp_path / "new")
    build_tokenizer(folder)
    build_tokenizer(tmp_path / "new" / "native")
    pairs = [("a list", "the list of items"), ("sort", "sort a <mask> by value")]
    scores = bertlite.CrossEncoder(str(folder)).predict(pairs)
    np.testing.assert_array_equal(scores, bertlite.CrossEncoder(str(tmp_path / "new" / "native")).predict(pairs))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_ntk_rope_scaling_equals_the_float64_reference_of_the_original(config, tmp_path) -> None:
    hf = make_hf("Model", config)
    folder = write_original(hf, tmp_path / "ntk", rope_scaling={"type": "ntk", "factor": 2.0})
    plain = write_original(hf, tmp_path / "plain")
    ours = bertlite.GteModel.from_pretrained(folder, attn_implementation="eager")
    assert ours.config.rope_parameters["rope_type"] == "ntk" and ours.config.rope_ntk_factor == 2.0
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    expected = reference(read_state(folder), json.loads((folder / "config.json").read_text()), batch)[real]
    unscaled = reference(read_state(plain), json.loads((plain / "config.json").read_text()), batch)[real]
    sdpa = bertlite.GteModel.from_pretrained(folder, attn_implementation="sdpa")
    with torch.no_grad():
        got = ours(**batch).last_hidden_state[real]
        native = hf(**batch).last_hidden_state[real]
        got64 = {
            attn: model.double()(**batch).last_hidden_state[real] for attn, model in (("eager", ours), ("sdpa", sdpa))
        }
        packed = {"input_ids": batch["input_ids"][real], "lengths": real.sum(dim=1)}
        if "token_type_ids" in batch:
            packed["token_type_ids"] = batch["token_type_ids"][real]
        got64["packed"] = sdpa(**packed).last_hidden_state  # each text's rotary positions counted from 0
    # In float64 the equations alone: within 1e-5 (the rotary frequencies are float32, as the original's).
    for attn, out in got64.items():
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5, msg=attn)
    # The reference without scaling is transformers' native gte (checking the reference), the scaling changes the
    # outputs, and in float32 our error is within a small multiple of transformers' own against the reference.
    torch.testing.assert_close(native.double(), unscaled, atol=1e-4, rtol=1e-4)
    assert (got - native).abs().max() > 1e-3
    assert (got.double() - expected).abs().max() <= 3 * (native.double() - unscaled).abs().max()


def test_the_config_fields_map_onto_gte_and_defaults_are_the_originals() -> None:
    config = GteConfig.from_dict({"model_type": "new", "rope_scaling": {"type": "ntk", "factor": 2.0}})
    assert config.model_type == "gte" and config.vocab_size == 30528 and config.max_position_embeddings == 2048
    assert config.rope_parameters == {"rope_type": "ntk", "rope_theta": 10_000.0, "factor": 2.0}
    assert config.pad_token_id is None and config.type_vocab_size == 1
    for key in ("unpad_inputs", "use_memory_efficient_attention", "logn_attention_clip1", "pack_qkv", "rope_scaling"):
        assert key not in config.to_dict()
    # Saved, it is a gte config that keeps its scaling.
    assert GteConfig.from_dict(config.to_dict()).rope_parameters == config.rope_parameters


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"logn_attention_scale": True}, "logn_attention_scale=True is not implemented"),
        ({"layer_norm_type": "rms_norm"}, "layer_norm_type='rms_norm' is not implemented"),
        ({"pack_qkv": False}, "pack_qkv=False is not implemented"),
        ({"position_embedding_type": "absolute"}, "position_embedding_type='absolute' is not implemented"),
        ({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}}, "rope_scaling=.* is not implemented"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling=.* is not implemented"),
        ({"rope_scaling": {"type": "ntk", "factor": 0.5}}, "rope_type 'ntk' needs a factor >= 1"),
        ({"auto_map": {"AutoModel": "someone/other--modeling.NewModel"}}, "auto_map names the checkpoint's own code"),
        ({"architectures": ["NewForMaskedLM"], "hidden_act": "silu"}, "NewForMaskedLM with hidden_act='silu'"),
    ],
)
def test_what_gte_does_not_compute_is_refused_by_name(overrides, message, tmp_path) -> None:
    folder = write_original(make_hf("Model", "types"), tmp_path / "new", **overrides)
    with pytest.raises(ValueError, match=message) as raised:
        bertlite.AutoModel.from_pretrained(folder)
    assert "\n" not in str(raised.value)
