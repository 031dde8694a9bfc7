"""bertlite.AutoTokenizer against transformers' AutoTokenizer / BertTokenizerFast, output for output."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.tokenization import BatchEncoding, BertTokenizer
from tests.helpers import DAMAGED_TOKENIZERS, damaged_tokenizer_folder

EXTRA_TEXTS = [
    "Paris is the [MASK] of France.",
    "Zürich, São Paulo, Kraków; naïve café crème brûlée. ÉCOLE",
    "東京は日本の首都です。 Привет, мир!",
    "emoji 🙂 and symbols ∑ ∫ √ ≠ ≤ ≥",
    "   leading and trailing spaces\tand\ttabs   ",
    "isn't it, don't you think? I'm sure they're fine; we've seen it's ok.",
    "",
]


@pytest.fixture(scope="module")
def texts(corpus_texts) -> list[str]:
    return corpus_texts[:1000]


@pytest.fixture(scope="module")
def tokenizers(real_model_path) -> tuple[BertTokenizer, Any]:
    return bertlite.AutoTokenizer.from_pretrained(real_model_path), transformers.AutoTokenizer.from_pretrained(
        real_model_path
    )


def assert_same(ours: BatchEncoding, theirs: transformers.BatchEncoding) -> None:
    assert isinstance(ours, BatchEncoding) and isinstance(ours, dict)
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        mine = ours[key]
        if isinstance(value, (torch.Tensor, np.ndarray)):
            assert type(mine) is type(value) and mine.dtype == value.dtype, key
            assert mine.shape == value.shape and (mine == value).all(), key
        else:
            assert mine == value, key


# All 1,000 texts and 500 pairs of them go through these; the other options through a sample.
FULL_CALLS = [
    dict(),
    dict(padding=True, truncation=True, return_tensors="np"),
    dict(padding="max_length", truncation=True, max_length=48),
]
SAMPLE_CALLS = [
    dict(padding="max_length", truncation="longest_first", return_tensors="pt"),  # pads to model_max_length (512)
    dict(max_length=20),  # max_length alone truncates, as in transformers
    dict(truncation="only_first", max_length=300, padding=True),
    dict(padding="do_not_pad", truncation=False, return_attention_mask=False, return_token_type_ids=False),
    dict(padding=True, pad_to_multiple_of=8, return_special_tokens_mask=True, return_length=True),
    dict(truncation=True, max_length=24, return_offsets_mapping=True),
    dict(truncation=True, max_length=40, stride=8, return_overflowing_tokens=True, padding=True, return_tensors="pt"),
    dict(padding=True, padding_side="left", add_special_tokens=False),
]


def _id(kwargs: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in kwargs.items()) or "plain"


def compare_batches(ours: BertTokenizer, theirs: Any, texts: list[str], kwargs: dict) -> None:
    half = len(texts) // 2
    assert_same(ours(texts, **kwargs), theirs(texts, **kwargs))
    firsts, seconds = texts[:half], texts[half : 2 * half]
    assert_same(ours(firsts, seconds, **kwargs), theirs(firsts, seconds, **kwargs))


@pytest.mark.parametrize("kwargs", FULL_CALLS, ids=_id)
def test_corpus_texts_and_pairs_equal_transformers(tokenizers, texts, kwargs):
    compare_batches(*tokenizers, texts, kwargs)


def test_padding_truncation_and_return_options_equal_transformers(tokenizers, texts):
    ours, theirs = tokenizers
    for kwargs in SAMPLE_CALLS:
        compare_batches(ours, theirs, texts[:100] + EXTRA_TEXTS, kwargs)
    as_tuples = list(zip(texts[:50], texts[50:100], strict=True))  # (text, text_pair) tuples, as parity passes them
    assert_same(ours(as_tuples, truncation=True, max_length=64), theirs(as_tuples, truncation=True, max_length=64))


@pytest.mark.parametrize("kwargs", [dict(), dict(return_tensors="pt"), dict(truncation=True, max_length=8)])
def test_single_texts_and_pairs_equal_transformers(tokenizers, texts, kwargs):
    ours, theirs = tokenizers
    for text in EXTRA_TEXTS + texts[:20]:
        assert_same(ours(text, **kwargs), theirs(text, **kwargs))
        assert_same(ours(text, "a second segment", **kwargs), theirs(text, "a second segment", **kwargs))
    assert ours(EXTRA_TEXTS[0])["input_ids"].count(ours.mask_token_id) == 1  # [MASK] stays one token


def test_only_second_truncation_and_words(tokenizers, texts):
    ours, theirs = tokenizers
    questions, contexts = [t[:60] for t in texts[:200]], texts[200:400]
    kwargs = dict(truncation="only_second", max_length=128, stride=32, return_overflowing_tokens=True)
    kwargs.update(return_offsets_mapping=True, padding="max_length")
    assert_same(ours(questions, contexts, **kwargs), theirs(questions, contexts, **kwargs))
    words = [t.split()[:30] for t in texts[:200]]
    a, b = (
        ours(words, is_split_into_words=True, truncation=True),
        theirs(words, is_split_into_words=True, truncation=True),
    )
    assert_same(a, b)
    assert [a.word_ids(i) for i in range(200)] == [b.word_ids(i) for i in range(200)]
    assert a.tokens(3) == b.tokens(3) and a.sequence_ids(3) == b.sequence_ids(3)


def test_decode_equals_transformers_and_round_trips(tokenizers, texts):
    ours, theirs = tokenizers
    ids = theirs(texts + EXTRA_TEXTS)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == theirs.batch_decode(ids, skip_special_tokens=skip)
        for clean in (True, False):
            kwargs = dict(skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
            assert ours.batch_decode(ids[-107:], **kwargs) == theirs.batch_decode(ids[-107:], **kwargs)
    assert ours.decode(torch.tensor(ids[0])) == theirs.decode(ids[0])
    padded = theirs(texts[:2], padding=True)["input_ids"]
    assert ours.decode(np.array(padded)) == theirs.decode(padded)  # a batch gives a list, as there
    assert ours.decode(ids[1][3]) == theirs.decode(ids[1][3])
    # Decoding and encoding again gives the same ids, as it does for transformers.
    decoded = ours.batch_decode(ids[:300], skip_special_tokens=True)
    again = ours(decoded)["input_ids"]
    same_theirs = [x == y for x, y in zip(theirs(decoded)["input_ids"], ids, strict=False)]
    assert [x == y for x, y in zip(again, ids, strict=False)] == same_theirs and sum(same_theirs) > 280
    # transformers 5's BERT default: no clean-up beyond the WordPiece decoder's own.
    it = ours("Hello, World! It's here.")["input_ids"]
    assert ours.decode(it, skip_special_tokens=True) == "hello, world! it ' s here."
    assert ours.decode(it, skip_special_tokens=True, clean_up_tokenization_spaces=True) == "hello, world! it's here."


def test_vocabulary_and_special_tokens_equal_transformers(tokenizers, texts):
    ours, theirs = tokenizers
    for name in ("cls", "sep", "pad", "unk", "mask", "bos", "eos"):
        assert getattr(ours, f"{name}_token") == getattr(theirs, f"{name}_token")
        assert getattr(ours, f"{name}_token_id") == getattr(theirs, f"{name}_token_id")
    assert ours.all_special_tokens == theirs.all_special_tokens
    assert ours.all_special_ids == theirs.all_special_ids == [100, 102, 0, 101, 103]
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert (ours.vocab_size, len(ours), ours.model_max_length) == (theirs.vocab_size, len(theirs), 512)
    assert ours.get_vocab() == theirs.get_vocab()
    for text in texts[:100] + EXTRA_TEXTS:
        tokens = theirs.tokenize(text)
        assert ours.tokenize(text) == tokens
        assert ours.tokenize(text, "pair", add_special_tokens=True) == theirs.tokenize(
            text, "pair", add_special_tokens=True
        )
        assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
        ids = theirs(text)["input_ids"]
        assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
        assert ours.convert_ids_to_tokens(ids, skip_special_tokens=True) == theirs.convert_ids_to_tokens(
            ids, skip_special_tokens=True
        )
        assert ours.convert_tokens_to_string(tokens) == theirs.convert_tokens_to_string(tokens)
        assert ours.encode(text) == theirs.encode(text)
    assert ours.convert_tokens_to_ids("not-a-token") == theirs.convert_tokens_to_ids("not-a-token") == 100
    assert ours.convert_ids_to_tokens(7592) == theirs.convert_ids_to_tokens(7592) == "hello"


def cased_vocab(real_model_path: Path) -> list[str]:
    vocab = (real_model_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    known = set(vocab)
    return vocab + [w.capitalize() for w in vocab if w.isalpha() and w.capitalize() not in known]


@pytest.mark.parametrize("lowercase", [True, False])
def test_vocab_txt_only_equals_bert_tokenizer_fast(real_model_path, texts, tmp_path, lowercase):
    folder = tmp_path / "vocab_only"
    folder.mkdir()
    vocab = (real_model_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    if not lowercase:
        vocab = cased_vocab(real_model_path)
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
    ours = bertlite.AutoTokenizer.from_pretrained(folder)
    theirs = transformers.BertTokenizerFast.from_pretrained(folder)
    sample = texts[:300] + EXTRA_TEXTS
    kwargs = dict(padding=True, truncation=True, max_length=64, return_tensors="pt")
    assert_same(ours(sample, **kwargs), theirs(sample, **kwargs))
    assert_same(ours(sample[:150], sample[150:300], **kwargs), theirs(sample[:150], sample[150:300], **kwargs))
    ids = theirs(sample)["input_ids"]
    assert ours.batch_decode(ids, skip_special_tokens=True) == theirs.batch_decode(ids, skip_special_tokens=True)
    hello = ours("Hello World")["input_ids"][1:3]
    assert (hello == [7592, 2088]) is lowercase  # cased: the capitalized entries added above


@pytest.mark.slow
def test_save_pretrained_reloads_equal_in_transformers_and_bertlite(tokenizers, texts, tmp_path):
    ours, theirs = tokenizers
    written = ours.save_pretrained(tmp_path / "tok")
    names = sorted(Path(p).name for p in written)
    assert names == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == names  # no temporary files left
    reloaded_theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    reloaded_ours = bertlite.AutoTokenizer.from_pretrained(tmp_path / "tok")
    kwargs = dict(padding=True, truncation=True, return_tensors="pt")
    expected = theirs(texts[:200], texts[200:400], **kwargs)
    assert_same(reloaded_ours(texts[:200], texts[200:400], **kwargs), expected)
    again = reloaded_theirs(texts[:200], texts[200:400], **kwargs)
    assert list(again) == list(expected) and all(torch.equal(again[k], expected[k]) for k in expected)
    assert reloaded_theirs.model_max_length == reloaded_ours.model_max_length == 512
    assert reloaded_theirs.all_special_ids == theirs.all_special_ids
    # vocab.txt alone (what transformers 4's slow BertTokenizer reads) gives the same tokenizer.
    (tmp_path / "tok" / "tokenizer.json").unlink()
    from_vocab, expected = (
        transformers.BertTokenizerFast.from_pretrained(tmp_path / "tok"),
        theirs(texts[:200], **kwargs),
    )
    again = from_vocab(texts[:200], **kwargs)
    assert list(again) == list(expected) and all(torch.equal(again[k], expected[k]) for k in expected)


def test_batch_encoding_behaves_like_transformers(tokenizers, real_model_path):
    ours, _ = tokenizers
    enc = ours(["a first text", "and a second, longer text"], padding=True, return_tensors="pt")
    assert enc.input_ids is enc["input_ids"] and enc.input_ids.shape == (2, 8)
    assert enc.to("cpu") is enc and enc.attention_mask.device.type == "cpu"
    assert enc.tokens(1)[:3] == ["[CLS]", "and", "a"] and enc[1].ids == enc.input_ids[1].tolist()
    with pytest.raises(AttributeError, match="no attribute or key 'labels'"):
        _ = enc.labels
    clone = pickle.loads(pickle.dumps(enc))
    assert torch.equal(clone.input_ids, enc.input_ids) and clone.tokens(0) == enc.tokens(0)
    model = bertlite.AutoModel.from_pretrained(real_model_path)
    with torch.no_grad():
        assert model(**enc).last_hidden_state.shape == (2, 8, 384)


def test_bad_arguments_raise_one_line_errors(tokenizers):
    ours, _ = tokenizers
    cases = [
        (dict(padding="longest_first"), ValueError, "padding='longest_first' is not one of"),
        (dict(truncation="yes"), ValueError, "truncation='yes' is not one of"),
        (dict(return_tensors="tf"), ValueError, "return_tensors='tf' is not one of"),
        (dict(max_length="64"), ValueError, "max_length must be an integer"),
        (dict(return_tensors="pt"), ValueError, r"rows have lengths \[4, 6\]; pass padding=True"),
        (dict(truncation="only_second", max_length=3), ValueError, "only_second.*max_length=3"),
        (dict(padding=True, truncation=True, max_length=10, pad_to_multiple_of=4), ValueError, "not a multiple"),
        (dict(colour="red"), TypeError, "colour"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message) as e:
            ours(["a b", "a b c d"], **kwargs)
        assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="input 1 of the batch is int"):
        ours(["a", 3])
    with pytest.raises(ValueError, match="text has 2 inputs but text_pair has 1"):
        ours(["a", "b"], ["c"])


def test_non_bert_and_missing_tokenizers_are_refused_by_name(real_model_path, tmp_path):
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    shutil.copy(real_model_path / "vocab.txt", gpt2)
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match=r"gpt2/config.json: model_type='gpt2' is not a BERT checkpoint"):
        bertlite.AutoTokenizer.from_pretrained(gpt2)
    (gpt2 / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    with pytest.raises(ValueError, match=r"gpt2: tokenizer_config.json has tokenizer_class='GPT2Tokenizer'"):
        bertlite.AutoTokenizer.from_pretrained(gpt2)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json or vocab.txt"):
        bertlite.AutoTokenizer.from_pretrained(empty)
    with pytest.raises(TypeError, match="unexpected keyword argument.*: padding"):
        bertlite.AutoTokenizer.from_pretrained(real_model_path, padding=True)
    with pytest.raises(ValueError, match=r"tokenizer_config.json: not valid JSON"):
        (empty / "tokenizer_config.json").write_text("{")
        bertlite.AutoTokenizer.from_pretrained(empty)


def test_from_pretrained_overrides_and_hub_options(real_model_path, tmp_path):
    ours = bertlite.AutoTokenizer.from_pretrained(
        real_model_path, model_max_length=16, do_lower_case=False, use_fast=True
    )
    theirs = transformers.AutoTokenizer.from_pretrained(real_model_path, model_max_length=16, do_lower_case=False)
    assert_same(ours(EXTRA_TEXTS, truncation=True), theirs(EXTRA_TEXTS, truncation=True))
    nested = tmp_path / "repo"
    shutil.copytree(real_model_path, nested / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors"))
    sub = bertlite.AutoTokenizer.from_pretrained(nested, subfolder="tokenizer")
    assert sub("Hello")["input_ids"] == [101, 7592, 102]


def test_pad_and_data_collator_equal_transformers(tokenizers, texts):
    ours, theirs = tokenizers
    features = [dict(theirs(t, truncation=True, max_length=40), label=i % 2) for i, t in enumerate(texts[:64])]
    for kwargs in (
        dict(),
        dict(pad_to_multiple_of=8),
        dict(padding="max_length", max_length=48),
        dict(return_tensors="np"),
    ):
        got = transformers.DataCollatorWithPadding(ours, **kwargs)(features)
        assert_same(got, transformers.DataCollatorWithPadding(theirs, **kwargs)(features))
    floats = [dict(theirs(t), label=0.5) for t in texts[:4]]
    assert_same(ours.pad(floats, return_tensors="pt"), theirs.pad(floats, return_tensors="pt"))
    assert_same(ours.pad(theirs(texts[:4]), padding_side="left"), theirs.pad(theirs(texts[:4]), padding_side="left"))
    one = theirs(texts[0])
    assert_same(
        ours.pad(one, padding="max_length", max_length=60), theirs.pad(one, padding="max_length", max_length=60)
    )
    tensors = [{k: torch.tensor(v) for k, v in theirs(t).items()} for t in texts[:3]]
    assert_same(ours.pad(tensors), theirs.pad(tensors))  # tensors in, tensors out
    with pytest.raises(ValueError, match=r"pad\(\) needs input_ids among the inputs, got keys \['label'\]"):
        ours.pad([{"label": 1}])


def test_plain_fast_tokenizer_class_runs_tokenizer_json_as_transformers_does(real_model_path, texts, tmp_path):
    folder = tmp_path / "plain"
    shutil.copytree(real_model_path, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    ours, theirs = bertlite.AutoTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    compare_batches(ours, theirs, texts[:100], dict(padding=True, truncation=True, max_length=64))
    assert "token_type_ids" not in ours(texts[0])  # transformers' plain tokenizer returns none
    ids = theirs(texts[:100])["input_ids"]
    assert ours.batch_decode(ids, skip_special_tokens=True) == theirs.batch_decode(ids, skip_special_tokens=True)


def test_saved_tokenizer_keeps_no_call_settings_and_normal_modes(real_model_path, tmp_path):
    ours = BertTokenizer.from_pretrained(real_model_path)
    ours(["some text", "more"], padding="max_length", max_length=16, truncation=True)  # sets the backend
    old_umask = os.umask(0o022)
    try:
        ours.save_pretrained(tmp_path)
    finally:
        os.umask(old_umask)
    saved = json.loads((tmp_path / "tokenizer.json").read_text())
    assert saved["padding"] is None and saved["truncation"] is None
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {
        name: "0o644" for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
    }
    text = "a much longer text than sixteen tokens, " * 4
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path)(text)["input_ids"]
    assert len(reloaded) > 16 and BertTokenizer.from_pretrained(tmp_path)(text)["input_ids"] == reloaded


# --- the rest of the tokenizer surface BERT code touches (course, task guides, model cards) ------------------


def test_data_collator_for_language_modeling_equals_transformers(tokenizers, texts):
    # The masked-LM collator asks get_special_tokens_mask(ids, already_has_special_tokens=True) per row.
    ours, theirs = tokenizers
    features = [theirs(t, truncation=True, max_length=32) for t in texts[:16]]
    batches = []
    for tokenizer in (ours, theirs):
        torch.manual_seed(0)  # the collator draws which tokens to mask
        batches.append(transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3)(features))
    assert_same(*batches)
    ids = features[0]["input_ids"]
    assert ours.get_special_tokens_mask(ids, already_has_special_tokens=True) == theirs.get_special_tokens_mask(
        ids, already_has_special_tokens=True
    )
    with pytest.raises(ValueError, match="token_ids_1 cannot be given with already_has_special_tokens=True"):
        ours.get_special_tokens_mask(ids, ids, already_has_special_tokens=True)


def test_special_tokens_of_unformatted_ids_follow_the_template(tokenizers, texts):
    # transformers v5 dropped these three from its fast tokenizers (v4 code still calls them); each must give
    # what a call with add_special_tokens=True gives.
    ours, theirs = tokenizers
    for first, second in zip(texts[:20], texts[20:40], strict=True):
        a, b = (theirs(t, add_special_tokens=False)["input_ids"] for t in (first, second))
        for pair, full in (((a,), theirs(first)), ((a, b), theirs(first, second))):
            assert ours.build_inputs_with_special_tokens(*pair) == full["input_ids"]
            assert ours.create_token_type_ids_from_sequences(*pair) == full["token_type_ids"]
            mask = theirs(*(first, second)[: len(pair)], return_special_tokens_mask=True)["special_tokens_mask"]
            assert ours.get_special_tokens_mask(*pair) == mask
    assert_same(ours.encode_plus(texts[0], texts[1], truncation=True), theirs(texts[0], texts[1], truncation=True))
    assert_same(ours.batch_encode_plus(texts[:5], padding=True), theirs(texts[:5], padding=True))
    for pair in (False, True):
        assert ours.num_special_tokens_to_add(pair) == theirs.num_special_tokens_to_add(pair)
    assert (ours.max_len_single_sentence, ours.max_len_sentences_pair) == (
        theirs.max_len_single_sentence,
        theirs.max_len_sentences_pair,
    )


@pytest.mark.slow
def test_added_tokens_and_special_tokens_equal_transformers(real_model_path, texts, tmp_path):
    # New vocabulary and entity markers, then resize_token_embeddings(len(tokenizer)) as the docs show it.
    ours = bertlite.AutoTokenizer.from_pretrained(real_model_path)
    theirs = transformers.AutoTokenizer.from_pretrained(real_model_path)
    counts = []
    for tokenizer in (ours, theirs):
        counts.append(
            (
                tokenizer.add_tokens(["bertlite", "tokenizerz", "the"]),  # "the" is in the vocabulary already
                tokenizer.add_tokens([]),
                tokenizer.add_special_tokens({"additional_special_tokens": ["[E1]", "[/E1]"], "bos_token": "[BOS]"}),
                tokenizer.add_special_tokens({"extra_special_tokens": ["[E2]"]}, replace_extra_special_tokens=False),
            )
        )
    assert counts[0] == counts[1] and counts[0][2:] == (3, 1)
    assert len(ours) == len(theirs) and ours.vocab_size == theirs.vocab_size
    assert ours.get_vocab() == theirs.get_vocab() and ours.get_added_vocab() == theirs.get_added_vocab()
    assert ours.added_tokens_encoder == theirs.added_tokens_encoder
    assert {i: str(t) for i, t in ours.added_tokens_decoder.items()} == {
        i: str(t) for i, t in theirs.added_tokens_decoder.items()
    }
    for name in ("all_special_tokens", "all_special_ids", "special_tokens_map", "extra_special_tokens"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert (ours.bos_token, ours.bos_token_id) == (theirs.bos_token, theirs.bos_token_id)
    marked = ["[E1] Bertlite [/E1] was tokenizerz, said [E2] the bos [BOS]."] + texts[:50]
    assert_same(ours(marked, padding=True), theirs(marked, padding=True))
    ids = theirs(marked)["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == theirs.batch_decode(ids, skip_special_tokens=skip)
    # The added tokens survive save_pretrained for both libraries.
    ours.save_pretrained(tmp_path)
    for reloaded in (
        bertlite.AutoTokenizer.from_pretrained(tmp_path),
        transformers.AutoTokenizer.from_pretrained(tmp_path),
    ):
        assert reloaded.all_special_tokens == theirs.all_special_tokens
        assert reloaded(marked)["input_ids"] == ids
    # Then the model grows a row per new token, as transformers' does.
    models = []
    for library in (bertlite, transformers):
        model = library.BertModel.from_pretrained(real_model_path, attn_implementation="eager")
        torch.manual_seed(0)  # mean_resizing draws the new rows
        model.resize_token_embeddings(len(ours))
        models.append(model.eval())
    batch = theirs(marked[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = [model(**batch).last_hidden_state for model in models]
    assert models[0].get_input_embeddings().num_embeddings == len(theirs) == models[0].config.vocab_size
    torch.testing.assert_close(hidden[0], hidden[1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="'sep' is not a special token name"):
        ours.add_special_tokens({"sep": "[SEP2]"})


def test_batch_encoding_span_lookups_equal_transformers(tokenizers, texts):
    # What the question-answering and token-classification guides call on a tokenizer's output.
    ours, theirs = tokenizers
    question, context = "Who wrote it?", texts[3]
    a, b = ours([question], [context]), theirs([question], [context])
    assert a.is_fast == b.is_fast and a.n_sequences == b.n_sequences == 2
    for token in range(len(a["input_ids"][0])):
        assert a.token_to_word(0, token) == b.token_to_word(0, token)
        assert a.token_to_sequence(0, token) == b.token_to_sequence(0, token)
        assert a.token_to_chars(0, token) == b.token_to_chars(0, token)
    for char in range(len(context)):
        assert a.char_to_token(0, char, sequence_index=1) == b.char_to_token(0, char, sequence_index=1)
        assert a.char_to_word(0, char, sequence_index=1) == b.char_to_word(0, char, sequence_index=1)
    for word in range(5):
        assert a.word_to_tokens(0, word, sequence_index=1) == b.word_to_tokens(0, word, sequence_index=1)
        assert a.word_to_chars(0, word, sequence_index=1) == b.word_to_chars(0, word, sequence_index=1)
    assert a.char_to_token(2) == b.char_to_token(2)  # one index: row 0


def test_tokenizer_members_equal_transformers_or_name_the_alternative(tokenizers, tmp_path):
    ours, theirs = tokenizers
    assert ours.vocab == theirs.vocab and ours.SPECIAL_TOKENS_ATTRIBUTES == theirs.SPECIAL_TOKENS_ATTRIBUTES
    assert ours.clean_up_tokenization("a , b .") == theirs.clean_up_tokenization("a , b .")
    assert ours.init_kwargs["do_lower_case"] is True and ours.init_kwargs["model_max_length"] == theirs.model_max_length
    assert type(ours.decoder) is type(theirs.decoder)
    (tmp_path / "ours").mkdir()
    (ours_file,) = ours.save_vocabulary(tmp_path / "ours", "x")
    (theirs_file,) = theirs.save_vocabulary(str(tmp_path), "x")
    assert Path(ours_file).read_text() == Path(theirs_file).read_text()
    copy = bertlite.AutoTokenizer.from_pretrained(ours.name_or_path)
    copy.pad_token_id = copy.unk_token_id  # the *_id setters, as transformers has them
    assert copy.pad_token == "[UNK]"
    for name, alternative in (
        ("apply_chat_template", "BERT has no chat template"),
        ("train_new_from_iterator", "WordPieceTrainer"),
        ("prepare_for_model", "call the tokenizer"),
    ):
        with pytest.raises(AttributeError, match=f"BertTokenizer.{name} is not available in bertlite: .*{alternative}"):
            getattr(ours, name)
    with pytest.raises(AttributeError, match="'BertTokenizer' object has no attribute 'colour'"):
        ours.colour  # noqa: B018


DAMAGED_MESSAGES = {
    "truncated": "not a valid tokenizer.json (EOF while parsing",
    "empty_object": "not a valid tokenizer.json (",
    "binary": "not a valid tokenizer.json (",
    "folder": "not a file (a folder?); the tokenizer needs tokenizer.json to be a file",
    "binary_vocab": "not a valid vocab.txt (",
    "vocab_without_special_tokens": "not a valid vocab.txt (sep_token not found in the vocabulary)",
}


@pytest.mark.parametrize("damage", list(DAMAGED_TOKENIZERS))
def test_damaged_tokenizer_file_is_a_checkpoint_error_naming_it(damage, real_model_path, tmp_path):
    # Before: tokenizers' bare Exception (or a TypeError) without the file's name; a tokenizer.json folder
    # was silently skipped for vocab.txt.
    from bertlite.errors import CheckpointError
    from bertlite.tokenization import load_tokenizer

    folder = damaged_tokenizer_folder(real_model_path, tmp_path / "tok", damage)
    path = folder / DAMAGED_TOKENIZERS[damage][0]
    for load in (load_tokenizer, bertlite.AutoTokenizer.from_pretrained):
        with pytest.raises(CheckpointError) as info:
            load(folder)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and DAMAGED_MESSAGES[damage] in message
        assert "\n" not in message
