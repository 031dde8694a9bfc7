"""ELECTRA against transformers and sentence-transformers in the same run: BERT's tree with narrower
embeddings and their projection, padded and packed, every head, the Auto classes, saving both ways, the
tokenizer, Embedder, CrossEncoder, `bertlite rerank`, `bertlite parity` and int8."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import ElectraConfig
from bertlite.jobs.prepare import ready
from bertlite.models import electra
from bertlite.models.electra import ElectraModel

# Two shapes: embeddings narrower than the layers (embeddings_project), as ELECTRA-small's generator and
# discriminator have, and as wide (no projection), as ELECTRA-base's discriminator.
TINY_ELECTRA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=24,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
EMBEDDING_SIZES = {"projected": 16, "square": 32}
REAL_VOCAB = 30522  # the uncased WordPiece vocabulary ELECTRA's checkpoints share with BERT's
HEADS = (
    "ForSequenceClassification",
    "ForMaskedLM",
    "ForPreTraining",
    "ForTokenClassification",
    "ForQuestionAnswering",
)


def hf_config(shape: str, attn: str = "eager", **overrides) -> transformers.ElectraConfig:
    values = {**TINY_ELECTRA, "embedding_size": EMBEDDING_SIZES[shape], **overrides}
    return transformers.ElectraConfig(**values, attn_implementation=attn)


def make_hf(name: str, shape: str, attn: str = "eager", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    model = getattr(transformers, "Electra" + name)(hf_config(shape, attn, **overrides))
    with torch.no_grad():
        for p in model.parameters():  # far from the init, so a wrongly loaded tensor shows
            p.normal_(0.0, 0.3)
    return model.eval()


def pair_batch() -> dict[str, torch.Tensor]:
    """Three sequences: one as long as the position table (24), a pair (token types 0 then 1) padded to it,
    and a short one with more padding."""
    torch.manual_seed(1)
    ids = torch.randint(1, 99, (3, 24))
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    types[1, 6:13] = 1
    for row, length in ((1, 13), (2, 9)):
        ids[row, length:], mask[row, length:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def packed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    real = batch["attention_mask"].bool()
    return {
        "input_ids": batch["input_ids"][real],
        "token_type_ids": batch["token_type_ids"][real],
        "lengths": real.sum(1),
    }


@pytest.fixture(scope="module", params=sorted(EMBEDDING_SIZES))
def base_folder(request, tmp_path_factory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp(f"electra-{request.param}")
    make_hf("Model", request.param).save_pretrained(folder)
    return request.param, folder


def test_electra_model_loads_key_for_key_and_equals_transformers_bitwise(base_folder) -> None:
    shape, folder = base_folder
    hf = make_hf("Model", shape)
    ours = ElectraModel.from_pretrained(folder, attn_implementation="eager")
    assert type(ours.config) is ElectraConfig and ours.config.embedding_size == EMBEDDING_SIZES[shape]
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert ("embeddings_project.weight" in ours.state_dict()) == (shape == "projected")
    assert ours.pooler is None
    batch = pair_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch, output_hidden_states=True)
        got = ours(**batch, output_hidden_states=True)
        embeds = ours.embeddings.word_embeddings(batch["input_ids"][:1])
        expected_embeds = hf(inputs_embeds=embeds).last_hidden_state
        got_embeds = ours(inputs_embeds=embeds).last_hidden_state
    assert (got.last_hidden_state[real] - expected.last_hidden_state[real]).abs().max() == 0.0
    assert got.pooler_output is None
    assert len(got.hidden_states) == len(expected.hidden_states) == 3
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):  # [0]: after the projection
        assert torch.equal(mine[real], theirs[real])
    assert torch.equal(got_embeds, expected_embeds)


def test_sdpa_the_packed_path_and_the_fast_modules_match_transformers(base_folder) -> None:
    shape, folder = base_folder
    hf = make_hf("Model", shape, attn="sdpa")
    batch = pair_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[real]
        for attn in ("eager", "sdpa"):
            ours = ElectraModel.from_pretrained(folder, attn_implementation=attn)
            padded = ours(**batch).last_hidden_state[real]
            torch.testing.assert_close(padded, expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected, atol=1e-5, rtol=1e-5)
        fast = ready(ElectraModel.from_pretrained(folder, attn_implementation="sdpa"))  # the fp32 swap
        assert fast.encoder.layer[0].attention.self.qkv is not None
        torch.testing.assert_close(fast(**packed(batch)).last_hidden_state, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fast(**batch).last_hidden_state[real], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", sorted(EMBEDDING_SIZES))
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(head, shape, tmp_path) -> None:
    labels = {"ForQuestionAnswering": 2, "ForSequenceClassification": 3, "ForTokenClassification": 4}.get(head, 2)
    hf = make_hf(head, shape, num_labels=labels)
    hf.save_pretrained(tmp_path)
    ours = getattr(electra, "Electra" + head).from_pretrained(tmp_path, attn_implementation="eager")
    auto = getattr(bertlite, "AutoModel" + head)
    assert type(auto.from_pretrained(tmp_path)) is type(ours)
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = pair_batch()
    real = batch["attention_mask"].bool()
    targets = {
        "ForSequenceClassification": {"labels": torch.tensor([0, 2, 1])},
        "ForMaskedLM": {"labels": batch["input_ids"].masked_fill(~real, -100)},
        "ForPreTraining": {"labels": (batch["input_ids"] % 2)},
        "ForTokenClassification": {"labels": (batch["input_ids"] % 4).masked_fill(~real, -100)},
        "ForQuestionAnswering": {"start_positions": torch.tensor([1, 3, 2]), "end_positions": torch.tensor([4, 9, 5])},
    }[head]
    with torch.no_grad():
        expected, got = hf(**batch, **targets), ours(**batch, **targets)
    assert torch.equal(got.loss, expected.loss)
    fields = ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",)
    for field in fields:
        theirs, mine = getattr(expected, field), getattr(got, field)
        if head == "ForSequenceClassification":
            assert torch.equal(mine, theirs)
        else:
            assert torch.equal(mine[real], theirs[real])
    if head in ("ForSequenceClassification", "ForPreTraining"):  # a packed batch: first tokens, every token
        with torch.no_grad():
            logits = ours(**packed(batch)).logits
        theirs = expected.logits if head == "ForSequenceClassification" else expected.logits[real]
        torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMaskedLM", "Model"])
def test_a_head_from_the_discriminators_checkpoint_reports_what_transformers_reports(head, tmp_path) -> None:
    make_hf("ForPreTraining", "projected").save_pretrained(tmp_path)
    with pytest.warns(UserWarning) if head != "Model" else contextlib.nullcontext():
        _, ours = getattr(electra, "Electra" + head).from_pretrained(tmp_path, output_loading_info=True)
    _, theirs = getattr(transformers, "Electra" + head).from_pretrained(tmp_path, output_loading_info=True)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert sorted(ours[key]) == sorted(theirs[key]), key


@pytest.mark.parametrize(
    "summary",
    [
        {},  # ELECTRA's defaults: the first token, projected, GELU
        {"summary_type": "mean", "summary_activation": "tanh"},
        {"summary_type": "last", "summary_use_proj": False, "summary_activation": ""},
        {"summary_type": "cls_index"},
    ],
    ids=["first", "mean", "last", "cls_index"],
)
def test_multiple_choice_summarizes_each_choice_as_transformers(summary, tmp_path) -> None:
    make_hf("ForMultipleChoice", "projected", **summary).save_pretrained(tmp_path)
    # the reference as its users load it: a weight read from the file can take another GEMV path than a new one
    hf = transformers.ElectraForMultipleChoice.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ours = bertlite.AutoModelForMultipleChoice.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(ours) is electra.ElectraForMultipleChoice
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = {k: torch.stack([v, v.flip(0)]) for k, v in pair_batch().items()}  # 2 questions, 3 choices each
    labels = torch.tensor([0, 2])
    with torch.no_grad():
        expected, got = hf(**batch, labels=labels), ours(**batch, labels=labels)
    assert got.logits.shape == (2, 3)
    assert torch.equal(got.logits, expected.logits) and torch.equal(got.loss, expected.loss)


def test_training_gives_transformers_gradients(tmp_path) -> None:
    hf = make_hf("ForSequenceClassification", "projected", num_labels=3)
    hf.save_pretrained(tmp_path)
    ours = electra.ElectraForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    batch, labels = pair_batch(), torch.tensor([0, 2, 1])
    for model in (hf, ours):
        model.train()
        model(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=1e-5, rtol=1e-5, msg=name)
    assert ours.electra.embeddings_project.weight.grad.abs().sum() > 0


def test_the_generator_head_is_tied_to_the_word_embeddings_and_saves_both_ways(tmp_path) -> None:
    hf = make_hf("ForMaskedLM", "projected")
    hf.save_pretrained(tmp_path / "theirs")
    ours = electra.ElectraForMaskedLM.from_pretrained(tmp_path / "theirs", attn_implementation="eager")
    assert ours.generator_lm_head.weight is ours.electra.embeddings.word_embeddings.weight
    ours.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["model_type"] == "electra" and config["architectures"] == ["ElectraForMaskedLM"]
    assert config["embedding_size"] == 16 and config["summary_type"] == "first"
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    assert type(theirs) is transformers.ElectraForMaskedLM
    batch = pair_batch()
    with torch.no_grad():
        assert torch.equal(theirs(**batch).logits, ours(**batch).logits)
    theirs.save_pretrained(tmp_path / "again")
    again = bertlite.AutoModelForMaskedLM.from_pretrained(tmp_path / "again", attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(again(**batch).logits, ours(**batch).logits)


def test_an_electra_model_saved_by_bertlite_loads_in_transformers(base_folder, tmp_path) -> None:
    shape, folder = base_folder
    ours = ElectraModel.from_pretrained(folder, attn_implementation="eager")
    ours.save_pretrained(tmp_path)
    theirs = transformers.AutoModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert type(theirs) is transformers.ElectraModel and theirs.config.embedding_size == EMBEDDING_SIZES[shape]
    batch = pair_batch()
    with torch.no_grad():
        assert torch.equal(theirs(**batch).last_hidden_state, ours(**batch).last_hidden_state)


def test_auto_classes_and_the_config_follow_model_type(base_folder) -> None:
    shape, folder = base_folder
    assert type(bertlite.AutoConfig.from_pretrained(folder)) is ElectraConfig
    assert type(bertlite.AutoModel.from_pretrained(folder)) is ElectraModel
    assert type(bertlite.AutoModel.from_config(hf_config(shape))) is ElectraModel  # transformers' config
    assert bertlite.ElectraForPreTraining is electra.ElectraForPreTraining and bertlite.ElectraConfig is ElectraConfig
    theirs, ours = transformers.ElectraConfig().to_dict(), ElectraConfig().to_dict()
    assert {k: ours[k] for k in ours if k in theirs} == {k: theirs[k] for k in ours if k in theirs}
    assert set(k for k in theirs if k.startswith("summary_")) <= set(ours)
    with pytest.raises(ValueError, match="embedding_size must be a positive integer, got 0"):
        ElectraConfig(embedding_size=0)
    with pytest.raises(ValueError, match=rf"inputs_embeds must have shape .*embedding_size={EMBEDDING_SIZES[shape]}\)"):
        ElectraModel.from_pretrained(folder)(inputs_embeds=torch.zeros(1, 3, 7))
    bert = bertlite.BertModel(bertlite.BertConfig.from_dict({**TINY_ELECTRA, "embedding_size": 7}))  # a stray key
    assert bert(inputs_embeds=torch.zeros(1, 3, 32)).last_hidden_state.shape == (1, 3, 32)
    model = ElectraModel.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"sequence length 25 exceeds max_position_embeddings=24; truncate"):
        model(input_ids=torch.full((1, 25), 5))
    with pytest.raises(ValueError, match=r"sequence length 25 exceeds max_position_embeddings=24; truncate"):
        model(input_ids=torch.full((25,), 5), lengths=torch.tensor([25]))
    with pytest.raises(ValueError, match="ElectraModel has no pooler"):
        ElectraModel(ElectraConfig(**TINY_ELECTRA), add_pooling_layer=True)
    with pytest.raises(ValueError, match=r"model_type='electra' has its base model in bertlite"):
        bertlite.AutoModelForCausalLM.from_pretrained(folder)


def electra_tokenizer(real_model_path: Path, folder: Path, tokenizer_class: str | None = "ElectraTokenizerFast"):
    """BERT's uncased WordPiece files, as ELECTRA's checkpoints ship them, with tokenizer_config.json's
    tokenizer_class set to ELECTRA's (or left out) and config.json's model_type "electra"."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(real_model_path / name, folder / name)
    config = json.loads((real_model_path / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class")
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if not (folder / "config.json").exists():
        (folder / "config.json").write_text(json.dumps({"model_type": "electra"}))


TEXTS = [
    "Héllo Wörld, naïve café!",
    "日本語のテキストと中文字符",
    "emoji 😀🎉 and ✓ marks",
    "supercalifragilisticexpialidociousness" * 3,
    "   whitespace\t\truns \n\n and  gaps   ",
    "UPPER lower MiXeD",
]


@pytest.mark.parametrize(
    ("tokenizer_class", "settings"),
    [
        ("ElectraTokenizerFast", {}),
        ("ElectraTokenizer", {"do_lower_case": False}),
        (None, {}),
        (None, {"do_lower_case": False}),
        ("ElectraTokenizerFast", {"strip_accents": False, "tokenize_chinese_chars": False}),
    ],
)
def test_auto_tokenizer_builds_berts_pipeline_as_transformers(real_model_path, tmp_path, tokenizer_class, settings):
    electra_tokenizer(real_model_path, tmp_path, tokenizer_class)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    # tokenizer.json lowercases, strips accents and splits CJK; transformers' ELECTRA tokenizer (BertTokenizer)
    # follows tokenizer_config.json's settings instead
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, **settings}))
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertlite.AutoTokenizer.from_pretrained(tmp_path)
    assert type(theirs).__name__ == "BertTokenizer"
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 7}):
        assert ours(TEXTS, **kwargs) == dict(theirs(TEXTS, **kwargs))
    for first, second in zip(TEXTS, TEXTS[1:], strict=False):
        assert ours(first, second) == dict(theirs(first, second))
    ids = theirs(TEXTS[0])["input_ids"]
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def real_vocab_folder(real_model_path: Path, folder: Path, head: str, **overrides) -> Path:
    """A random transformers ELECTRA model over the real uncased vocabulary, with its tokenizer."""
    make_hf(head, "projected", vocab_size=REAL_VOCAB, max_position_embeddings=40, **overrides).save_pretrained(folder)
    electra_tokenizer(real_model_path, folder)
    return folder


def test_embedder_on_an_electra_sentence_transformer_gives_its_vectors(real_model_path, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer, models

    base = real_vocab_folder(real_model_path, tmp_path / "electra", "Model")
    transformer = models.Transformer(str(base), max_seq_length=40)
    st = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    st.save(str(tmp_path / "st"))
    texts = [*TEXTS, "the list of items", "sort a dict by value", "word " * 60]
    expected = st.encode(texts, convert_to_numpy=True)
    embedder = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype="float32")
    assert type(embedder.model) is ElectraModel and embedder.max_length == 40
    np.testing.assert_allclose(embedder.encode(texts), expected, atol=1e-5, rtol=0)
    padded = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype="float32", unpad=False)
    np.testing.assert_allclose(padded.encode(texts), expected, atol=1e-5, rtol=0)
    drop_in = bertlite.SentenceTransformer(str(tmp_path / "st"), device="cpu", model_kwargs={"dtype": "float32"})
    np.testing.assert_allclose(drop_in.encode(texts), expected, atol=1e-5, rtol=0)
    int8 = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype="int8")
    assert int8.precision == "int8"
    assert (int8.encode(texts) * expected).sum(axis=1).min() >= 0.995


PAIRS_QUERY = "what is a list"
DOCS = ["A list is a mutable sequence.", "Tuples are immutable.", "naïve café ✓ 日本語", "dictionaries " * 50, "x"]


@pytest.fixture(scope="module")
def reranker(real_model_path, tmp_path_factory) -> Path:
    """An ElectraForSequenceClassification with one label, saved by sentence-transformers' CrossEncoder
    (the ms-marco-electra-base cross-encoders' form)."""
    from sentence_transformers import CrossEncoder as STCrossEncoder

    root = tmp_path_factory.mktemp("electra-reranker")
    raw = real_vocab_folder(real_model_path, root / "raw", "ForSequenceClassification", num_labels=1)
    STCrossEncoder(str(raw), device="cpu", max_length=40).save_pretrained(str(root / "st"))
    return root / "st"


def test_cross_encoder_on_an_electra_reranker_gives_sentence_transformers_scores(reranker) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    pairs = [(PAIRS_QUERY, doc) for doc in DOCS]
    expected = STCrossEncoder(str(reranker), device="cpu").predict(pairs)
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(reranker, dtype="float32", unpad=unpad)
        assert type(ours.model) is electra.ElectraForSequenceClassification and ours.max_length == 40
        scores = ours.predict(pairs)
        np.testing.assert_allclose(scores, expected, atol=1e-6, rtol=0)
        assert list(np.argsort(-scores)) == list(np.argsort(-expected))
    ranked = bertlite.CrossEncoder.from_pretrained(reranker, dtype="float32").rank(PAIRS_QUERY, DOCS)
    assert [r["corpus_id"] for r in ranked] == list(np.argsort(-expected))


def test_serve_and_embed_read_an_electra_folders_kind(reranker, real_model_path, tmp_path) -> None:
    from bertlite.jobs.kinds import detect_kind

    assert detect_kind(reranker) == detect_kind(reranker.parent / "raw") == "cross-encoder"
    assert detect_kind(real_vocab_folder(real_model_path, tmp_path / "base", "Model")) == "embedding"


def test_rerank_command_scores_an_electra_reranker(reranker, tmp_path, capsys) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    from bertlite.cli import main

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    out = tmp_path / "scores.jsonl"
    argv = ["rerank", str(reranker), "--query", PAIRS_QUERY, "-i", str(docs), "-o", str(out), "--dtype", "float32"]
    assert main(argv) == 0, capsys.readouterr().err
    got = [json.loads(line)["score"] for line in out.read_text().splitlines()]
    expected = STCrossEncoder(str(reranker), device="cpu").predict([(PAIRS_QUERY, d) for d in DOCS])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_parity_compares_an_electra_checkpoint_with_transformers(real_model_path, tmp_path) -> None:
    from bertlite.parity import check

    folder = real_vocab_folder(real_model_path, tmp_path / "electra", "Model")
    report = check(folder, texts=["the list of items", "naïve café ✓ 日本語", "sort a dict by value " * 20])
    assert report.ok and len(report.rows) > 10
    assert report.options["max_length"] == 40


@pytest.mark.parametrize(
    ("head", "logits"), [("ForSequenceClassification", ["logits"]), ("ForPreTraining", ["logits"])]
)
def test_parity_compares_an_electra_heads_logits_with_transformers(real_model_path, tmp_path, head, logits) -> None:
    from bertlite.parity import check

    folder = real_vocab_folder(real_model_path, tmp_path / "electra", head, num_labels=2)
    report = check(folder, texts=["the list of items", ("naïve café ✓ 日本語", "a pair"), "sort a dict " * 30])
    assert report.ok and report.head == "Electra" + head, report.format_table()
    assert [r.name for r in report.rows if r.kind == "logits"] == logits
    head_weights = ("classifier.", "discriminator_predictions.")
    assert any(r.kind == "weight" and r.name.startswith(head_weights) for r in report.rows)


def test_sparse_encoder_on_an_electra_generator_gives_sentence_transformers_vectors(real_model_path, tmp_path) -> None:
    from sentence_transformers import SparseEncoder as STSparseEncoder

    from tests.helpers import splade_folder

    base = real_vocab_folder(real_model_path, tmp_path / "generator", "ForMaskedLM")
    folder = splade_folder(base, tmp_path / "splade", max_seq_length=40)
    expected = STSparseEncoder(str(folder), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    ours = bertlite.SparseEncoder.from_pretrained(folder, dtype="float32")
    assert type(ours.model) is electra.ElectraForMaskedLM
    got = ours.encode(TEXTS, convert_to_tensor=True).to_dense()
    assert torch.equal(got != 0, expected != 0)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", sorted(EMBEDDING_SIZES))
def test_electra_on_cuda_runs_varlen_after_its_projection(shape, tmp_path) -> None:
    hf = make_hf("ForSequenceClassification", shape, num_labels=3)
    hf.save_pretrained(tmp_path)
    ours = ready(electra.ElectraForSequenceClassification.from_pretrained(tmp_path, dtype="bfloat16", device="cuda"))
    assert {layer.attention.self.attn_implementation for layer in ours.electra.encoder.layer} == {"varlen"}
    theirs = make_hf("ForSequenceClassification", shape, attn="sdpa", num_labels=3).to("cuda", torch.bfloat16)
    batch = pair_batch()
    real = batch["attention_mask"].bool()
    on_cuda = {k: v.cuda() for k, v in packed(batch).items()}
    with torch.no_grad():
        expected = hf.electra(**batch).last_hidden_state[real]
        hidden = ours.electra(**on_cuda).last_hidden_state.float().cpu()
        logits = ours(**on_cuda).logits.float().cpu()
        their_logits = theirs(**{k: v.cuda() for k, v in batch.items()}).logits.float().cpu()
        reference = hf(**batch).logits
    assert torch.nn.functional.cosine_similarity(hidden, expected, dim=-1).min() >= 0.99
    # bfloat16: our error within a small multiple of transformers' own on this GPU
    assert (logits - reference).abs().max() <= 4 * (their_logits - reference).abs().max() + 1e-3


@pytest.mark.parametrize(
    ("head", "task", "text"),
    [
        ("ForSequenceClassification", "text-classification", "a fine day"),
        ("ForMaskedLM", "fill-mask", "the weather is [MASK] today"),
        ("ForTokenClassification", "token-classification", "paris is in france"),
    ],
)
def test_transformers_pipelines_run_the_electra_heads_as_their_own(real_model_path, tmp_path, head, task, text):
    folder = real_vocab_folder(real_model_path, tmp_path / "electra", head, num_labels=3)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    models = (getattr(lib, "AutoModel" + head) for lib in (transformers, bertlite))
    theirs, ours = (
        transformers.pipeline(
            task, model=auto.from_pretrained(folder, attn_implementation="eager"), tokenizer=tokenizer
        )
        for auto in models
    )
    assert type(ours.model) is getattr(electra, "Electra" + head)
    assert ours(text) == theirs(text)
