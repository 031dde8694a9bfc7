"""A text's result does not depend on what shares its batch: at float32, every job gives the same bits for a
text (or pair) encoded alone, first, last, among any other texts in any order, under any batch_size and
max_tokens, and from several threads at once.

Each property is checked on a tiny random model (hidden 32) and a wider one (hidden 384, intermediate 1536,
two layers: the GEMM and reduction kernels of real model sizes), with the real tokenizer; the Embedder
also on the real all-MiniLM-L6-v2."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from bertlite import BertModel
from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.m3 import M3Encoder
from bertlite.jobs.multi_vector import MultiVectorEncoder
from bertlite.jobs.sparse_encoder import SparseEncoder
from tests.helpers import splade_folder
from tests.models.test_roberta import unigram_tokenizer

# Single tokens of the real (BERT uncased) tokenizer.
WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be or has had not "
    "but first one their its new after who they have her she two been other when there all during into school "
    "time may years more most only over city some world would where later up such used many can state about "
    "national out known university united then made list sort value key order river music water light green"
).split()
# Words of the M3 model's unigram tokenizer (tests/models/test_roberta.py), most of them one piece each.
M3_WORDS = "the a of to in is list sort dict value returns new items json writes sequence mutable key".split()
# Words per text: short and long ones, several of equal length (ties in the length sort), the longest
# past the tiny models' max_length (truncated).
LENGTHS = [1, 1, 2, 2, 3, 4, 5, 5, 5, 6, 7, 8, 8, 9, 10, 11, 12, 12, 14, 16]
LENGTHS += [18, 20, 20, 22, 25, 28, 30, 30, 33, 36, 40, 44, 48, 50, 52, 55, 58, 60, 60, 60]


def make_pool(words: Sequence[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(n)) for n in LENGTHS]


TEXTS = make_pool(WORDS, 0)
PAIRS = [(TEXTS[i], TEXTS[(7 * i + 3) % len(TEXTS)]) for i in range(len(TEXTS))]  # queries and documents
M3_TEXTS = make_pool(M3_WORDS, 1)
MAX_POSITIONS = 64  # the random models': texts past 62 words are truncated
SIZES = {
    "tiny": dict(hidden_size=32, intermediate_size=37, num_attention_heads=4, std=0.3),
    "wide": dict(hidden_size=384, intermediate_size=1536, num_attention_heads=12, std=0.05),
}
BATCH_SIZES = [None, 1, 2, 3, 5, 8, 64]
MAX_TOKENS = [None, 16, 40, 100, 256, 2048]
EXAMPLES = 10
THREADS = 4
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


# --- the models ---------------------------------------------------------------------------


def randomize(model: torch.nn.Module, std: float) -> torch.nn.Module:
    """Weights far from their init: LayerNorm weights around 1 (token rows then differ), the rest N(0, std)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0, 0.1) if name.endswith("LayerNorm.weight") else p.normal_(0.0, std)
    return model.eval()


def bert_folder(real_model_path: Path, folder: Path, size: str, model_class: type, **config: Any) -> Path:
    """A random 2-layer transformers BERT of `model_class` and `size` (SIZES) with the real tokenizer."""
    shape = dict(SIZES[size])
    std = shape.pop("std")
    bert_config = transformers.BertConfig(
        vocab_size=30522, num_hidden_layers=2, max_position_embeddings=MAX_POSITIONS, **shape, **config
    )
    randomize(model_class(bert_config), std).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(real_model_path / name, folder / name)
    return folder


def m3_folder(folder: Path, size: str) -> Path:
    """A random 2-layer XLM-RoBERTa of `size`, the unigram tokenizer, and BGE-M3's colbert_linear.pt (H -> H)
    and sparse_linear.pt (H -> 1), as FlagEmbedding saves them."""
    shape = dict(SIZES[size])
    std = shape.pop("std")
    config = transformers.XLMRobertaConfig(
        vocab_size=99, num_hidden_layers=2, max_position_embeddings=MAX_POSITIONS + 2, type_vocab_size=1, **shape
    )
    randomize(transformers.XLMRobertaModel(config, add_pooling_layer=False), std).save_pretrained(folder)
    unigram_tokenizer(folder)
    hidden = shape["hidden_size"]
    colbert, sparse = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        for p in (*colbert.parameters(), *sparse.parameters()):
            p.normal_(0.0, hidden**-0.5)
        sparse.bias.fill_(0.05)  # some weights positive, some cut by relu
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    return folder


def bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


@dataclass
class Job:
    """A job and its items: run(items, batch_size, max_tokens) gives one tuple of float32 arrays per item."""

    name: str
    items: list[Any]
    run: Callable[[list[Any], int | None, int | None], list[tuple[np.ndarray, ...]]]
    solo: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict)

    def alone(self, index: int) -> tuple[np.ndarray, ...]:
        """Item `index` encoded by itself, at the default limits (computed once)."""
        if index not in self.solo:
            self.solo[index] = self.run([self.items[index]], None, None)[0]
        return self.solo[index]

    def check(self, indices: list[int], batch_size: int | None, max_tokens: int | None) -> None:
        """Every item of the batch `indices` has the bits it has alone."""
        expected = [self.alone(i) for i in indices]
        got = self.run([self.items[i] for i in indices], batch_size, max_tokens)
        assert len(got) == len(indices)
        for place, (i, mine, solo) in enumerate(zip(indices, got, expected, strict=True)):
            assert_same_bits(mine, solo, f"{self.name}: item {i} at place {place} of {indices}")


def assert_same_bits(got: tuple[np.ndarray, ...], expected: tuple[np.ndarray, ...], where: str) -> None:
    assert len(got) == len(expected), where
    for part, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}, output {part}: {a.shape} vs {b.shape}"
        if a.tobytes() != b.tobytes():
            worst = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            pytest.fail(f"{where}, output {part}: not the same bits (largest difference {worst:.3g})")


def limits(batch_size: int | None, max_tokens: int | None) -> dict[str, int]:
    return {k: v for k, v in (("batch_size", batch_size), ("max_tokens", max_tokens)) if v is not None}


def embedder_job(name: str, model: Embedder) -> Job:
    def run(texts: list[str], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
        vectors = model.encode(texts, batch_size=batch_size, max_tokens=max_tokens)
        return [(bits(v),) for v in vectors]

    return Job(name, TEXTS, run)


def modernbert_cross_job(name: str, size: str, real_model_path: Path, folder: Path) -> Job:
    """A random 2-layer ModernBERT cross-encoder of `size` whose head mean-pools every row of a pair."""
    shape = dict(SIZES[size])
    std = shape.pop("std")
    config = transformers.ModernBertConfig(
        vocab_size=30522,
        num_hidden_layers=2,
        max_position_embeddings=MAX_POSITIONS,
        classifier_pooling="mean",
        num_labels=1,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
        **shape,
    )
    randomize(transformers.ModernBertForSequenceClassification(config), std).save_pretrained(folder)
    for file in TOKENIZER_FILES:
        shutil.copy(real_model_path / file, folder / file)
    modern = CrossEncoder.from_pretrained(folder, dtype="float32")

    def classify(pairs: list[Any], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
        return [(bits(s),) for s in modern.predict(pairs, batch_size=batch_size, max_tokens=max_tokens)]

    return Job(name, PAIRS, classify)


def build_job(kind: str, size: str, real_model_path: Path, root: Path) -> Job:
    name = f"{kind}-{size}"
    folder = root / name
    if kind == "embedder":
        model_folder = bert_folder(real_model_path, folder, size, transformers.BertModel)
        return embedder_job(name, Embedder.from_pretrained(model_folder, dtype="float32"))
    if kind == "cross-encoder":
        bert_folder(real_model_path, folder, size, transformers.BertForSequenceClassification, num_labels=1)
        cross = CrossEncoder.from_pretrained(folder, dtype="float32")

        def predict(pairs: list[Any], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
            scores = cross.predict(pairs, batch_size=batch_size, max_tokens=max_tokens)
            return [(bits(s),) for s in scores]

        return Job(name, PAIRS, predict)
    if kind == "modernbert-cross":
        return modernbert_cross_job(name, size, real_model_path, folder)
    if kind == "sparse":
        base = bert_folder(real_model_path, root / f"{name}-mlm", size, transformers.BertForMaskedLM)
        splade = SparseEncoder.from_pretrained(splade_folder(base, folder), dtype="float32")

        def sparse(texts: list[str], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
            vectors = splade.encode(
                texts, convert_to_sparse_tensor=False, max_tokens=max_tokens, **limits(batch_size, None)
            )
            return [(bits(v),) for v in vectors]

        return Job(name, TEXTS, sparse)
    if kind == "multi-vector":
        model_folder = bert_folder(real_model_path, folder, size, transformers.BertModel)
        hidden = SIZES[size]["hidden_size"]
        torch.manual_seed(1)
        projection = torch.nn.Linear(hidden, 16, bias=False)
        encoder = MultiVectorEncoder(
            BertModel.from_pretrained(model_folder, add_pooling_layer=False),
            Tokenizer.from_file(str(model_folder / "tokenizer.json")),
            projection,
        )

        def colbert(texts: list[str], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
            vectors = encoder.encode(texts, batch_size=batch_size, max_tokens=max_tokens, convert_to_numpy=True)
            return [(bits(v),) for v in vectors]

        return Job(name, TEXTS, colbert)
    if kind == "m3":
        m3 = M3Encoder.from_pretrained(m3_folder(folder, size), dtype="float32", max_length=MAX_POSITIONS)

        def three(texts: list[str], batch_size: int | None, max_tokens: int | None) -> list[tuple[np.ndarray, ...]]:
            out = m3.encode(
                texts,
                batch_size=batch_size,
                max_tokens=max_tokens,
                return_dense=True,
                return_sparse=True,
                return_colbert_vecs=True,
            )
            return [
                (
                    bits(dense),
                    np.array([int(k) for k in weights], dtype=np.int64),
                    bits(list(weights.values())),
                    bits(c),
                )
                for dense, weights, c in zip(
                    out["dense_vecs"], out["lexical_weights"], out["colbert_vecs"], strict=True
                )
            ]

        return Job(name, M3_TEXTS, three)
    raise ValueError(kind)


KINDS = ["embedder", "cross-encoder", "modernbert-cross", "sparse", "multi-vector", "m3"]
CASES = [f"{kind}-{size}" for kind in KINDS for size in SIZES]


@pytest.fixture(scope="module")
def jobs(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Job]:
    """The job of a case ("embedder-tiny", ...), built at its first use."""
    root = tmp_path_factory.mktemp("invariance")
    built: dict[str, Job] = {}

    def get(case: str) -> Job:
        if case not in built:
            kind, size = case.rsplit("-", 1)
            built[case] = build_job(kind, size, real_model_path, root)
        return built[case]

    return get


# --- the properties ---------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[int], int | None, int | None]:
    """A target item placed anywhere among others (any subset, order and repeats), and the batch limits."""
    others = draw(st.lists(st.integers(0, len(LENGTHS) - 1), max_size=12))
    target = draw(st.integers(0, len(LENGTHS) - 1))
    where = draw(st.integers(0, len(others)))
    return (
        others[:where] + [target] + others[where:],
        draw(st.sampled_from(BATCH_SIZES)),
        draw(st.sampled_from(MAX_TOKENS)),
    )


PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("case", CASES)
@PROPERTY
@given(batch=batches())
def test_an_item_has_the_same_bits_in_any_batch(
    jobs: Callable[[str], Job], case: str, batch: tuple[list[int], int | None, int | None]
) -> None:
    jobs(case).check(*batch)


def compositions(seed: int, count: int) -> list[tuple[list[int], int | None, int | None]]:
    """`count` different batches (as batches() draws them), from a seeded generator."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        indices = [rng.randrange(len(LENGTHS)) for _ in range(rng.randint(1, 12))]
        out.append((indices, rng.choice(BATCH_SIZES), rng.choice(MAX_TOKENS)))
    return out


def check_concurrently(job: Job, seed: int) -> None:
    """Threads encoding different batches at once; every item has the bits it has alone."""
    batches = compositions(seed, 2 * THREADS)
    for indices, _, _ in batches:
        for i in indices:
            job.alone(i)  # computed before, one at a time
    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(job.check, *batch) for batch in batches]:
            future.result(timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_threads_encoding_at_once_give_the_same_bits(jobs: Callable[[str], Job], case: str) -> None:
    check_concurrently(jobs(case), seed=CASES.index(case))


@pytest.fixture(scope="module")
def real_embedder(real_model_path: Path) -> Job:
    return embedder_job("all-MiniLM-L6-v2", Embedder.from_pretrained(real_model_path, dtype="float32"))


@PROPERTY
@given(batch=batches())
def test_the_real_embedder_gives_the_same_bits_in_any_batch(
    real_embedder: Job, batch: tuple[list[int], int | None, int | None]
) -> None:
    real_embedder.check(*batch)


def test_the_real_embedder_gives_the_same_bits_from_threads(real_embedder: Job) -> None:
    check_concurrently(real_embedder, seed=99)
