"""EuroBERT against transformers' native module in the same run: the config, the module tree and keys, eager
bitwise (grouped-query attention too), sdpa and every packed attention within 1e-5, every head and each classifier
pooling, save and load both ways, `bertlite parity`, and the Embedder and CrossEncoder against sentence-transformers
on tiny folders built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import EuroBertConfig
from bertlite.errors import CheckpointError
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.onednn import OneDNNLinear, linear_works
from bertlite.models.eurobert import EuroBertModel
from bertlite.quant.int8 import quantize_int8
from tests.models.family import head_labels, packed
from tests.models.test_modernbert import build_tokenizer

TINY_EUROBERT = dict(
    vocab_size=300,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=64,
    pad_token_id=3,
    bos_token_id=1,
    eos_token_id=2,
    mask_token_id=4,
)
# Model shapes checked: as many key and value heads as query heads, and grouped-query attention with the biases
# on, another rotary base, head size and activation.
CONFIGS = {
    "mha": dict(),
    "gqa-biases": dict(
        num_key_value_heads=2,
        head_dim=16,
        attention_bias=True,
        mlp_bias=True,
        hidden_act="gelu",
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")


def make_hf(name: str = "Model", config: str = "mha", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers EuroBERT model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_EUROBERT, **CONFIGS[config], **overrides}
    hf_config = transformers.EuroBertConfig(**values, attn_implementation=values.pop("attn", "eager"))
    model = getattr(transformers, "EuroBert" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in param_name else 0.0, 0.3)
    return model.eval()


def padded_batch(seed: int = 1, width: int = 30) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 3) of 30, 11 and 20 tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY_EUROBERT["vocab_size"], (3, width), generator=g)
    mask = torch.ones_like(ids)
    for row, length in ((1, 11), (2, 20)):
        ids[row, length:], mask[row, length:] = 3, 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_folder(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, a folder with that random EuroBertModel saved by transformers, and a BPE tokenizer)."""
    path = tmp_path_factory.mktemp(f"eurobert-{request.param}")
    make_hf(config=request.param).save_pretrained(path)
    build_tokenizer(path)
    return request.param, path


def test_config_is_transformers_and_bad_values_are_named() -> None:
    for values in ({}, TINY_EUROBERT, {**TINY_EUROBERT, **CONFIGS["gqa-biases"]}):
        theirs = transformers.EuroBertConfig.from_dict(values).to_dict()
        ours = EuroBertConfig.from_dict(values)
        for key in ("_name_or_path", "chunk_size_feed_forward", "dtype", "is_encoder_decoder", "transformers_version"):
            theirs.pop(key, None)
        theirs.setdefault("architectures", None)
        assert {"architectures": None, **ours.to_dict()} == theirs
    for bad, message in (
        (dict(num_key_value_heads=5), "num_attention_heads=12 is not a multiple of num_key_value_heads=5"),
        (dict(classifier_pooling="max"), "classifier_pooling='max' is not one of"),
        (dict(rope_parameters={"rope_type": "llama3"}), "rope_type='llama3' is not implemented"),
        (dict(rms_norm_eps=0), "rms_norm_eps must be a positive number"),
        (dict(mlp_bias="no"), "mlp_bias must be true or false"),
        (dict(hidden_act="nope"), "hidden_act='nope' is not implemented"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            EuroBertConfig.from_dict(bad)
        assert "\n" not in str(raised.value)


def test_auto_tokenizer_gives_transformers_ids(model_folder) -> None:
    _, folder = model_folder
    texts = ["Héllo wörld", "  spaces  and\ttabs ", "naïve café [MASK] fox", "", "ünïcödé 🦊 dog."]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    ours = bertlite.AutoTokenizer.from_pretrained(folder)
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 6}):
        assert ours(texts, **kwargs) == dict(theirs(texts, **kwargs))
    assert "token_type_ids" not in ours(texts[0])


def test_keys_and_eager_are_transformers_bitwise(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = EuroBertModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is EuroBertConfig and list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = ours.embed_tokens(batch["input_ids"][:1])
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
        positions = torch.arange(30).flip(0)[None] + 5
        given = ours(**batch, position_ids=positions).last_hidden_state
        expected_given = hf(**batch, position_ids=positions).last_hidden_state
        no_mask = ours(input_ids=batch["input_ids"]).last_hidden_state
        expected_no_mask = hf(input_ids=batch["input_ids"]).last_hidden_state
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)  # the padding's rows too
    assert len(got.hidden_states) == len(expected.hidden_states) == 3
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)
    assert torch.equal(given, expected_given) and torch.equal(no_mask, expected_no_mask)


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    config, path = model_folder
    hf, hf_sdpa = make_hf(config=config), make_hf(config=config, attn="sdpa")
    ours = EuroBertModel.from_pretrained(path, attn_implementation=attn)
    batch = padded_batch()
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


def test_keywords_are_checked_and_token_types_ignored(model_folder) -> None:
    config, path = model_folder
    ours = EuroBertModel.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch()
    with torch.no_grad():
        expected = make_hf(config=config)(**batch).last_hidden_state
        assert torch.equal(
            ours(**batch, token_type_ids=torch.ones_like(batch["input_ids"])).last_hidden_state, expected
        )
    with pytest.raises(ValueError, match="attention_mask is not taken with a packed batch"):
        ours(**packed(batch), attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="first_token_of takes a packed batch"):
        ours(**batch, first_token_of=torch.tensor([0]))
    with pytest.raises(TypeError, match="unexpected_keyword"):
        ours(**batch, unexpected_keyword=1)
    with pytest.raises(ValueError, match="EuroBERT has no pooler"):
        EuroBertModel(ours.config, add_pooling_layer=True)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    config, path = model_folder
    ours = EuroBertModel.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "eurobert" and "rms_norm_eps" in saved and "layer_norm_eps" not in saved
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.EuroBertModel and type(again) is EuroBertModel
    batch = padded_batch()
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_and_the_layer_count_check(model_folder) -> None:
    config, path = model_folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is EuroBertConfig
    assert type(bertlite.AutoModel.from_pretrained(path)) is EuroBertModel
    assert type(bertlite.AutoModel.from_config(transformers.EuroBertConfig(**TINY_EUROBERT))) is EuroBertModel
    assert bertlite.EuroBertModel is EuroBertModel and bertlite.EuroBertConfig is EuroBertConfig
    values = {**TINY_EUROBERT, **CONFIGS[config], "num_hidden_layers": 1}
    with pytest.raises(CheckpointError, match="num_hidden_layers=1, but the checkpoint .* holds 2 encoder layers"):
        EuroBertModel.from_pretrained(path, config=EuroBertConfig(**values))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize(
    ("head", "pooling"),
    [(head, "late") for head in HEADS] + [("ForSequenceClassification", p) for p in ("bos", "mean")],
)
def test_every_head_loads_and_equals_transformers(head, pooling, config, tmp_path) -> None:
    num_labels = TINY_EUROBERT["vocab_size"] if head == "ForMaskedLM" else 3
    tied = {"tie_word_embeddings": True} if config == "mha" else {}  # tied and untied decoders
    hf = make_hf(head, config, num_labels=3, classifier_pooling=pooling, **tied)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "EuroBert" + head).from_pretrained(tmp_path, attn_implementation="eager")
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert type(getattr(bertlite, "AutoModel" + head).from_pretrained(tmp_path)) is type(ours)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    labels = head_labels(head, batch, num_labels)
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
        no_mask, expected_no_mask = ours(batch["input_ids"]).logits, hf(batch["input_ids"]).logits
        packed_out = ours(**packed(batch))
    assert torch.equal(got.loss, expected.loss) and torch.equal(got.logits, expected.logits)
    assert torch.equal(no_mask, expected_no_mask)
    theirs = expected.logits if head == "ForSequenceClassification" else expected.logits[real]
    torch.testing.assert_close(packed_out.logits, theirs, **TOL)
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "EuroBert" + head).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(theirs.eval()(**batch).logits, got.logits)


def test_masked_lm_trains_as_transformers(tmp_path) -> None:
    hf = make_hf("ForMaskedLM", "gqa-biases", tie_word_embeddings=True)
    hf.save_pretrained(tmp_path)
    ours = bertlite.EuroBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    batch = padded_batch()
    labels = head_labels("ForMaskedLM", batch, TINY_EUROBERT["vocab_size"])["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


# --- the jobs against sentence-transformers ------------------------------------------------

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo wörld, naïve café!",
    "what is a tokenizer? " * 6,  # longer than max_seq_length: cut
    "fox",
    "ünïcödé 🦊 and [MASK] written out",
]
PAIRS = [
    ("what is a fox?", "The quick brown fox jumps over the lazy dog."),
    ("café", "naïve café " * 8),
    ("a long query " * 6, "a short document"),
    ("tokenizer", "what is a tokenizer?"),
]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embedder_gives_sentence_transformers_vectors(model_folder, pooling: str, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    _, folder = model_folder
    modules = [Transformer(str(folder), max_seq_length=24), Pooling(32, pooling), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(tmp_path / "st"))
    expected = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (expected @ expected.T)[np.triu_indices(len(TEXTS), 1)].mean() < 0.95  # the vectors differ
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype="float32", unpad=unpad)
        assert type(embedder.model) is EuroBertModel and embedder.max_length == 24
        np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooling", ["late", "bos", "mean"])
def test_cross_encoder_gives_sentence_transformers_scores(pooling: str, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    make_hf("ForSequenceClassification", num_labels=1, classifier_pooling=pooling).save_pretrained(tmp_path)
    build_tokenizer(tmp_path)
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=24).predict(PAIRS)
    assert np.ptp(expected) > 1e-3  # the scores differ
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=24, unpad=unpad)
        assert type(ours.model) is bertlite.EuroBertForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)


def test_the_cpu_fast_path_and_int8_match_transformers_and_eager_undoes_them(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ready(EuroBertModel.from_pretrained(path))
    layer = ours.layers[1]
    fast = linear_works(torch.float32)  # oneDNN's Linear runs here
    gated = fast and product_works(torch.float32)  # act(gate) * up in two GEMMs' epilogues (layers.gated)
    assert isinstance(layer.mlp.gated_product, GatedProduct) == gated
    swapped = [type(layer.mlp.gate_proj) is OneDNNLinear, type(layer.mlp.up_proj) is OneDNNLinear]
    assert swapped == [fast and not gated] * 2
    # q|k|v in one GEMM, with biases or without, grouped-query too.
    assert (layer.self_attn.qkv is not None) == fast
    assert layer.self_attn.fuses_residual == layer.mlp.fuses_residual == fast
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert type(layer.mlp.gate_proj) is torch.nn.Linear and layer.self_attn.qkv is None
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        int8 = quantize_int8(EuroBertModel.from_pretrained(path), kernel="dequantize", compile_quantization=False)
        low = int8(**packed(batch)).last_hidden_state
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert type(int8.layers[0].self_attn.qkv).__name__ == "Int8Linear"  # q|k|v quantized as one, grouped too
    assert {type(int8.layers[0].mlp.gate_proj).__name__, type(int8.layers[0].mlp.up_proj).__name__} == {"Int8Linear"}
    # Random weights far from any trained model's: int8 keeps the rows' direction, not 1e-5.
    assert torch.nn.functional.cosine_similarity(low, expected[real], dim=-1).mean() >= 0.99


def test_parity_compares_a_eurobert_folder_with_transformers(model_folder, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    _, folder = model_folder
    report = check(folder, texts=[*TEXTS, *PAIRS, "long text " * 30])
    names = {row.name for row in report.rows}
    assert report.ok and not report.only_in_bertlite and not report.only_in_transformers
    assert {"layers.1.self_attn", "layers.1.mlp", "norm", "last_hidden_state"} <= names
    assert main(["parity", str(folder), "--head", "none"]) == 0
    make_hf("ForSequenceClassification").save_pretrained(tmp_path / "classifier")
    build_tokenizer(tmp_path / "classifier")
    report = check(tmp_path / "classifier", texts=[*TEXTS, *PAIRS])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"logits"}


def test_an_8192_token_text_matches_transformers(tmp_path) -> None:
    hf = make_hf("Model", "gqa-biases", max_position_embeddings=8192, attn="sdpa")
    hf.save_pretrained(tmp_path)
    ours = ready(EuroBertModel.from_pretrained(tmp_path))
    ids = torch.randint(5, TINY_EUROBERT["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192])).last_hidden_state
    torch.testing.assert_close(got, expected, **TOL)


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
        assert type(ours.model) is bertlite.EuroBertForMaskedLM
        got = ours.encode(TEXTS).to_dense()
        assert (expected != 0).sum(dim=1).min() > 0
        assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5
