"""Long texts through each kind of tokenizer (WordPiece, byte-level BPE as RoBERTa's, Unigram as XLM-R's): the
cut text gives the whole text's ids under truncation, alone and in pairs, in the jobs (Embedder, M3Encoder) too,
and a 5 MB text costs bounded memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

import bertlite
from bertlite.jobs.long_texts import MIN_PIECE_CHARS, TextCutter
from bertlite.jobs.m3 import M3Encoder
from bertlite.tokenization import load_tokenizer
from tests.helpers import run_fresh_without_isa_caps, save_m3_heads
from tests.models.test_roberta import TINY_ROBERTA, unigram_tokenizer

N = 3 * MIN_PIECE_CHARS  # over a piece, so texts are cut
LOREM = "lorem ipsum dolor sit amet, the list of items is a new sequence; "
KINDS = ("wordpiece", "bpe", "unigram")


def bpe_tokenizer(folder: Path) -> None:
    """A byte-level BPE tokenizer as RoBERTa's (ByteLevel pre-tokenizer, RobertaProcessing, <mask> taking the
    space before it), trained on a few sentences, saved as transformers saves one."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    trainer = BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([LOREM * 20, "the quick brown fox jumps over the lazy dog " * 20], trainer)
    tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
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


def xlmr_unigram_tokenizer(folder: Path) -> None:
    """unigram_tokenizer with XLM-R's normalizer steps after its charsmap: NFKC, then runs of spaces as one."""
    unigram_tokenizer(folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.save(str(folder / "tokenizer.json"))


def family_folder(kind: str, folder: Path) -> Path:
    """A tiny random RoBERTa (bpe) or XLM-RoBERTa (unigram) with BGE-M3's heads, and that tokenizer."""
    torch.manual_seed(0)
    if kind == "bpe":
        config = transformers.RobertaConfig(**{**TINY_ROBERTA, "vocab_size": 420})
        model = transformers.RobertaModel(config, add_pooling_layer=False)
    else:
        model = transformers.XLMRobertaModel(transformers.XLMRobertaConfig(**TINY_ROBERTA), add_pooling_layer=False)
    model.save_pretrained(folder)
    (bpe_tokenizer if kind == "bpe" else xlmr_unigram_tokenizer)(folder)
    save_m3_heads(folder, hidden=32, colbert_dim=16)
    return folder


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    return {
        "wordpiece": real_model_path,
        "bpe": family_folder("bpe", root / "bpe"),
        "unigram": family_folder("unigram", root / "unigram"),
    }


def adversarial_texts(seed: int) -> list[str]:
    """Texts that break a naive prefix cut: whitespace runs (one word to byte-level BPE's lookahead, one
    space to XLM-R's normalizer), added tokens (whole and cut), combining marks (NFKC composes them with the
    letter before), characters NFKC spreads into several, long runs without a space, CJK."""
    rng = random.Random(seed)
    parts = [
        "lorem",
        "ipsum,",
        " " * 7,
        "\n\n",
        "<mask>",
        "<ma",
        "e\u0301",
        "\u0301",
        "\ufb01",
        "\u2163",
        "\u4e2d\u6587",
        "x" * 300,
        "'s",
        "123",
        "\t",
    ]
    texts = []
    for _ in range(3):
        words = [rng.choice(parts) for _ in range(N // 4)]
        texts.append("".join(w + rng.choice(["", " ", "  ", "\n"]) for w in words))
    texts += [
        LOREM * (N // 20),
        "a" * (3 * N) + " tail words here",
        " " * (3 * N) + " words after spaces",
        "<mask>" * N,
        ("short words, then a very long one " + "q" * 5000 + " ") * 20,
        "x " * N,
        "e\u0301 " * N,
    ]
    return texts


def truncating(tokenizer: Tokenizer, max_length: int | None) -> Tokenizer:
    reference = Tokenizer.from_str(tokenizer.to_str())
    reference.no_padding()
    if max_length is None:
        reference.no_truncation()
    else:
        reference.enable_truncation(max_length, strategy="longest_first")
    return reference


@pytest.mark.parametrize("max_length", [8, 40, 257])
@pytest.mark.parametrize("kind", KINDS)
def test_cut_texts_give_the_whole_texts_ids(folders: dict[str, Path], kind: str, max_length: int) -> None:
    tokenizer = load_tokenizer(folders[kind])
    cutter = TextCutter(tokenizer, max_length)
    assert cutter.enabled if kind == "wordpiece" else cutter.by_prefix
    reference = truncating(tokenizer, max_length)
    for i, text in enumerate(adversarial_texts(max_length)):
        cut = cutter.cut(text)
        expected, got = reference.encode(text), reference.encode(cut)
        assert got.ids == expected.ids, (kind, i, text[:40])
        assert bool(got.overflowing) == bool(expected.overflowing), (kind, i)
    # Texts of words are read only a prefix far.
    assert len(cutter.cut(LOREM * (N // 20))) < len(LOREM * (N // 20)) // 2


@pytest.mark.slow
@pytest.mark.parametrize("max_length", [40, 41])  # an even and an odd count of text tokens
@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_cut_pairs_give_the_whole_pairs_ids(folders: dict[str, Path], kind: str, max_length: int) -> None:
    tokenizer = load_tokenizer(folders[kind])
    cutter = TextCutter(tokenizer, max_length)
    reference = truncating(tokenizer, max_length)
    # Sides just over a piece: the whole pair's overflowing windows are every pair of windows.
    long, longer = LOREM * (cutter.piece_chars // len(LOREM) + 2), LOREM * (cutter.piece_chars // len(LOREM) + 3)
    sides = [long, longer, "lorem ipsum", "lorem " * 15, "lorem " * 30, "<mask> " * (cutter.piece_chars // 6)]
    for first in sides:
        for second in sides:
            cut = cutter.cut_pair(first, second)
            expected, got = reference.encode(first, second), reference.encode(*cut)
            assert (got.ids, got.type_ids) == (expected.ids, expected.type_ids), (first[:9], second[:9])
            assert bool(got.overflowing) == bool(expected.overflowing)
    assert len(cutter.cut_pair(long, "lorem ipsum")[0]) < len(long)
    assert len(cutter.cut_pair("lorem ipsum", LOREM * 1000)[1]) <= cutter.piece_chars


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_jobs_tokenize_cut_texts_as_whole_ones(folders: dict[str, Path], kind: str) -> None:
    texts = [LOREM * 2000, "lorem ipsum", ("lorem ipsum", LOREM * 2000), LOREM * 2000 + "<mask>"]
    embedder = bertlite.Embedder.from_pretrained(folders[kind], dtype="float32", pooling="mean")
    tokenizer = load_tokenizer(folders[kind])
    reference = truncating(tokenizer, embedder.max_length)
    for text, encoding in zip(texts, embedder.encodings(texts), strict=True):
        expected = reference.encode(*text) if isinstance(text, tuple) else reference.encode(text)
        assert (encoding.ids, encoding.type_ids) == (expected.ids, expected.type_ids)
        assert encoding.overflowing if text != "lorem ipsum" else not encoding.overflowing
    m3 = M3Encoder.from_pretrained(folders[kind], dtype="float32")
    singles = [t for t in texts if isinstance(t, str)]
    reference = truncating(tokenizer, m3.max_length)
    assert [e.ids for e in m3.encodings(singles)] == [reference.encode(t).ids for t in singles]
    reference = truncating(tokenizer, 12)  # a max_length one call gives, its own tokenizer
    assert [e.ids for e in m3._tokenize_at(singles, 12, "truncate")] == [reference.encode(t).ids for t in singles]


# Encodes one 5 MB text in a fresh process with the job named, after a warm-up; prints the growth of its peak
# RSS (VmHWM, reset after loading) in MiB. tracemalloc would miss the tokenizer's (Rust) allocations.
_PEAK_SCRIPT = """
import sys
import bertlite
from bertlite.jobs.m3 import M3Encoder

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024

job_name, folder = sys.argv[1], sys.argv[2]
if job_name == "m3":
    job = M3Encoder.from_pretrained(folder, dtype="float32")
    run = lambda texts: job.encode(texts, return_sparse=True, return_colbert_vecs=True)
else:
    job = bertlite.Embedder.from_pretrained(folder, dtype="float32", pooling="mean")
    run = job.encode
text = "lorem ipsum dolor sit amet, the list of items is a new sequence; " * ((5 << 20) // 65)
run(["warm up"])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
run([text])
print(status("VmHWM:") - before)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "job"), [("wordpiece", "embedder"), ("bpe", "embedder"), ("unigram", "m3")])
def test_a_5_mb_text_costs_bounded_memory(folders: dict[str, Path], kind: str, job: str) -> None:
    # Tokenized whole, a 5 MB text grew the process by hundreds of MiB through BPE and Unigram (+2 MiB through
    # WordPiece, which was cut already); cut, each grows it by a few MiB.
    result = run_fresh_without_isa_caps(["-c", _PEAK_SCRIPT, job, str(folders[kind])], timeout=300)
    growth = float(result.stdout.split()[-1])
    print(f"{kind} ({job}): peak RSS grew {growth:.1f} MiB for a 5 MB text")
    assert growth < 100, f"{kind}: peak RSS grew {growth:.0f} MiB for a 5 MB text"
