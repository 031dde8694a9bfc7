"""RoBERTa, XLM-RoBERTa and CamemBERT base models against transformers in the same run: BERT's tree with
RoBERTa's positions, padded and packed, through from_pretrained, the Auto classes and Embedder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import CamembertConfig, RobertaConfig, XLMRobertaConfig
from bertlite.jobs.prepare import ready
from bertlite.models import roberta
from bertlite.models.roberta import CamembertModel, RobertaModel, XLMRobertaModel

FAMILIES = {
    "roberta": (transformers.RobertaModel, transformers.RobertaConfig, RobertaModel, RobertaConfig),
    "xlm-roberta": (transformers.XLMRobertaModel, transformers.XLMRobertaConfig, XLMRobertaModel, XLMRobertaConfig),
    "camembert": (transformers.CamembertModel, transformers.CamembertConfig, CamembertModel, CamembertConfig),
}
# A RoBERTa checkpoint's shape: one token type, positions 0 and 1 unused (padding_idx 1), LayerNorm eps 1e-5.
TINY_ROBERTA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=42,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def make_family_model(family: str, attn: str = "eager", seed: int = 0) -> transformers.PreTrainedModel:
    hf_class, config_class, _, _ = FAMILIES[family]
    torch.manual_seed(seed)
    model = hf_class(config_class(**TINY_ROBERTA, attn_implementation=attn))
    with torch.no_grad():
        for p in model.parameters():  # far from the init, so a wrongly loaded tensor shows
            p.normal_(0.0, 0.3)
    return model.eval()


def batch_with_padding() -> dict[str, torch.Tensor]:
    """Three texts, two right-padded with RoBERTa's pad id 1 (positions must skip them)."""
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (3, 11))
    mask = torch.ones_like(ids)
    for row, length in ((1, 7), (2, 9)):
        ids[row, length:], mask[row, length:] = 1, 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_folder(request, tmp_path_factory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp(request.param)
    make_family_model(request.param).save_pretrained(folder)
    return request.param, folder


def test_the_family_loads_key_for_key_and_equals_transformers_bitwise(family_folder) -> None:
    family, folder = family_folder
    _, _, ours_class, config_class = FAMILIES[family]
    hf = make_family_model(family)
    ours = ours_class.from_pretrained(folder, attn_implementation="eager")
    assert type(ours.config) is config_class and ours.config.model_type == family
    assert list(ours.state_dict()) == list(hf.state_dict())
    batch = batch_with_padding()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch)
        padded = ours(**batch)
        packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1))
        embeds = ours(inputs_embeds=ours.embeddings.word_embeddings(batch["input_ids"][:1]))
        expected_embeds = hf(inputs_embeds=hf.embeddings.word_embeddings(batch["input_ids"][:1]))
    assert torch.equal(padded.last_hidden_state[real], expected.last_hidden_state[real])
    assert torch.equal(padded.pooler_output, expected.pooler_output)
    torch.testing.assert_close(packed.last_hidden_state, expected.last_hidden_state[real], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(packed.pooler_output, expected.pooler_output, atol=1e-6, rtol=1e-6)
    assert torch.equal(embeds.last_hidden_state, expected_embeds.last_hidden_state)


def test_a_literal_pad_token_in_a_text_takes_transformers_positions_when_packed(family_folder) -> None:
    family, folder = family_folder
    hf = make_family_model(family)
    ours = FAMILIES[family][2].from_pretrained(folder, attn_implementation="eager")
    batch = batch_with_padding()
    batch["input_ids"][0, 3] = batch["input_ids"][2, 5] = 1  # "<pad>" inside the first and third texts
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[real]
        packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1)).last_hidden_state
    torch.testing.assert_close(packed, expected, atol=1e-6, rtol=1e-6)


def test_sdpa_and_the_fast_path_match_transformers_sdpa(family_folder) -> None:
    family, folder = family_folder
    hf = make_family_model(family, attn="sdpa")
    ours = ready(FAMILIES[family][2].from_pretrained(folder, attn_implementation="sdpa"))
    batch = batch_with_padding()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[real]
        packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1)).last_hidden_state
    torch.testing.assert_close(packed, expected, atol=1e-5, rtol=1e-5)


def test_auto_classes_dispatch_on_model_type(family_folder, tmp_path) -> None:
    family, folder = family_folder
    _, hf_config_class, ours_class, config_class = FAMILIES[family]
    assert type(bertlite.AutoConfig.from_pretrained(folder)) is config_class
    assert type(bertlite.AutoModel.from_pretrained(folder)) is ours_class
    assert type(bertlite.AutoConfig.for_model(family, **TINY_ROBERTA)) is config_class
    assert type(bertlite.AutoModel.from_config(hf_config_class(**TINY_ROBERTA))) is ours_class  # transformers' config
    with pytest.raises(
        ValueError, match=rf"model_type='{family}' has its base model in bertlite \(bertlite.AutoModel\)"
    ):
        bertlite.AutoModelForCausalLM.from_pretrained(folder)  # no RoBERTa causal LM in bertlite
    with pytest.raises(ValueError, match="model_type='bert' is not a"):
        ours_class.from_pretrained(folder, config=bertlite.BertConfig(**{**TINY_ROBERTA, "type_vocab_size": 2}))


def test_saved_by_bertlite_loads_in_transformers_with_the_same_outputs(family_folder, tmp_path) -> None:
    family, folder = family_folder
    ours = FAMILIES[family][2].from_pretrained(folder, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["model_type"] == family
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    assert type(theirs) is FAMILIES[family][0]
    batch = batch_with_padding()
    with torch.no_grad():
        assert torch.equal(theirs(**batch).last_hidden_state, ours(**batch).last_hidden_state)


def unigram_tokenizer(folder: Path) -> None:
    """A small SentencePiece-style unigram tokenizer with XLM-RoBERTa's special tokens, saved as transformers
    saves one (tokenizer.json and its config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    words = "the a of to in is list sort dict value returns new items json writes sequence mutable key".split()
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = [(t, 0.0) for t in specials] + [(f"▁{w}", -2.0) for w in words]
    pieces += [(f"▁{c}", -6.0) for c in letters] + [(c, -8.0) for c in letters] + [("▁", -9.0), ("<mask>", 0.0)]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=3))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    fast.save_pretrained(folder)
    assert len(fast) <= TINY_ROBERTA["vocab_size"]


def test_embedder_on_an_xlm_roberta_sentence_transformer_gives_its_vectors(tmp_path) -> None:
    from sentence_transformers import SentenceTransformer, models

    base = tmp_path / "xlmr"
    model = make_family_model("xlm-roberta")
    with torch.no_grad():  # LayerNorms around 1: the texts' vectors differ (cosines down to 0.44), so rounding shows
        for name, p in model.named_parameters():
            p.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.1)
    model.save_pretrained(base)
    unigram_tokenizer(base)
    transformer = models.Transformer(str(base), max_seq_length=24)
    st = SentenceTransformer(modules=[transformer, models.Pooling(32, "mean"), models.Normalize()], device="cpu")
    st.save(str(tmp_path / "st"))
    texts = ["the list of items", "sort a dict by value", "json writes a new sequence", "zebra", "a " * 40]
    expected = st.encode(texts, convert_to_numpy=True)
    embedder = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype="float32")
    assert type(embedder.model) is XLMRobertaModel and embedder.max_length == 24
    np.testing.assert_allclose(embedder.encode(texts), expected, atol=1e-5, rtol=0)
    for dtype in ("int8", "bfloat16"):  # int8 calibrates on long texts: padded with the pad id, cut to 40
        low = bertlite.Embedder.from_pretrained(tmp_path / "st", dtype=dtype)
        assert low.precision == dtype
        assert (low.encode(texts) * expected).sum(axis=1).min() >= 0.995
    assert (expected @ expected.T).min() < 0.9  # the vectors differ, so the bar above can fail


HEADS = ("ForSequenceClassification", "ForMaskedLM", "ForTokenClassification", "ForQuestionAnswering")
PREFIXES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(family, head, tmp_path) -> None:
    name = PREFIXES[family] + head
    config_class = FAMILIES[family][1]
    torch.manual_seed(0)
    labels = 2 if head == "ForQuestionAnswering" else 3
    hf = getattr(transformers, name)(config_class(**TINY_ROBERTA, num_labels=labels, attn_implementation="eager"))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    hf.eval().save_pretrained(tmp_path)
    ours = getattr(roberta, name).from_pretrained(tmp_path, attn_implementation="eager")
    auto = {
        "ForSequenceClassification": bertlite.AutoModelForSequenceClassification,
        "ForMaskedLM": bertlite.AutoModelForMaskedLM,
        "ForTokenClassification": bertlite.AutoModelForTokenClassification,
        "ForQuestionAnswering": bertlite.AutoModelForQuestionAnswering,
    }[head]
    assert type(auto.from_pretrained(tmp_path)) is type(ours)
    assert sorted(ours.state_dict()) == sorted(hf.state_dict())
    batch = batch_with_padding()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected, got = hf(**batch), ours(**batch)
    fields = ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",)
    for field in fields:
        theirs, mine = getattr(expected, field), getattr(got, field)
        if head == "ForSequenceClassification":
            assert torch.equal(mine, theirs)
        else:
            assert torch.equal(mine[real], theirs[real])
    if head == "ForSequenceClassification":  # the first token of a packed batch too
        with torch.no_grad():
            packed = ours(input_ids=batch["input_ids"][real], lengths=real.sum(1)).logits
        torch.testing.assert_close(packed, expected.logits, atol=1e-6, rtol=1e-6)


def test_cross_encoder_on_an_xlm_roberta_reranker_gives_sentence_transformers_scores(tmp_path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    torch.manual_seed(0)
    config = transformers.XLMRobertaConfig(**TINY_ROBERTA, num_labels=1)
    model = transformers.XLMRobertaForSequenceClassification(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.save_pretrained(tmp_path / "reranker")
    unigram_tokenizer(tmp_path / "reranker")
    pairs = [("sort a dict", "sorted returns a new list"), ("json", "json writes a sequence"), ("a", "the " * 30)]
    expected = STCrossEncoder(str(tmp_path / "reranker"), device="cpu", max_length=32).predict(pairs)
    ours = bertlite.CrossEncoder.from_pretrained(tmp_path / "reranker", dtype="float32", max_length=32)
    assert type(ours.model) is roberta.XLMRobertaForSequenceClassification
    np.testing.assert_allclose(ours.predict(pairs), expected, atol=1e-6, rtol=0)
    padded = bertlite.CrossEncoder.from_pretrained(tmp_path / "reranker", dtype="float32", max_length=32, unpad=False)
    np.testing.assert_allclose(padded.predict(pairs), expected, atol=1e-6, rtol=0)


def test_parity_compares_a_family_checkpoint_with_transformers(family_folder, tmp_path) -> None:
    from bertlite.parity import check

    family, folder = family_folder
    unigram_tokenizer(tmp_path / "tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tmp_path / "tokenizer" / name).read_bytes())
    report = check(folder, texts=["the list of items", "sort a dict by value " * 20])
    assert report.ok and len(report.rows) > 20
    # positions start at pad_token_id + 1: 42 rows hold 40 tokens, and the texts are cut there
    assert report.options["max_length"] == TINY_ROBERTA["max_position_embeddings"] - 2


def test_jobs_take_at_most_the_tokens_the_position_table_holds(family_folder) -> None:
    family, folder = family_folder
    model = FAMILIES[family][2].from_pretrained(folder)
    assert model.config.max_sequence_length == TINY_ROBERTA["max_position_embeddings"] - 2
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"<pad>": 1, "<unk>": 3, "w": 5}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    embedder = bertlite.Embedder(model, tokenizer, max_length=None)
    assert embedder.max_length == 40
    vectors = embedder.encode(["w " * 100])  # truncated to 40 tokens, the last position the table has
    assert vectors.shape == (1, 32) and np.isfinite(vectors).all()


@pytest.mark.parametrize("tokenizer_class", ["XLMRobertaTokenizer", None])
def test_auto_tokenizer_runs_the_familys_tokenizer_json_as_transformers(tmp_path, tokenizer_class) -> None:
    unigram_tokenizer(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class")
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertlite.AutoTokenizer.from_pretrained(tmp_path)
    texts = ["the list of items", "sort a dict by its value", "zebra"]
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 5}):
        assert ours(texts, **kwargs) == dict(theirs(texts, **kwargs))
    assert ours(texts[0], texts[1]) == dict(theirs(texts[0], texts[1]))
    expected = theirs(texts, padding=True, return_tensors="pt")
    got = ours(texts, padding=True, return_tensors="pt")
    assert list(got) == list(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
    ids = theirs(texts[1])["input_ids"]
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def test_a_sequence_past_the_position_table_is_refused_by_name(family_folder) -> None:
    family, folder = family_folder
    model = FAMILIES[family][2].from_pretrained(folder)
    with pytest.raises(ValueError, match=r"sequence length 41 exceeds max_position_embeddings=42 \(40 tokens\)"):
        model(input_ids=torch.full((1, 41), 5))
    assert model(input_ids=torch.full((1, 40), 5)).last_hidden_state.shape == (1, 40, 32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_family_model_on_cuda_runs_varlen_with_its_positions(family_folder) -> None:
    family, folder = family_folder
    hf = make_family_model(family)
    ours = ready(FAMILIES[family][2].from_pretrained(folder, dtype="bfloat16", device="cuda"))
    assert {layer.attention.self.attn_implementation for layer in ours.encoder.layer} == {"varlen"}
    batch = batch_with_padding()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[real]
        packed = ours(input_ids=batch["input_ids"][real].cuda(), lengths=real.sum(1).cuda()).last_hidden_state
    cosine = torch.nn.functional.cosine_similarity(packed.float().cpu(), expected, dim=-1)
    assert cosine.min() >= 0.99


ADVERSARIAL = [
    "naïve café, Größe, ÉCOLE",
    "日本語のテキストと中文",
    "emoji 🙂👍🏽 and ∑ math ≠ ≤",
    "a" * 300,
    "spaces   and\t\ttabs\n\nnewlines",
    "  leading and trailing  ",
    "",
]


def byte_level_bpe_tokenizer(folder: Path) -> None:
    """A small byte-level BPE tokenizer with RoBERTa's special tokens and pair template, saved as transformers
    saves RoBERTa's (tokenizer_class RobertaTokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(["the list of items", "sort a dict by value", "naïve café Größe"] * 20, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(
        ("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>"))
    )
    named = dict(bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>", unk_token="<unk>")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", mask_token="<mask>", **named
    )
    fast.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "RobertaTokenizer"}))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_familys_tokenizer_gives_transformers_ids_on_adversarial_text(family, tmp_path) -> None:
    # RoBERTa's byte-level BPE, XLM-RoBERTa's and CamemBERT's SentencePiece-style unigram.
    (byte_level_bpe_tokenizer if family == "roberta" else unigram_tokenizer)(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": family}))
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertlite.AutoTokenizer.from_pretrained(tmp_path)
    for text in ADVERSARIAL:
        assert ours(text)["input_ids"] == theirs(text)["input_ids"], text
    for first, second in zip(ADVERSARIAL, ADVERSARIAL[1:], strict=False):
        assert ours(first, second) == dict(theirs(first, second)), (first, second)
    kwargs = {"padding": True, "truncation": True, "max_length": 12}
    assert ours(ADVERSARIAL, **kwargs) == dict(theirs(ADVERSARIAL, **kwargs))
