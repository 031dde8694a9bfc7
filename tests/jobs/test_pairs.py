"""Pairs of one query built from each side's ids (bertlite.jobs.pairs): the ids, type ids and
truncation flag the `tokenizers` library gives each pair tokenized whole, on adversarial pairs
(empty, unicode, added tokens, a long run without a word boundary, texts longer than the cutter's
piece, both sides long), for every truncation strategy, both directions, odd and even budgets, and
other post-processors; and CrossEncoder.tokenize_pairs against CrossEncoder.tokenize."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, processors

from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.long_texts import TextCutter
from bertlite.jobs.pairs import QueryPairs, kept_lengths
from tests.helpers import cross_encoder_folder

WORDS = ["word", "naïve", "café", "日本語", "✓", "e\u0301", "🙂", "[MASK]", ",", "  ", "\n", "x" * 150, "Ünïcödé"]


def mixed(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


SHORT = ["", "a", "naïve café ✓", "日本語 e\u0301 🙂 [MASK] ,", mixed(40, 1)]
# Over the cutter's piece (8,192 characters at max_length 512, 4,096 below): read a piece at a time.
LONG = [mixed(1500, 2), "y" * 20_000, mixed(700, 3) + " " + "z" * 9_000 + " tail"]


@pytest.fixture(scope="module")
def base(real_model_path: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(real_model_path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def truncating(base: Tokenizer, max_length: int, strategy: str, direction: str) -> Tokenizer:
    tokenizer = Tokenizer.from_str(base.to_str())
    tokenizer.enable_truncation(max_length, strategy=strategy, direction=direction)
    return tokenizer


def check_against_whole_pairs(tokenizer: Tokenizer, query: str, documents: list[str]) -> None:
    """QueryPairs' pairs equal tokenizer.encode(query, document); where that refuses, so does QueryPairs."""
    max_length = tokenizer.truncation["max_length"] if tokenizer.truncation else 512
    pairs = QueryPairs(tokenizer, TextCutter(tokenizer, max_length))
    for document in documents:
        try:
            e = tokenizer.encode(query, document)
        except Exception as error:  # only_first / only_second with a side too short to cut
            assert "too short" in str(error)
            with pytest.raises(ValueError, match="too short to cut the pair"):
                pairs.encode(query, [document])
            continue
        (got,) = pairs.encode(query, [document])
        context = (len(query), len(document), tokenizer.truncation)
        assert got.ids == e.ids, context
        assert got.type_ids == e.type_ids, context
        assert got.overflowing == bool(e.overflowing), context


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("direction", ["right", "left"])
@pytest.mark.parametrize("max_length", [2, 3, 4, 9, 10, 64, 65])
def test_pairs_equal_the_tokenizers_pairs(base: Tokenizer, strategy: str, direction: str, max_length: int) -> None:
    tokenizer = truncating(base, max_length, strategy, direction)
    # Two long texts at a tiny max_length make `tokenizers` build every window of one against every window
    # of the other (millions); there a long text meets only short ones.
    for query in SHORT + LONG:
        documents = SHORT + LONG if max_length >= 64 or query in SHORT else SHORT
        check_against_whole_pairs(tokenizer, query, documents)


def test_the_longer_of_two_long_texts_keeps_the_odd_token(base: Tokenizer) -> None:
    # Both over max_length (odd budget 509): the longer keeps 255 tokens, the other 254, however long the
    # query's count is found to be; equal counts give the odd token to the second text.
    tokenizer = truncating(base, 512, "longest_first", "right")
    query, longer = " ".join(["word"] * 3000), " ".join(["word"] * 3001)
    check_against_whole_pairs(tokenizer, query, [longer, query, " ".join(["word"] * 2999), "y" * 20_000])
    assert kept_lengths(3000, 3001, 509, "longest_first") == (254, 255)
    assert kept_lengths(3000, 3000, 509, "longest_first") == (254, 255)
    assert kept_lengths(3001, 3000, 509, "longest_first") == (255, 254)


@pytest.mark.parametrize(
    "pair_template",
    [
        "[CLS] $A [SEP] [SEP] $B:1 [SEP]:1",  # RoBERTa's layout, with BERT's tokens
        "$A [SEP] $B:1",
        "[CLS] $A:1 [SEP]:0 $B:0",
    ],
)
def test_other_post_processors(base: Tokenizer, pair_template: str) -> None:
    tokenizer = truncating(base, 40, "longest_first", "right")
    special = [("[CLS]", base.token_to_id("[CLS]")), ("[SEP]", base.token_to_id("[SEP]"))]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair=pair_template, special_tokens=special
    )
    for query in SHORT + LONG[:1]:
        check_against_whole_pairs(tokenizer, query, SHORT + LONG[:1])


def test_no_post_processor_and_no_truncation(base: Tokenizer) -> None:
    bare = truncating(base, 30, "longest_first", "right")
    bare.post_processor = None
    check_against_whole_pairs(bare, SHORT[3], SHORT + LONG[:1])
    check_against_whole_pairs(base, SHORT[4], SHORT)  # truncation off: every pair whole


def test_cross_encoder_tokenize_pairs_equals_tokenize(real_model_path: Path, tmp_path: Path) -> None:
    model = CrossEncoder.from_pretrained(
        cross_encoder_folder(real_model_path, tmp_path / "ce", num_labels=1, max_length=48), dtype="float32"
    )
    documents = [d for d in SHORT + LONG if d]
    for query in documents:
        encodings = model.encodings([(query, d) for d in documents])
        pairs = model.tokenize_pairs(query, documents)
        assert [p.ids for p in pairs] == [e.ids for e in encodings]
        assert [p.type_ids for p in pairs] == [e.type_ids for e in encodings]
        assert [p.overflowing for p in pairs] == [bool(e.overflowing) for e in encodings]
    model.max_length = 17  # a new truncation: the pairs follow it
    assert [p.ids for p in model.tokenize_pairs("a query", LONG)] == [
        e.ids for e in model.encodings([("a query", d) for d in LONG])
    ]
    with pytest.raises(ValueError, match=r"texts\[2\] holds a lone surrogate"):
        model.tokenize_pairs("q", ["a", "b", "\ud800"])
    for documents in (None, 3, "one document"):
        with pytest.raises(TypeError, match="documents must be a list of str") as raised:
            model.tokenize_pairs("q", documents)
        assert "\n" not in str(raised.value)
