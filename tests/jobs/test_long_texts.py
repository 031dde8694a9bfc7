"""Long texts are read only as far as max_length needs: the same ids as the whole text, bounded memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

from bertlite.jobs.long_texts import MIN_PIECE_CHARS, TextCutter
from bertlite.tokenization import load_tokenizer
from tests.helpers import run_fresh_without_isa_caps

N = 3 * MIN_PIECE_CHARS  # over a piece, so texts are cut


def _adversarial_texts(seed: int) -> list[str]:
    """Texts that break a naive cut: long words ([UNK] over 100 characters), CJK without spaces, accents
    and combining marks, control characters, whitespace runs, added tokens, a character whose
    normalization is punctuation (U+1FEF), runs far longer than a piece."""
    rng = random.Random(seed)
    parts = [
        "word",
        "Ünïcödé",
        "e\u0301\u0301",
        "\u4e2d\u6587\u5b57",
        "x" * 99,
        "y" * 101,
        "z" * 150,
        "[MASK]",
        "[MAS",
        "\x00\x01\x1f",
        "\ufffd",
        " " * 40,
        "\t\n\r",
        "\u00a0\u3000",
        "..,;!",
        "\u1fef",
        "\u0130stanbul",
        "\u2028",
        "a\u0301" * 60,
        "\U00020001\U00020002",
    ]
    texts = []
    for _ in range(3):
        words = [rng.choice(parts) for _ in range(N // 4)]
        texts.append("".join(w + rng.choice(["", " ", "  ", "\n", "-"]) for w in words))
    texts += [
        "a" * (3 * N) + " tail words here",
        "\u00e9" * (3 * N) + " after",
        "\u0301" * (3 * N) + " after the marks",
        "\x00" * (3 * N) + " words after nothing",
        " " * (3 * N) + " words after spaces",
        "\u4e2d" * (3 * N),
        "a" * N + "\u1fef" + "b" * N + " end",
        "[MASK]" * N,
        "ab" + "\x00" * (3 * N) + "cd more words",
        "\u0130" * (3 * N),
        ("short words, then a very long one " + "q" * 5000 + " ") * 20,
        "x " * N,
    ]
    return texts


def _reference(tokenizer: Tokenizer, max_length: int | None) -> Tokenizer:
    reference = Tokenizer.from_str(tokenizer.to_str())
    reference.no_padding()
    if max_length is None:
        reference.no_truncation()
    else:
        reference.enable_truncation(max_length, strategy="longest_first")
    return reference


@pytest.mark.slow
@pytest.mark.parametrize("max_length", [8, 128, 257])
@pytest.mark.parametrize("setting", ["uncased", "cased", "no-cjk"])
def test_cut_texts_give_the_whole_texts_ids(real_model_path: Path, max_length: int, setting: str) -> None:
    tokenizer = load_tokenizer(real_model_path)
    if setting != "uncased":
        cased = setting == "cased"
        tokenizer.normalizer = normalizers.BertNormalizer(
            handle_chinese_chars=cased, lowercase=not cased, strip_accents=False if cased else None
        )
    cutter = TextCutter(tokenizer, max_length)
    assert cutter.enabled
    truncating, whole = _reference(tokenizer, max_length), _reference(tokenizer, None)
    for i, text in enumerate(_adversarial_texts(max_length)):
        cut = cutter.cut(text)
        expected, got = truncating.encode(text), truncating.encode(cut)
        assert got.ids == expected.ids, (i, text[:40])
        assert bool(got.overflowing) == bool(expected.overflowing), i
        tokens = len(whole.encode(text, add_special_tokens=False).ids)
        assert cutter.count(text) == tokens, i
        # Shorter, except the run whose normalization makes a boundary (U+1FEF), read whole, and a
        # text of long words with no more tokens than max_length keeps.
        assert len(cut) < len(text) or "\u1fef" in text or tokens <= max_length, i


@pytest.mark.slow
@pytest.mark.parametrize("max_length", [257, 258])  # 254 and 255 tokens of text: even and odd
def test_cut_pairs_give_the_whole_pairs_ids(real_model_path: Path, max_length: int) -> None:
    # longest_first keeps per side a count that depends on the other side's, and on which is longer.
    # The sides stay a few thousand tokens: the whole pair's overflowing windows are every pair of windows.
    tokenizer = load_tokenizer(real_model_path)
    cutter = TextCutter(tokenizer, max_length)
    truncating = _reference(tokenizer, max_length)
    n = cutter.piece_chars // 2 + 100  # words of two characters: over a piece
    sides = ["w " * n, "v " * n, "v " * (n - 1), "v " * (n + 1), "v " * 10, "v " * (n - 200), "a" * N, "\u4e2d" * n]
    for first in sides:
        for second in sides:
            cut = cutter.cut_pair(first, second)
            expected, got = truncating.encode(first, second), truncating.encode(*cut)
            assert (got.ids, got.type_ids) == (expected.ids, expected.type_ids), (first[:9], second[:9])
            assert bool(got.overflowing) == bool(expected.overflowing)
            assert sum(map(len, cut)) < len(first) + len(second) or len(first) + len(second) < 2 * N


@pytest.mark.slow
def test_embedder_tokenizes_cut_texts_and_pairs_as_whole_ones(real_model_path: Path) -> None:
    from bertlite.jobs.embedder import Embedder

    embedder = Embedder.from_pretrained(real_model_path, max_length=33)
    long_text = "many words, " * 400
    texts = [long_text, "short", (long_text, "a short pair"), ("short first", long_text), (long_text, long_text)]
    reference = _reference(load_tokenizer(real_model_path), 33)
    for text, encoding in zip(texts, embedder.tokenize(texts), strict=True):
        expected = reference.encode(*text) if isinstance(text, tuple) else reference.encode(text)
        assert (encoding.ids, encoding.type_ids) == (expected.ids, expected.type_ids)
        assert bool(encoding.overflowing) == bool(expected.overflowing)
    whole = _reference(load_tokenizer(real_model_path), None)
    assert embedder.count_tokens(long_text) == len(whole.encode(long_text).ids)


def test_other_pipelines_are_cut_by_prefix_or_read_whole(real_model_path: Path) -> None:
    tokenizer = load_tokenizer(real_model_path)
    tokenizer.normalizer = normalizers.Lowercase()
    cutter = TextCutter(tokenizer, 16)
    text = "word " * N
    assert not cutter.enabled and cutter.by_prefix and len(cutter.cut(text)) < len(text)
    assert _reference(tokenizer, 16).encode(cutter.cut(text)).ids == _reference(tokenizer, 16).encode(text).ids
    # A regex split may look any distance ahead: such a pipeline is read whole.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+(?=.*$)"), "isolated")
    cutter = TextCutter(tokenizer, 16)
    assert not cutter.by_prefix and cutter.cut(text) is text


# Embeds one text of 64 MB (words, then one run without spaces) in a fresh process; prints the
# growth of its peak RSS (VmHWM, reset after loading) in MiB.
_PEAK_SCRIPT = """
import sys
from bertlite.jobs.embedder import Embedder

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024

embedder = Embedder.from_pretrained(sys.argv[1])
texts = [("lorem ipsum dolor sit amet, " * ((64 << 20) // 28)), "a" * (64 << 20)]
embedder.encode(["warm up"])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
for text in texts:
    embedder.encode([text])
print(status("VmHWM:") - before)
"""


@pytest.mark.slow
def test_a_64_mb_text_embeds_in_bounded_memory(real_model_path: Path) -> None:
    # The whole text tokenized took about 170 MiB per MB of text; now the growth is a piece's.
    result = run_fresh_without_isa_caps(["-c", _PEAK_SCRIPT, str(real_model_path)], timeout=300)
    growth = float(result.stdout.split()[-1])
    assert growth < 64, f"peak RSS grew {growth:.0f} MiB for a 64 MB text"
