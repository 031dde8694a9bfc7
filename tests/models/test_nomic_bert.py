"""NomicBERT against transformers' native module in the same run: the config (and the original hub layout's,
read without its code), the tokenizer, the module tree and keys (the original names its checkpoints hold), eager
bitwise, sdpa and every packed attention within 1e-5, every
head, save and load both ways, `bertlite parity`, and the Embedder and CrossEncoder against sentence-transformers on
tiny folders built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import NomicBertConfig
from bertlite.errors import CheckpointError
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.gated import GatedProduct, product_works
from bertlite.layers.onednn import OneDNNLinear, linear_works
from bertlite.models.nomic_bert import NomicBertModel
from bertlite.quant.int8 import quantize_int8
from tests.models.family import head_labels, keys_as_saved, packed, save_st_folder, saved_keys

TINY_NOMIC = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)
# Model shapes checked: nomic-embed-text's (SwiGLU, two token types), and another activation, rotary base and
# LayerNorm eps.
CONFIGS = {
    "tiny": dict(),
    "gelu-theta": dict(
        hidden_act="gelu",
        layer_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")


def make_hf(name: str = "Model", config: str = "tiny", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers NomicBERT model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_NOMIC, **CONFIGS[config], **overrides}
    hf_config = transformers.NomicBertConfig(**values, attn_implementation=values.pop("attn", "eager"))
    model = getattr(transformers, "NomicBert" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():  # a tied pair is one parameter here, so it stays tied
            is_norm = "norm" in param_name.lower() and param_name.endswith("weight")
            p.normal_(1.0 if is_norm else 0.0, 0.3)
    return model.eval()


def padded_batch(seed: int = 1, width: int = 30) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 0) of 30, 11 and 20 tokens, with token types 0 and 1 in the first."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, TINY_NOMIC["vocab_size"], (3, width), generator=g)
    mask = torch.ones_like(ids)
    for row, length in ((1, 11), (2, 20)):
        ids[row, length:], mask[row, length:] = 0, 0
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def batch_for(config: str) -> dict[str, torch.Tensor]:
    return padded_batch()


def build_tokenizer(folder: Path) -> None:
    """transformers' BertTokenizerFast on a small WordPiece vocabulary, as nomic-embed-text's (pad id 0)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    words = ["the", "list", "of", "items", "sort", "dict", "by", "value", "json", "key"]
    vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *letters, "!", ",", "?"]
    vocab += [f"##{c}" for c in letters]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    assert len(tokenizer) <= TINY_NOMIC["vocab_size"]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_folder(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, a folder with that random NomicBertModel saved by transformers)."""
    path = tmp_path_factory.mktemp(f"nomic-{request.param}")
    make_hf(config=request.param).save_pretrained(path)
    build_tokenizer(path)
    return request.param, path


def test_config_is_transformers_and_bad_values_are_named() -> None:
    for values in ({}, TINY_NOMIC, {**TINY_NOMIC, **CONFIGS["gelu-theta"]}):
        theirs = transformers.NomicBertConfig.from_dict(values).to_dict()
        ours = NomicBertConfig.from_dict(values)
        for key in ("_name_or_path", "chunk_size_feed_forward", "dtype", "is_encoder_decoder", "transformers_version"):
            theirs.pop(key, None)
        theirs.setdefault("architectures", None)
        assert {"architectures": None, **ours.to_dict()} == theirs
    assert NomicBertConfig().rope_theta == 1000.0
    for bad, message in (
        (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0}), "rope_type='yarn' is not implemented"),
        (dict(rope_parameters={"rope_theta": -1.0}), "rope_theta must be a positive number"),
        (dict(hidden_act="nope"), "hidden_act='nope' is not implemented"),
        (dict(head_dim=32), "head_dim=32: NomicBERT's heads split hidden_size=768 evenly"),
        (dict(is_decoder=True), "a NomicBERT model is an encoder with rotary positions"),
        (dict(model_type="bert"), "model_type='bert' is not a NomicBert config"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            NomicBertConfig.from_dict(bad)
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
    ours = NomicBertModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is NomicBertConfig
    # Saved under the checkpoint's names (attn.Wqkv, mlp.fc11, norm1, emb_ln, ...), as transformers saves them; q|k|v
    # held apart under transformers' names for them, which PEFT targets.
    assert keys_as_saved(ours) == saved_keys(path)
    assert {f"encoder.layers.0.attn.{x}_proj.weight" for x in "qkv"} <= set(ours.state_dict())
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
    loaded = transformers.NomicBertModel.from_pretrained(path, attn_implementation="eager").eval()
    for length in (1, 2, 3, 5):
        short = {name: values[:1, :length] for name, values in batch.items()}
        with torch.no_grad():
            assert torch.equal(ours(**short).last_hidden_state, loaded(**short).last_hidden_state), length
    assert got.pooler_output is None and len(ours(**batch, return_dict=False)) == 1


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    config, path = model_folder
    hf, hf_sdpa = make_hf(config=config), make_hf(config=config, attn="sdpa")
    ours = NomicBertModel.from_pretrained(path, attn_implementation=attn)
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


def test_packed_keywords_are_checked(model_folder) -> None:
    _, path = model_folder
    ours = NomicBertModel.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch()
    with pytest.raises(ValueError, match="attention_mask is not taken with a packed batch"):
        ours(**packed(batch), attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="first_token_of takes a packed batch"):
        ours(**batch, first_token_of=torch.tensor([0]))
    with pytest.raises(TypeError, match="unexpected_keyword"):
        ours(**batch, unexpected_keyword=1)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    config, path = model_folder
    ours = NomicBertModel.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "nomic_bert" and "position_embedding_type" not in saved
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.NomicBertModel and type(again) is NomicBertModel
    assert theirs.config.rope_parameters == ours.config.rope_parameters
    batch = batch_for(config)
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_and_the_layer_count_check(model_folder) -> None:
    config, path = model_folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is NomicBertConfig
    assert type(bertlite.AutoModel.from_pretrained(path)) is NomicBertModel
    assert type(bertlite.AutoModel.from_config(transformers.NomicBertConfig(**TINY_NOMIC))) is NomicBertModel
    assert bertlite.NomicBertModel is NomicBertModel and bertlite.NomicBertConfig is NomicBertConfig
    values = {**TINY_NOMIC, **CONFIGS[config], "num_hidden_layers": 1}
    with pytest.raises(CheckpointError, match="num_hidden_layers=1, but the checkpoint .* holds 2 encoder layers"):
        NomicBertModel.from_pretrained(path, config=NomicBertConfig(**values))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(head, config, tmp_path) -> None:
    num_labels = TINY_NOMIC["vocab_size"] if head == "ForMaskedLM" else 3
    hf = make_hf(head, config, num_labels=3)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "NomicBert" + head).from_pretrained(tmp_path, attn_implementation="eager")
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
    theirs = getattr(transformers, "NomicBert" + head).from_pretrained(tmp_path / "saved", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(theirs.eval()(**batch).logits, got.logits)


def test_masked_lm_is_tied_and_trains_as_transformers(tmp_path) -> None:
    hf = make_hf("ForMaskedLM")
    hf.save_pretrained(tmp_path)
    ours = bertlite.NomicBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager")
    predictions = ours.cls.predictions
    assert predictions.decoder.weight is ours.nomic_bert.embeddings.word_embeddings.weight
    assert predictions.decoder.bias is predictions.bias
    batch = padded_batch()
    labels = head_labels("ForMaskedLM", batch, TINY_NOMIC["vocab_size"])["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    # The parts are transformers', its attention's under the same names, the others under the checkpoint's.
    renamed = {"encoder.layers.": "layers.", "attn.out_proj": "self_attn.o_proj", "emb_ln": "embeddings.LayerNorm"}
    renamed |= {".attn.": ".self_attn."}
    renamed |= {"mlp.fc11": "mlp.up_proj", "mlp.fc12": "mlp.gate_proj", "mlp.fc2": "mlp.down_proj"}
    renamed |= {"norm1": "post_attention_layernorm", "norm2": "post_mlp_layernorm"}
    for name, p in ours.named_parameters():
        for mine, native in renamed.items():
            name = name.replace(mine, native)
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")


# --- the jobs against sentence-transformers ------------------------------------------------

TEXTS = ["the list of items", "sort a dict by value", "json key value items " * 4, "zebra", "Café, naïve!"]
PAIRS = [("what is a list?", "the list of items"), ("dict", "sort a dict by value " * 5), ("key", "mutable key")]


@pytest.mark.parametrize("pooling", ["mean", "cls"])  # nomic-embed-text's, and cls
def test_embedder_gives_sentence_transformers_vectors(model_folder, pooling: str, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    _, folder = model_folder
    st_folder = save_st_folder(folder, tmp_path / "st", pooling)
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert (expected @ expected.T)[np.triu_indices(len(TEXTS), 1)].min() < 0.99  # the vectors differ
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
        assert type(embedder.model) is NomicBertModel and embedder.max_length == 24
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
        assert type(ours.model) is bertlite.NomicBertForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)


def test_the_cpu_fast_path_and_int8_match_transformers_and_eager_undoes_them(model_folder) -> None:
    config, path = model_folder
    hf = make_hf(config=config)
    ours = ready(NomicBertModel.from_pretrained(path))
    layer = ours.encoder.layer[1]
    fast = linear_works(torch.float32)  # oneDNN's Linear runs here
    assert (layer.attn.qkv is not None) == fast  # q|k|v in one GEMM
    gated = fast and product_works(torch.float32)  # act(gate) * up in two GEMMs' epilogues (layers.gated)
    assert isinstance(layer.mlp.gated_product, GatedProduct) == gated
    swapped = [type(layer.mlp.fc12) is OneDNNLinear, type(layer.mlp.fc11) is OneDNNLinear]
    assert swapped == [fast and not gated] * 2
    assert layer.attn.fuses_residual == layer.mlp.fuses_residual == fast
    batch = batch_for(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert layer.attn.qkv is None and type(layer.attn.q_proj) is torch.nn.Linear
        assert not layer.mlp.fuses_residual
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        int8 = quantize_int8(NomicBertModel.from_pretrained(path), kernel="dequantize", compile_quantization=False)
        low = int8(**packed(batch)).last_hidden_state
    assert type(int8.encoder.layers[0].mlp.fc2).__name__ == "Int8Linear"
    assert {type(int8.encoder.layers[0].mlp.fc11).__name__, type(int8.encoder.layers[0].mlp.fc12).__name__} == {
        "Int8Linear"
    }
    # Random weights far from any trained model's: int8 keeps the rows' direction, not 1e-5.
    assert torch.nn.functional.cosine_similarity(low, expected[real], dim=-1).mean() >= 0.99


def test_parity_compares_a_nomic_bert_folder_with_transformers(model_folder, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    _, folder = model_folder
    report = check(folder, texts=[*TEXTS, *PAIRS, "the list " * 30])
    names = {row.name for row in report.rows}
    assert report.ok and not report.only_in_bertlite and not report.only_in_transformers
    # Weights in the checkpoint's layout, each layer's parts under transformers' names for them.
    assert {"encoder.layers.1.attn.Wqkv.weight", "encoder.layers.1.mlp.fc11.weight", "emb_ln.weight"} <= names
    assert {"emb_ln", "encoder.layers.1.attn", "encoder.layers.1.norm2", "last_hidden_state"} <= names
    assert main(["parity", str(folder), "--head", "none"]) == 0
    make_hf("ForSequenceClassification").save_pretrained(tmp_path / "classifier")
    build_tokenizer(tmp_path / "classifier")
    report = check(tmp_path / "classifier", texts=[*TEXTS, *PAIRS])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"logits"}


def test_an_8192_token_text_matches_transformers(tmp_path) -> None:
    hf = make_hf(max_position_embeddings=8192, attn="sdpa")
    hf.save_pretrained(tmp_path)
    ours = ready(NomicBertModel.from_pretrained(tmp_path))
    ids = torch.randint(4, TINY_NOMIC["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192])).last_hidden_state
    torch.testing.assert_close(got, expected, **TOL)


# nomic-embed-text-v1.5's own config.json, as its hub folder has it: GPT-2's names, its switches, code in auto_map.
ORIGINAL_CODE = "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert."
ORIGINAL_CONFIG = {
    "model_type": "nomic_bert",
    "architectures": ["NomicBertModel"],
    "auto_map": {
        "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
        "AutoModel": ORIGINAL_CODE + "NomicBertModel",
        "AutoModelForMaskedLM": ORIGINAL_CODE + "NomicBertForPreTraining",
    },
    "activation_function": "swiglu",
    "attn_pdrop": 0.0,
    "bos_token_id": None,
    "causal": False,
    "dense_seq_output": True,
    "embd_pdrop": 0.0,
    "eos_token_id": None,
    "fused_bias_fc": True,
    "fused_dropout_add_ln": True,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-12,
    "max_trained_positions": 2048,
    "mlp_fc1_bias": False,
    "mlp_fc2_bias": False,
    "n_embd": 32,
    "n_head": 4,
    "n_inner": 200,  # the original rounds its gated width up to a multiple of 256
    "n_layer": 2,
    "n_positions": 64,
    "pad_vocab_size_multiple": 64,
    "parallel_block": False,
    "parallel_block_tied_norm": False,
    "prenorm": False,
    "qkv_proj_bias": False,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.0,
    "rotary_emb_base": 1000,
    "rotary_emb_fraction": 1.0,
    "rotary_emb_interleaved": False,
    "rotary_emb_scale_base": None,
    "rotary_scaling_factor": None,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.0,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "type_vocab_size": 2,
    "use_cache": True,
    "use_flash_attn": True,
    "use_rms_norm": False,
    "use_xentropy": True,
    "vocab_size": 99,
}


@pytest.fixture(scope="module")
def original_folder(tmp_path_factory) -> Path:
    """transformers' native model saved (under the original's key names, as transformers saves them) with the
    original's config.json in place of transformers' one."""
    folder = tmp_path_factory.mktemp("nomic-original")
    make_hf(intermediate_size=256, layer_norm_eps=1e-12).save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(ORIGINAL_CONFIG))
    build_tokenizer(folder)
    return folder


def test_the_original_layout_loads_without_its_code_as_transformers(original_folder, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    hf = make_hf(intermediate_size=256, layer_norm_eps=1e-12)
    batch = padded_batch()
    ours = bertlite.AutoModel.from_pretrained(original_folder, attn_implementation="eager")
    assert type(ours) is NomicBertModel and ours.config.intermediate_size == 256
    assert ours.config.rope_theta == 1000.0 and "auto_map" not in ours.config.to_dict()
    with torch.no_grad():
        assert torch.equal(ours(**batch).last_hidden_state, hf(**batch).last_hidden_state)
    # an embedding folder of the original: the jobs read it without trust_remote_code, as transformers' model
    st_folder = save_st_folder(_native_folder(tmp_path / "native"), tmp_path / "st", "mean")
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    (st_folder / "config.json").write_text(json.dumps(ORIGINAL_CONFIG))
    embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32")
    np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)
    drop_in = bertlite.SentenceTransformer(str(st_folder), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(drop_in.encode(TEXTS), expected, atol=1e-5, rtol=0)
    # saved by bertlite: transformers' layout, which transformers loads natively
    ours.save_pretrained(tmp_path / "saved")
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    with torch.no_grad():
        assert torch.equal(theirs(**batch).last_hidden_state, hf(**batch).last_hidden_state)


def _native_folder(folder: Path) -> Path:
    """The same model in transformers' own layout (sentence-transformers' reference reads it)."""
    make_hf(intermediate_size=256, layer_norm_eps=1e-12).save_pretrained(folder)
    build_tokenizer(folder)
    return folder


@pytest.mark.parametrize(
    "change, message",
    [
        ({"prenorm": True}, "original prenorm=True is not implemented"),
        ({"rotary_emb_fraction": 0.5}, "original rotary_emb_fraction=0.5 is not implemented"),
        ({"rotary_scaling_factor": 2.0}, "original rotary_scaling_factor=2.0 is not implemented"),
        ({"rotary_scaling_factor": "drop"}, "original rotary_scaling_factor=1.0 is not implemented"),
        ({"qkv_proj_bias": True}, "original qkv_proj_bias=True is not implemented"),
        ({"activation_function": "gelu"}, "original activation_function='gelu' is not implemented"),
        ({"auto_map": {"AutoModel": "impl--modeling.NomicBertModel"}}, "auto_map names the checkpoint's own code"),
    ],
)
def test_what_the_original_layout_computes_otherwise_is_refused_by_name(tmp_path, change, message) -> None:
    config = {**ORIGINAL_CONFIG, **change}
    config = {key: value for key, value in config.items() if value != "drop"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    for load in (bertlite.AutoModel.from_pretrained, bertlite.AutoConfig.from_pretrained):
        with pytest.raises(ValueError, match=message) as raised:
            load(tmp_path)
        assert "\n" not in str(raised.value)


def test_to_bertlite_and_use_bertlite_take_nomic_bert(model_folder, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.integrations import to_bertlite, use_bertlite

    config, folder = model_folder
    hf = make_hf("ForMaskedLM", config)
    twin = to_bertlite(hf, attn_implementation="eager")  # transformers' split q/k/v fused as the checkpoint has them
    assert (
        type(twin) is bertlite.NomicBertForMaskedLM
        and twin.cls.predictions.decoder.weight is twin.get_input_embeddings().weight
    )
    batch = batch_for(config)
    with torch.no_grad():
        assert torch.equal(twin.eval()(**batch).logits, hf(**batch).logits)
    model = SentenceTransformer(str(save_st_folder(folder, tmp_path / "st", "mean")), device="cpu")
    expected = model.encode(TEXTS, convert_to_numpy=True)
    use_bertlite(model)
    assert any(type(m).__name__ == "NomicBertModel" and m.__module__.startswith("bertlite") for m in model.modules())
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
        assert type(ours.model) is bertlite.NomicBertForMaskedLM
        got = ours.encode(TEXTS).to_dense()
        assert (expected != 0).sum(dim=1).min() > 0
        assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5


def test_prompts_and_matryoshka_truncation_as_sentence_transformers(model_folder, tmp_path) -> None:
    # nomic-embed-text's use: its task prefixes as the folder's prompts, vectors cut to a Matryoshka width
    from sentence_transformers import SentenceTransformer

    _, folder = model_folder
    st_folder = save_st_folder(folder, tmp_path / "st", "mean")
    settings = json.loads((st_folder / "config_sentence_transformers.json").read_text())
    settings["prompts"] = {"query": "search_query: ", "document": "search_document: "}
    (st_folder / "config_sentence_transformers.json").write_text(json.dumps(settings))
    theirs = SentenceTransformer(str(st_folder), device="cpu", truncate_dim=16)
    ours = bertlite.SentenceTransformer(str(st_folder), device="cpu", truncate_dim=16)
    for encode in ("encode_query", "encode_document"):
        expected = getattr(theirs, encode)(TEXTS, normalize_embeddings=True)
        got = getattr(ours, encode)(TEXTS, normalize_embeddings=True)
        assert got.shape == expected.shape == (len(TEXTS), 16)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    plain = theirs.encode(TEXTS, normalize_embeddings=True)
    assert np.abs(plain - theirs.encode_query(TEXTS, normalize_embeddings=True)).max() > 1e-3  # the prompt counts
