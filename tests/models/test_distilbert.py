"""DistilBERT against transformers and sentence-transformers in the same run: tiny random checkpoints (learned
and sinusoidal positions), padded, packed and near the last position, every head, the config's names, the
tokenizer, save and load both ways, parity, Embedder, CrossEncoder and int8."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.cli import main
from bertlite.config import DistilBertConfig
from bertlite.jobs.prepare import ready
from bertlite.layers.onednn import OneDNNLinear
from bertlite.models import distilbert
from bertlite.models.distilbert import DistilBertModel

TINY = dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=24)
CONFIGS = {
    "learned": dict(TINY, dropout=0.0, attention_dropout=0.0),
    "sinusoidal-relu": dict(TINY, sinusoidal_pos_embds=True, activation="relu", pad_token_id=3),
}
WORDS = "the a of to in is list sort dict value returns new items json writes sequence cafe naive".split()


def make_hf(name: str = "learned", head: str = "Model", attn: str = "eager", **kwargs) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(**{**CONFIGS[name], **kwargs}, attn_implementation=attn)
    model = getattr(transformers, f"DistilBert{head}")(config)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "position_embeddings" not in n or not config.sinusoidal_pos_embds:
                p.normal_(0.0, 0.3)  # far from the init, so a wrongly loaded tensor shows
    return model.eval()


def padded_batch(length: int = 11) -> dict[str, torch.Tensor]:
    """Three texts, two right-padded (the padding ids are not the pad id, so only the mask hides them)."""
    torch.manual_seed(1)
    ids = torch.randint(4, 99, (3, length))
    mask = torch.ones_like(ids)
    for row, kept in ((1, length - 4), (2, length - 2)):
        mask[row, kept:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def folder(request, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp(request.param)
    make_hf(request.param).save_pretrained(path)
    return request.param, path


@pytest.mark.parametrize("length", [11, TINY["max_position_embeddings"]])
def test_eager_is_bitwise_transformers_and_packed_within_1e_5(folder, length) -> None:
    name, path = folder
    hf = make_hf(name)
    ours = DistilBertModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is DistilBertConfig and ours.pooler is None
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch(length)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch, output_hidden_states=True, output_attentions=True)
        got = ours(**batch, output_hidden_states=True, output_attentions=True)
        packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1))
        embeds = ours(inputs_embeds=ours.embeddings.word_embeddings(batch["input_ids"]))
        expected_embeds = hf(inputs_embeds=hf.embeddings.word_embeddings(batch["input_ids"]))
    assert (got.last_hidden_state - expected.last_hidden_state)[real].abs().max() == 0.0
    assert len(got.hidden_states) == len(expected.hidden_states) == 3
    assert all(torch.equal(a[real], b[real]) for a, b in zip(got.hidden_states, expected.hidden_states, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(got.attentions, expected.attentions, strict=True))
    assert torch.equal(embeds.last_hidden_state, expected_embeds.last_hidden_state)
    torch.testing.assert_close(packed.last_hidden_state, expected.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    assert ours(
        input_ids=batch["input_ids"], token_type_ids=torch.ones_like(batch["input_ids"])
    ).last_hidden_state.shape


def test_sdpa_and_the_fp32_swap_match_transformers_sdpa(folder) -> None:
    name, path = folder
    hf = make_hf(name, attn="sdpa")
    ours = ready(DistilBertModel.from_pretrained(path, attn_implementation="sdpa"))
    layer = ours.transformer.layer[0]
    assert layer.attention.qkv is not None and layer.attention.attn_implementation == "auto"
    assert isinstance(layer.ffn.lin2, OneDNNLinear) and layer.ffn.fuses_residual and layer.attention.fuses_residual
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        padded = ours(**batch).last_hidden_state
        packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1)).last_hidden_state
        first = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1), first_token_of=torch.tensor([2, 0]))
    torch.testing.assert_close(padded[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed, expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(first.last_hidden_state, expected[[2, 0], 0], atol=1e-5, rtol=1e-5)
    ours.set_attn_implementation("eager")  # the reference again: the swap undone
    assert layer.attention.qkv is None and type(layer.ffn.lin2) is torch.nn.Linear and not layer.ffn.fuses_residual


HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
AUTO = {
    "ForMaskedLM": bertlite.AutoModelForMaskedLM,
    "ForSequenceClassification": bertlite.AutoModelForSequenceClassification,
    "ForTokenClassification": bertlite.AutoModelForTokenClassification,
    "ForQuestionAnswering": bertlite.AutoModelForQuestionAnswering,
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(name, head, tmp_path) -> None:
    hf = make_hf(name, head, num_labels=2 if head == "ForQuestionAnswering" else 3)
    hf.save_pretrained(tmp_path)
    ours = AUTO[head].from_pretrained(tmp_path, attn_implementation="eager")
    assert type(ours) is getattr(distilbert, f"DistilBert{head}")
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    labels = {
        "ForMaskedLM": {"labels": batch["input_ids"].masked_fill(~real, -100)},
        "ForSequenceClassification": {"labels": torch.tensor([0, 2, 1])},
        "ForTokenClassification": {"labels": (batch["input_ids"] % 3).masked_fill(~real, -100)},
        "ForQuestionAnswering": {"start_positions": torch.tensor([1, 2, 3]), "end_positions": torch.tensor([4, 5, 6])},
    }[head]
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
    assert torch.equal(got.loss, expected.loss)
    for field in ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",):
        theirs, mine = getattr(expected, field), getattr(got, field)
        assert (
            torch.equal(mine, theirs) if head == "ForSequenceClassification" else torch.equal(mine[real], theirs[real])
        )
    if head == "ForMaskedLM":  # the head alone, on hidden states (what SPLADE runs)
        with torch.no_grad():
            hidden = ours.distilbert(**batch).last_hidden_state
        assert torch.equal(ours._prediction_scores(hidden)[real], expected.logits[real])
        assert ours.vocab_projector.weight is ours.distilbert.embeddings.word_embeddings.weight
    ours.set_attn_implementation("sdpa")  # then readied for the CPU: sdpa, oneDNN's Linears, padded and packed
    ready(ours)
    assert head != "ForMaskedLM" or isinstance(ours.vocab_projector, OneDNNLinear)
    with torch.no_grad():
        padded, packed = ours(**batch), ours(input_ids=batch["input_ids"][real], lengths=real.sum(1))
    for field in ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",):
        theirs = getattr(expected, field)
        theirs = theirs if head == "ForSequenceClassification" else theirs[real]  # per token: the real ones
        mine = getattr(padded, field)
        torch.testing.assert_close(
            mine if head == "ForSequenceClassification" else mine[real], theirs, atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(getattr(packed, field), theirs, atol=1e-5, rtol=1e-5)


def test_saved_by_bertlite_loads_in_transformers_and_back(folder, tmp_path) -> None:
    name, path = folder
    with pytest.warns(UserWarning, match="newly initialised"):  # the head from a base model's folder
        ours = bertlite.AutoModelForMaskedLM.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "distilbert" and saved["dim"] == 32 and saved["n_layers"] == 2
    assert not {"hidden_size", "num_hidden_layers", "type_vocab_size", "layer_norm_eps"} & set(saved)
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    assert type(theirs) is transformers.DistilBertForMaskedLM
    assert theirs.config.sinusoidal_pos_embds == (name == "sinusoidal-relu")
    again = bertlite.AutoModelForMaskedLM.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    batch = padded_batch()
    with torch.no_grad():
        expected = theirs(**batch).logits
        assert torch.equal(ours(**batch).logits, expected) and torch.equal(again(**batch).logits, expected)


def test_the_config_takes_distilberts_names_and_refuses_bad_values_by_them() -> None:
    theirs = transformers.DistilBertConfig(**CONFIGS["sinusoidal-relu"], seq_classif_dropout=0.3)
    ours = bertlite.AutoModel.from_config(theirs).config  # transformers' config object, converted
    assert type(ours) is DistilBertConfig and type(bertlite.AutoConfig.for_model("distilbert")) is DistilBertConfig
    for key in (
        "dim",
        "n_layers",
        "n_heads",
        "hidden_dim",
        "activation",
        "sinusoidal_pos_embds",
        "seq_classif_dropout",
    ):
        assert getattr(ours, key) == getattr(theirs, key), key
    assert (ours.hidden_size, ours.num_hidden_layers, ours.intermediate_size) == (32, 2, 37)  # what the core reads
    defaults = DistilBertConfig()
    assert (defaults.n_layers, defaults.dim, defaults.hidden_dim, defaults.seq_classif_dropout) == (6, 768, 3072, 0.2)
    with pytest.raises(ValueError, match=r"^dim=33 is not divisible by n_heads=4$"):
        DistilBertConfig(dim=33, n_heads=4)
    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\], got 2$"):
        DistilBertConfig(dropout=2)
    with pytest.raises(ValueError, match=r"^activation='gelu_magic' is not implemented"):
        DistilBertConfig(activation="gelu_magic")
    with pytest.raises(ValueError, match=r"^qa_dropout must be a number in \[0, 1\], got -1$"):
        DistilBertConfig(qa_dropout=-1)
    legacy = DistilBertConfig.from_dict({**TINY, "tie_weights_": True, "is_decoder": False, "model_type": "distilbert"})
    assert legacy.to_dict()["tie_weights_"] is True and legacy.to_dict()["is_decoder"] is False  # written back
    assert legacy.is_decoder is False and "hidden_size" not in legacy.to_dict()
    legacy.update({"dropout": 0.3})
    assert legacy.hidden_dropout_prob == 0.3 and legacy.to_dict()["dropout"] == 0.3
    with pytest.raises(ValueError, match=r"^DistilBertForQuestionAnswering needs num_labels=2 \(start, end\), got 3$"):
        distilbert.DistilBertForQuestionAnswering(DistilBertConfig(**TINY, num_labels=3))
    with pytest.raises(ValueError, match="DistilBERT has no pooler"):
        DistilBertModel(DistilBertConfig(**TINY), add_pooling_layer=True)
    fresh = transformers.DistilBertModel(theirs).embeddings.position_embeddings.weight  # sinusoidal at init
    assert torch.equal(DistilBertModel(ours).embeddings.position_embeddings.weight, fresh)


def wordpiece_tokenizer(folder: Path) -> transformers.PreTrainedTokenizerBase:
    """transformers' DistilBertTokenizerFast on a small vocabulary, saved as transformers saves one."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *letters, "中", "文", "!", ","]
    vocab += [f"##{c}" for c in letters]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.DistilBertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    assert len(tokenizer) <= TINY["vocab_size"]
    return tokenizer


ADVERSARIAL = [
    "Café naïve, THE list!",
    "中文 字符 and 🙂 emoji",
    "a" * 130 + " supercalifragilisticexpialidocious",
    "  whitespace \t\n runs   \u00a0 here  ",
    "",
]


def test_auto_tokenizer_gives_transformers_ids_without_token_type_ids(tmp_path) -> None:
    theirs = wordpiece_tokenizer(tmp_path)
    make_hf().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"].startswith("DistilBert")
    ours = bertlite.AutoTokenizer.from_pretrained(tmp_path)
    pairs = [(ADVERSARIAL[0], ADVERSARIAL[1]), (ADVERSARIAL[2], ADVERSARIAL[3])]
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 7}):
        assert ours(ADVERSARIAL, **kwargs) == dict(theirs(ADVERSARIAL, **kwargs))
        first, second = zip(*pairs, strict=True)
        assert ours(list(first), list(second), **kwargs) == dict(theirs(list(first), list(second), **kwargs))
    assert list(ours("a list")) == ["input_ids", "attention_mask"]


@pytest.fixture(scope="module")
def sentence_transformer(tmp_path_factory) -> tuple[Path, object]:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    root = tmp_path_factory.mktemp("st")
    make_hf().save_pretrained(root / "base")
    wordpiece_tokenizer(root / "base")
    transformer = models.Transformer(str(root / "base"), max_seq_length=20)
    st = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    st.save(str(root / "st"))
    return root / "st", st


TEXTS = ["the list of items", "sort a dict by value", "json writes a new sequence", "zebra", "a " * 40, "Café 中文"]


def test_embedder_gives_sentence_transformers_vectors_padded_and_packed(sentence_transformer) -> None:
    path, st = sentence_transformer
    expected = st.encode(TEXTS, convert_to_numpy=True)
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(path, dtype="float32", unpad=unpad)
        assert type(embedder.model) is DistilBertModel and embedder.max_length == 20
        np.testing.assert_allclose(embedder.encode(TEXTS), expected, atol=1e-5, rtol=0)
    dropin = bertlite.SentenceTransformer(str(path), model_kwargs={"dtype": "float32"})  # the import swap
    np.testing.assert_allclose(dropin.encode(TEXTS), expected, atol=1e-5, rtol=0)


def test_int8_keeps_the_vectors_within_cosine_0_995(sentence_transformer) -> None:
    path, st = sentence_transformer
    expected = st.encode(TEXTS, convert_to_numpy=True)
    low = bertlite.Embedder.from_pretrained(path, dtype="int8")
    assert low.precision == "int8"
    layer = low.model.transformer.layer[0]
    assert type(layer.attention.qkv).__name__ == "Int8Linear" and type(layer.ffn.lin2).__name__ == "Int8Linear"
    assert (low.encode(TEXTS) * expected).sum(axis=1).min() >= 0.995


def test_cross_encoder_gives_sentence_transformers_scores(tmp_path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    make_hf(head="ForSequenceClassification", num_labels=1).save_pretrained(tmp_path)
    wordpiece_tokenizer(tmp_path)
    pairs = [("sort a dict", "sorted returns a new list"), ("json", "json writes a sequence"), ("a", "the " * 30)]
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=20).predict(pairs)
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=20, unpad=unpad)
        assert type(ours.model) is distilbert.DistilBertForSequenceClassification
        np.testing.assert_allclose(ours.predict(pairs), expected, atol=1e-5, rtol=0)


def test_parity_compares_a_distilbert_folder_with_transformers(folder, tmp_path) -> None:
    from bertlite.parity import check

    config_name, path = folder
    wordpiece_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (path / name).write_bytes((tmp_path / name).read_bytes())
    report = check(path, texts=["the list of items", ("sort a dict", "by value " * 20)])
    assert report.ok, report.rows
    assert len(report.rows) > 10 and report.options["max_length"] == TINY["max_position_embeddings"]
    out = tmp_path / "report.json"
    assert main(["parity", str(path), "--json", str(out)]) == 0  # the command, on the folder's built-in texts
    assert json.loads(out.read_text())["ok"]
    relu = tmp_path / "relu"  # the same weights under another activation: parity finds the feed-forward
    shutil.copytree(path, relu)
    config = json.loads((relu / "config.json").read_text())
    (relu / "config.json").write_text(
        json.dumps({**config, "activation": "gelu" if config_name != "learned" else "relu"})
    )
    report = check(relu, reference=path, texts=["the list of items"])
    assert not report.ok and report.first_divergence == "transformer.layer.0.ffn"
    assert any("the feed-forward (lin1, the activation, lin2)" in cause for cause in report.suggestions)
    make_hf(config_name, hidden_dim=40).save_pretrained(tmp_path / "other")
    with pytest.raises(bertlite.errors.ParityLoadError, match=r"another shape .*\(hidden_dim 40 vs 37\)"):
        check(path, reference=tmp_path / "other")


def test_cls_pooling_runs_the_first_token_path_and_gives_transformers_first_token(folder) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    name, path = folder
    hf = make_hf(name)
    tokenizer = Tokenizer(models.WordLevel({w: i + 4 for i, w in enumerate(WORDS)} | {"[UNK]": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    embedder = bertlite.Embedder(DistilBertModel.from_pretrained(path), tokenizer, pooling="cls")
    texts = ["the list of items", "sort a dict by value json writes", "cafe"]
    encodings = tokenizer.encode_batch(texts)
    with torch.no_grad():
        expected = [hf(input_ids=torch.tensor([e.ids])).last_hidden_state[0, 0].numpy() for e in encodings]
    np.testing.assert_allclose(embedder.encode(texts), np.stack(expected), atol=1e-5, rtol=0)


def test_int8_takes_distilberts_linear_names(folder) -> None:
    from bertlite.quant.int8 import quantize_int8

    _, path = folder
    model = quantize_int8(
        DistilBertModel.from_pretrained(path), keep_fp32=["ffn.lin2", "transformer.layer.1.attention.out_lin"]
    )
    layers = model.transformer.layer
    assert type(layers[0].ffn.lin2) is torch.nn.Linear and type(layers[1].attention.out_lin) is torch.nn.Linear
    assert type(layers[0].attention.out_lin).__name__ == "Int8Linear" and layers[0].attention.fuses_residual
    with pytest.raises(ValueError, match=r"'output.dense' not among the quantizable Linears \(attention.qkv, "):
        quantize_int8(DistilBertModel.from_pretrained(path), keep_fp32=["output.dense"])
    with pytest.raises(RuntimeError, match=r"transformer.layer.0.attention.q_lin was quantized into .*attention.qkv"):
        layers[0].attention.q_lin(torch.zeros(1, 32))


def test_training_gives_transformers_loss_and_gradients(tmp_path) -> None:
    hf = make_hf("learned", "ForMaskedLM").train()
    hf.save_pretrained(tmp_path)
    ours = bertlite.DistilBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").train()
    batch = padded_batch()
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, theirs[name].grad, atol=1e-5, rtol=1e-4, msg=name)


def test_parity_compares_a_distilbert_head_with_transformers(tmp_path) -> None:
    from bertlite.parity import check

    make_hf("sinusoidal-relu", "ForSequenceClassification", num_labels=2).save_pretrained(tmp_path)
    wordpiece_tokenizer(tmp_path)
    report = check(tmp_path, texts=["the list of items", ("sort a dict", "by value " * 20)])
    assert report.ok and report.head == "DistilBertForSequenceClassification"
    assert any(row.name == "logits" for row in report.rows)


@pytest.mark.parametrize("safe", [True, False])
def test_a_config_of_another_layer_count_is_refused_before_the_build(folder, tmp_path, safe) -> None:
    name, path = folder
    make_hf(name).save_pretrained(tmp_path, safe_serialization=safe)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layers": 3}))
    with pytest.raises(bertlite.CheckpointError, match=r"config.json has n_layers=3, but the checkpoint .* holds 2"):
        DistilBertModel.from_pretrained(tmp_path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_packed_path_runs_varlen_and_gives_transformers_states(folder) -> None:
    name, path = folder
    hf = make_hf(name)
    ours = ready(DistilBertModel.from_pretrained(path, dtype="bfloat16", device="cuda"))
    assert {layer.attention.attn_implementation for layer in ours.transformer.layer} == {"varlen"}
    assert all(layer.attention.qkv is not None for layer in ours.transformer.layer)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[real]
        packed = ours(input_ids=batch["input_ids"][real].cuda(), lengths=real.sum(1).cuda()).last_hidden_state
        padded = ours(**{k: v.cuda() for k, v in batch.items()}).last_hidden_state[real.cuda()]
    for got in (packed, padded):
        assert torch.nn.functional.cosine_similarity(got.float().cpu(), expected, dim=-1).min() >= 0.99


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_resize_position_embeddings_keeps_or_recomputes_the_table_as_transformers(name, tmp_path) -> None:
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    hf = make_hf(name, "ForSequenceClassification")
    hf.save_pretrained(tmp_path)
    ours = distilbert.DistilBertForSequenceClassification.from_pretrained(tmp_path)
    old = hf.distilbert.embeddings.position_embeddings.weight.detach().clone()
    ours.resize_position_embeddings(30)
    table = ours.get_position_embeddings().weight
    assert table.shape == (30, 32) and ours.config.max_position_embeddings == 30
    with torch.no_grad():
        assert ours(**padded_batch(30)).logits.shape == (3, 2)  # the longer inputs now run
    if name == "learned":
        assert torch.equal(table[:24], old)
        hf.resize_position_embeddings(10)  # shrinking: transformers keeps the first rows
        ours.resize_position_embeddings(10)
        assert torch.equal(ours.get_position_embeddings().weight, hf.distilbert.embeddings.position_embeddings.weight)
    else:
        assert torch.equal(table, create_sinusoidal_embeddings(30, 32, torch.empty(30, 32)))
    with pytest.raises(ValueError, match="new_num_position_embeddings must be a positive integer, got 0"):
        ours.resize_position_embeddings(0)


def test_multiple_choice_equals_transformers(tmp_path) -> None:
    hf = make_hf("sinusoidal-relu", "ForMultipleChoice")
    hf.save_pretrained(tmp_path)
    ours = bertlite.AutoModelForMultipleChoice.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(ours) is distilbert.DistilBertForMultipleChoice
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = {k: v.view(1, 3, -1) for k, v in padded_batch().items()}  # one question, three choices
    with torch.no_grad():
        expected, got = hf(**batch, labels=torch.tensor([2])), ours(**batch, labels=torch.tensor([2]))
    # Not bitwise: the one-score classifier's weight, read in place from the file at an offset that is not
    # 64-byte aligned, sends its GEMM down another kernel path than transformers' copied one (last bit).
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=1e-6)


def test_transformers_pipelines_give_the_same_answers_on_the_bertlite_heads(tmp_path) -> None:
    tokenizer = wordpiece_tokenizer(tmp_path)
    answers = {}
    for task, head in (("fill-mask", "ForMaskedLM"), ("text-classification", "ForSequenceClassification")):
        hf = make_hf("learned", head)
        hf.save_pretrained(tmp_path / head)
        ours = getattr(distilbert, f"DistilBert{head}").from_pretrained(tmp_path / head, attn_implementation="eager")
        text = "the [MASK] of items" if task == "fill-mask" else "sort a dict by value"
        answers[task] = [transformers.pipeline(task, model=m, tokenizer=tokenizer)(text) for m in (hf, ours)]
    theirs, mine = answers["fill-mask"]
    assert [a["token"] for a in mine] == [a["token"] for a in theirs]
    np.testing.assert_allclose([a["score"] for a in mine], [a["score"] for a in theirs], rtol=1e-5)
    theirs, mine = answers["text-classification"]
    assert mine[0]["label"] == theirs[0]["label"] and abs(mine[0]["score"] - theirs[0]["score"]) < 1e-6


def test_use_bertlite_runs_a_sentence_transformers_distilbert_on_bertlite(sentence_transformer) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.integrations import use_bertlite

    path, st = sentence_transformer
    expected = st.encode(TEXTS, convert_to_tensor=True)
    model = use_bertlite(SentenceTransformer(str(path), device="cpu"))
    assert type(model[0].auto_model) is DistilBertModel
    torch.testing.assert_close(model.encode(TEXTS, convert_to_tensor=True), expected, atol=1e-6, rtol=0)


def test_multi_vector_encoder_gives_sentence_transformers_token_vectors(tmp_path) -> None:
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    make_hf().save_pretrained(tmp_path / "base")
    wordpiece_tokenizer(tmp_path / "base")
    torch.manual_seed(2)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    modules = [
        Transformer(str(tmp_path / "base"), max_seq_length=20),
        dense,
        MultiVectorMask(skiplist_words=[]),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(tmp_path / "colbert"))
    texts = ["the list of items", "sort a dict by value json writes", "Café 中文", "a " * 40]
    expected = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu").encode_document(texts)
    ours = bertlite.MultiVectorEncoder.from_pretrained(tmp_path / "colbert", dtype="float32")
    assert type(ours.model) is DistilBertModel
    got = ours.encode_document(texts)
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(torch.as_tensor(g), torch.as_tensor(e), atol=1e-5, rtol=0)
