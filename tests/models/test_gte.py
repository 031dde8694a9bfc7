"""GTE against transformers' native module in the same run: the config, the tokenizer, the module tree and keys
(the fused names GTE's checkpoints hold), eager bitwise, sdpa and every packed attention within 1e-5, every head,
save and load both ways, `bertlite parity`, and the Embedder and CrossEncoder against sentence-transformers on
tiny folders built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import GteConfig
from bertlite.errors import CheckpointError
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.onednn import OneDNNLinear, linear_works
from bertlite.models.gte import GteModel
from bertlite.quant.int8 import quantize_int8
from tests.models.family import head_labels, keys_as_saved, packed, save_st_folder, saved_keys
from tests.models.test_roberta import unigram_tokenizer

TINY_GTE = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)
# Model shapes checked: gte-multilingual's (token types, gelu), and gte-base-en-v1.5's (no token type embeddings)
# with another activation, rotary base and LayerNorm eps.
CONFIGS = {
    "types": dict(type_vocab_size=2),
    "no-types-silu": dict(
        type_vocab_size=0,
        hidden_act="silu",
        layer_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")


def make_hf(name: str = "Model", config: str = "types", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers GTE model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_GTE, **CONFIGS[config], **overrides}
    hf_config = transformers.GteConfig(**values, attn_implementation=values.pop("attn", "eager"))
    model = getattr(transformers, "Gte" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():  # a tied pair is one parameter here, so it stays tied
            is_norm = "norm" in param_name.lower() and param_name.endswith("weight")
            p.normal_(1.0 if is_norm else 0.0, 0.3)
    return model.eval()


def padded_batch(seed: int = 1, width: int = 30, types: bool = True) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 1) of 30, 11 and 20 tokens, with token types 0 and 1 when `types`."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, TINY_GTE["vocab_size"], (3, width), generator=g)
    mask = torch.ones_like(ids)
    for row, length in ((1, 11), (2, 20)):
        ids[row, length:], mask[row, length:] = 1, 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if types:
        batch["token_type_ids"] = (torch.arange(width)[None] >= 6).long().expand(3, -1) * mask
    return batch


def batch_for(config: str) -> dict[str, torch.Tensor]:
    return padded_batch(types=CONFIGS[config]["type_vocab_size"] > 0)


def build_tokenizer(folder: Path) -> None:
    """A SentencePiece-style unigram tokenizer with XLM-RoBERTa's specials, as gte-multilingual's (pad id 1)."""
    unigram_tokenizer(folder)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_folder(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, a folder with that random GteModel saved by transformers)."""
    path = tmp_path_factory.mktemp(f"gte-{request.param}")
    make_hf(config=request.param).save_pretrained(path)
    build_tokenizer(path)
    return request.param, path


def test_config_is_transformers_and_bad_values_are_named() -> None:
    for values in ({}, {**TINY_GTE, **CONFIGS["types"]}, {**TINY_GTE, **CONFIGS["no-types-silu"]}):
        theirs = transformers.GteConfig.from_dict(values).to_dict()
        ours = GteConfig.from_dict(values)
        for key in ("_name_or_path", "chunk_size_feed_forward", "dtype", "is_encoder_decoder", "transformers_version"):
            theirs.pop(key, None)
        theirs.setdefault("architectures", None)
        assert {"architectures": None, **ours.to_dict()} == theirs
    assert GteConfig().rope_theta == 160_000.0 and GteConfig(type_vocab_size=0).type_vocab_size == 0
    for bad, message in (
        (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0}), "rope_type='yarn' is not implemented"),
        (dict(rope_parameters={"rope_theta": -1.0}), "rope_theta must be a positive number"),
        (dict(hidden_act="nope"), "hidden_act='nope' is not implemented"),
        (dict(type_vocab_size=-1), "type_vocab_size must be a positive integer"),
        (dict(is_decoder=True), "a GTE model is an encoder with rotary positions"),
        (dict(model_type="bert"), "model_type='bert' is not a Gte config"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            GteConfig.from_dict(bad)
        assert "\n" not in str(raised.value)


def test_auto_tokenizer_gives_transformers_ids(model_folder) -> None:
    _, folder = model_folder
    texts = ["the list of items", "  spaces  and\ttabs ", "sort a <mask> by value", "", "ünïcödé 🦊 json."]
    pairs = [("what is a list?", "the list of items"), ("dict", "")]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = bertlite.AutoTokenizer.from_pretrained(folder)
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 6}):
        assert ours(texts, **kwargs) == dict(theirs(texts, **kwargs))
        firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
        assert ours(firsts, seconds, **kwargs) == dict(theirs(firsts, seconds, **kwargs))
    for text in texts:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def test_keys_and_eager_are_transformers_bitwise(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = GteModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is GteConfig
    # Saved under the checkpoint's fused names (qkv_proj, up_gate_proj, attn_ln, mlp_ln), as transformers saves them;
    # held apart under transformers' names for them, which PEFT targets.
    assert keys_as_saved(ours) == saved_keys(path)
    parts = {f"encoder.layer.0.{name}.weight" for name in ("attention.q_proj", "attention.v_proj", "mlp.gate_proj")}
    assert parts <= set(ours.state_dict())
    batch = batch_for(config)
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = ours.embeddings.word_embeddings(batch["input_ids"][:1])
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
        no_mask = ours(input_ids=batch["input_ids"]).last_hidden_state
        expected_no_mask = hf(input_ids=batch["input_ids"]).last_hidden_state
        positions = torch.arange(30).flip(0)[None] + 5
        given = ours(**batch, position_ids=positions).last_hidden_state
        expected_given = hf(**batch, position_ids=positions).last_hidden_state
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)  # the padding's rows too
    assert len(got.hidden_states) == len(expected.hidden_states) == 3
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)
    assert torch.equal(no_mask, expected_no_mask) and torch.equal(given, expected_given)
    # Texts of 1 to 5 tokens, against transformers reading the same folder (a weight's alignment picks the GEMM's
    # kernel for so few rows, so a reference built in memory may differ): the fused Linears run as its separate ones.
    loaded = transformers.GteModel.from_pretrained(path, attn_implementation="eager").eval()
    for length in (1, 2, 3, 5):
        short = {name: values[:1, :length] for name, values in batch.items()}
        with torch.no_grad():
            assert torch.equal(ours(**short).last_hidden_state, loaded(**short).last_hidden_state), length
    assert got.pooler_output is None and len(ours(**batch, return_dict=False)) == 1


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    config, path = model_folder
    hf, hf_sdpa = make_hf(config=config), make_hf(config=config, attn="sdpa")
    ours = GteModel.from_pretrained(path, attn_implementation=attn)
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        got = ours(**packed(batch)).last_hidden_state
        first = ours(**packed(batch), first_token_of=torch.tensor([2, 0, 1])).last_hidden_state
    torch.testing.assert_close(got, expected[real], **TOL)
    torch.testing.assert_close(first, expected[[2, 0, 1], 0], **TOL)
    if attn in ("sdpa", "eager"):
        with torch.no_grad():
            padded = ours(**batch).last_hidden_state
            expected_sdpa = hf_sdpa(**batch).last_hidden_state
        torch.testing.assert_close(padded[real], expected[real], **TOL)
        torch.testing.assert_close(padded[real], expected_sdpa[real], **TOL)


def test_packed_keywords_are_checked_and_types_ignored_without_a_table(model_folder) -> None:
    config, path = model_folder
    ours = GteModel.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch(types=False)
    with pytest.raises(ValueError, match="attention_mask is not taken with a packed batch"):
        ours(**packed(batch), attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="first_token_of takes a packed batch"):
        ours(**batch, first_token_of=torch.tensor([0]))
    with pytest.raises(TypeError, match="unexpected_keyword"):
        ours(**batch, unexpected_keyword=1)
    if config == "no-types-silu":  # the jobs pass a tokenizer's zeros: read as transformers does, not at all
        with torch.no_grad():
            expected = make_hf(config=config)(**batch).last_hidden_state
            zeros = torch.zeros_like(batch["input_ids"])
            assert torch.equal(ours(**batch, token_type_ids=zeros).last_hidden_state, expected)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    config, path = model_folder
    ours = GteModel.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "gte" and "position_embedding_type" not in saved
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.GteModel and type(again) is GteModel
    assert theirs.config.rope_parameters == ours.config.rope_parameters
    batch = batch_for(config)
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_and_the_layer_count_check(model_folder) -> None:
    config, path = model_folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is GteConfig
    assert type(bertlite.AutoModel.from_pretrained(path)) is GteModel
    assert type(bertlite.AutoModel.from_config(transformers.GteConfig(**TINY_GTE))) is GteModel
    assert bertlite.GteModel is GteModel and bertlite.GteConfig is GteConfig
    values = {**TINY_GTE, **CONFIGS[config], "num_hidden_layers": 1}
    with pytest.raises(CheckpointError, match="num_hidden_layers=1, but the checkpoint .* holds 2 encoder layers"):
        GteModel.from_pretrained(path, config=GteConfig(**values))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(head, config, tmp_path) -> None:
    num_labels = TINY_GTE["vocab_size"] if head == "ForMaskedLM" else 3
    hf = make_hf(head, config, num_labels=3)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "Gte" + head).from_pretrained(tmp_path, attn_implementation="eager")
    assert keys_as_saved(ours) == saved_keys(tmp_path)  # tied: saved once
    assert type(getattr(bertlite, "AutoModel" + head).from_pretrained(tmp_path)) is type(ours)
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    labels = head_labels(head, batch, num_labels)
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
        as_tuple = ours(batch["input_ids"], batch["attention_mask"], return_dict=False)
        packed_out = ours(**packed(batch))
    assert torch.equal(got.loss, expected.loss) and torch.equal(got.logits, expected.logits)
    assert torch.equal(as_tuple[0], ours(batch["input_ids"], batch["attention_mask"]).logits)
    theirs = expected.logits if head == "ForSequenceClassification" else expected.logits[real]
    torch.testing.assert_close(packed_out.logits, theirs, **TOL)
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "Gte" + head).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(theirs.eval()(**batch).logits, got.logits)


def test_a_nan_in_a_fused_tensor_is_named_by_its_part(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    make_hf().save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["encoder.layer.0.attention.qkv_proj.weight"][TINY_GTE["hidden_size"] + 1, 0] = float("nan")  # k_proj's
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"hold NaN or Inf: encoder\.layer\.0\.attention\.k_proj\.weight in "):
        GteModel.from_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="k_proj.weight in model.safetensors .1 NaN. .allow_nonfinite=True"):
        ours = GteModel.from_pretrained(tmp_path, allow_nonfinite=True)
    assert ours.encoder.layer[0].attention.k_proj.weight.isnan().sum() == 1


def test_masked_lm_is_tied_and_trains_as_transformers(tmp_path) -> None:
    hf = make_hf("ForMaskedLM", hidden_dropout_prob=0.0)  # trained: no random dropout to tell them apart
    hf.save_pretrained(tmp_path)
    ours = bertlite.GteForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert ours.lm_head.decoder.weight is ours.gte.embeddings.word_embeddings.weight
    batch = padded_batch()
    labels = head_labels("ForMaskedLM", batch, TINY_GTE["vocab_size"])["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    renamed = {"encoder.layer.": "layers.", ".attention.": ".self_attn.", "lm_head.norm": "lm_head.layer_norm"}
    renamed |= {"attn_ln": "post_attention_layernorm", "mlp_ln": "post_mlp_layernorm"}
    for name, p in ours.named_parameters():
        for mine, native in renamed.items():
            name = name.replace(mine, native)
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


# --- the jobs against sentence-transformers ------------------------------------------------

TEXTS = ["the list of items", "sort a dict by value", "json writes a new sequence " * 4, "zebra", "ünïcödé 🦊"]
PAIRS = [("what is a list?", "the list of items"), ("dict", "sort a dict by value " * 5), ("key", "mutable key")]


@pytest.mark.parametrize("pooling", ["cls", "mean"])  # gte-*-v1.5's and gte-multilingual-base's, mean as others'
def test_embedder_gives_sentence_transformers_vectors(model_folder, pooling: str, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    _, folder = model_folder
    st_folder = save_st_folder(folder, tmp_path / "st", pooling)
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (expected @ expected.T)[np.triu_indices(len(TEXTS), 1)].mean() < 0.95  # the vectors differ
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
        assert type(embedder.model) is GteModel and embedder.max_length == 24
        np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)
    drop_in = bertlite.SentenceTransformer(str(st_folder), device="cpu", model_kwargs={"dtype": "float32"})
    np.testing.assert_allclose(drop_in.encode(TEXTS), expected, atol=1e-5, rtol=0)


def test_cross_encoder_gives_sentence_transformers_scores(tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    make_hf("ForSequenceClassification", num_labels=1).save_pretrained(tmp_path)
    build_tokenizer(tmp_path)
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=24).predict(PAIRS)
    assert np.ptp(expected) > 1e-3  # the scores differ
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=24, unpad=unpad)
        assert type(ours.model) is bertlite.GteForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)


def test_the_cpu_fast_path_and_int8_match_transformers_and_eager_undoes_them(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ready(GteModel.from_pretrained(path))
    layer = ours.encoder.layer[1]
    fast = linear_works(torch.float32)  # oneDNN's Linear runs here
    assert (layer.attention.qkv is not None) == fast  # q|k|v in one GEMM
    gated = fast and product_works(torch.float32)  # act(gate) * up in two GEMMs' epilogues (layers.gated)
    assert isinstance(layer.mlp.gated_product, GatedProduct) == gated
    swapped = [type(layer.mlp.gate_proj) is OneDNNLinear, type(layer.mlp.up_proj) is OneDNNLinear]
    assert swapped == [fast and not gated] * 2
    assert layer.attention.fuses_residual == layer.mlp.fuses_residual == fast
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert layer.attention.qkv is None and type(layer.attention.q_proj) is torch.nn.Linear
        assert not layer.mlp.fuses_residual
        assert layer.mlp.gated_product is None
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        int8 = quantize_int8(GteModel.from_pretrained(path), kernel="dequantize", compile_quantization=False)
        low = int8(**packed(batch)).last_hidden_state
    assert type(int8.encoder.layer[0].mlp.down_proj).__name__ == "Int8Linear"
    # Random weights far from any trained model's: int8 keeps the rows' direction, not 1e-5.
    assert torch.nn.functional.cosine_similarity(low, expected[real], dim=-1).mean() >= 0.99


def test_parity_compares_a_gte_folder_with_transformers(model_folder, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    _, folder = model_folder
    report = check(folder, texts=[*TEXTS, *PAIRS, "the list " * 30])
    names = {row.name for row in report.rows}
    assert report.ok and not report.only_in_bertlite and not report.only_in_transformers
    # Weights in the checkpoint's fused layout, each layer's parts under transformers' names for them.
    assert {"encoder.layer.1.attention.qkv_proj.weight", "encoder.layer.1.mlp.up_gate_proj.weight"} <= names
    assert {"encoder.layer.1.attention", "encoder.layer.1.mlp_ln", "last_hidden_state"} <= names
    assert main(["parity", str(folder), "--head", "none"]) == 0
    make_hf("ForSequenceClassification").save_pretrained(tmp_path / "classifier")
    build_tokenizer(tmp_path / "classifier")
    report = check(tmp_path / "classifier", texts=[*TEXTS, *PAIRS])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"logits"}


def test_an_8192_token_text_matches_transformers(tmp_path) -> None:
    hf = make_hf(max_position_embeddings=8192, attn="sdpa")
    hf.save_pretrained(tmp_path)
    ours = ready(GteModel.from_pretrained(tmp_path))
    ids = torch.randint(4, TINY_GTE["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192])).last_hidden_state
    torch.testing.assert_close(got, expected, **TOL)


def test_the_remote_code_layout_with_other_code_is_refused_by_name(tmp_path) -> None:
    # The original layout itself loads (tests/models/test_gte_original.py); an auto_map to other code does not.
    config = {"model_type": "new", "architectures": ["NewModel"], "auto_map": {"AutoModel": "impl--modeling.NewModel"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="auto_map names the checkpoint's own code"):
        bertlite.AutoModel.from_pretrained(tmp_path)


def test_to_bertlite_and_use_bertlite_take_gte(model_folder, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.integrations import to_bertlite, use_bertlite

    config, folder = model_folder
    hf = make_hf("ForMaskedLM", config)
    twin = to_bertlite(hf, attn_implementation="eager")  # transformers' split q/k/v fused as the checkpoint has them
    assert type(twin) is bertlite.GteForMaskedLM and twin.lm_head.decoder.weight is twin.get_input_embeddings().weight
    batch = batch_for(config)
    with torch.no_grad():
        assert torch.equal(twin.eval()(**batch).logits, hf(**batch).logits)
    model = SentenceTransformer(str(save_st_folder(folder, tmp_path / "st", "mean")), device="cpu")
    expected = model.encode(TEXTS, convert_to_numpy=True)
    use_bertlite(model)
    assert any(type(m).__name__ == "GteModel" and m.__module__.startswith("bertlite") for m in model.modules())
    np.testing.assert_allclose(model.encode(TEXTS, convert_to_numpy=True), expected, atol=1e-5, rtol=0)


def test_sparse_encoder_gives_sentence_transformers_vectors(tmp_path) -> None:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    make_hf("ForMaskedLM").save_pretrained(tmp_path / "mlm")
    build_tokenizer(tmp_path / "mlm")
    transformer = Transformer(str(tmp_path / "mlm"), max_seq_length=24, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    expected = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    for unpad in (True, False):
        ours = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32", unpad=unpad)
        assert type(ours.model) is bertlite.GteForMaskedLM
        got = ours.encode(TEXTS).to_dense()
        assert (expected != 0).sum(dim=1).min() > 0
        assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5
