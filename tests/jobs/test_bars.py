"""Each job's accuracy bar (bertlite.jobs.bars) and the modes held to it.

The bars' functions on hand-made arrays whose verdicts are worked out by hand here; dtype="auto" with the CPU's
verdict forced to bfloat16 (BERTLITE_AUTO_DTYPE), per job: either bfloat16 meets the job's bar on held-out texts
(the corpus, not bars.CALIBRATION_TEXTS), or the job went back to float32 and computes float32's bits; a bar
loosened or made impossible forces each way; and int8 meets the int8 bar on the held-out texts."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bertlite import CrossEncoder, Embedder, MultiVectorEncoder, SparseEncoder
from bertlite.errors import Int8PrecisionWarning
from bertlite.jobs import bars
from bertlite.jobs.base import BaseEncoder
from bertlite.jobs.m3 import M3Encoder
from bertlite.utils.auto_dtype import FORCE_VARIABLE
from tests.helpers import COLBERT_OPTIONS, colbert_folder, cross_encoder_folder, masked_lm_folder, splade_folder
from tests.jobs.test_m3 import write_m3_folder

HELD_OUT = 30  # corpus texts per job
QUERIES = (  # a cross-encoder's held-out queries, each against DOCUMENTS corpus texts
    "How do I read a file line by line?",
    "Which function returns the size of a queue?",
    "Wie vergleiche ich zwei Zeichenketten ohne Groß- und Kleinschreibung?",
)
DOCUMENTS = 10


# --- the bars' functions on hand-made arrays ---


def test_embeddings_bar_is_the_min_cosine() -> None:
    reference = np.array([[1.0, 0.0], [0.0, 1.0]])
    # cos((0, 1), (e, 1)) = 1 / sqrt(1 + e^2): 0.99995000 for e = 0.01, 0.99980006 for e = 0.02, 0.98058068 for 0.2
    close = bars.embeddings(reference, np.array([[3.0, 0.0], [0.01, 1.0]]), "bfloat16")  # length does not count
    assert close.passed
    assert close.summary == "min cosine to float32 0.999950 (bar >= 0.9999)"
    apart = np.array([[1.0, 0.0], [0.02, 1.0]])
    assert not bars.embeddings(reference, apart, "bfloat16").passed
    assert bars.embeddings(reference, apart, "bfloat16").summary == "min cosine to float32 0.999800 (bar >= 0.9999)"
    assert bars.embeddings(reference, apart, "int8").passed  # 0.9998 >= 0.995
    far = bars.embeddings(reference, np.array([[1.0, 0.0], [0.2, 1.0]]), "int8")
    assert not far.passed
    assert far.summary == "min cosine to float32 0.980581 (bar >= 0.995)"


def test_scores_bar_is_the_largest_difference_in_units_of_a_logit() -> None:
    reference = np.array([4.0, -0.5, 0.3])
    # differences over max(1, |reference|): 0.03 / 4 = 0.0075, 0.005 / 1, 0
    close = bars.scores(reference, np.array([4.03, -0.505, 0.3]), "bfloat16")
    assert close.passed
    assert close.summary == "max score difference 7.50e-03 (bar <= 0.01)"
    apart = np.array([4.1, -0.5, 0.3])  # 0.1 / 4 = 0.025
    assert not bars.scores(reference, apart, "bfloat16").passed
    assert bars.scores(reference, apart, "bfloat16").summary == "max score difference 2.50e-02 (bar <= 0.01)"
    assert bars.scores(reference, apart, "int8").passed
    # a probability (below 1) in absolute terms: 0.015 off misses 1e-2; a logit of 10 may move 10x as far
    assert not bars.scores(np.array([0.2]), np.array([0.215]), "bfloat16").passed
    assert bars.scores(np.array([10.0]), np.array([10.08]), "bfloat16").passed  # 0.08 / 10


def test_scores_bar_keeps_a_querys_order_beyond_the_bar() -> None:
    # float32 orders document 0 above document 1 by 0.012 (more than bfloat16's 1e-2); the fast scores move by
    # 0.006 and 0.007 (within the bar) and swap them.
    reference, swapped = np.array([0.500, 0.488, 0.1]), np.array([0.494, 0.495, 0.1])
    broken = bars.scores(reference, swapped, "bfloat16", groups=[[0, 1, 2]])
    assert not broken.passed
    assert broken.summary == "max score difference 7.00e-03 (bar <= 0.01); documents 0 and 1 swap places"
    # the same scores without a group, or in two queries' groups: no order to keep, and the differences pass
    assert bars.scores(reference, swapped, "bfloat16").passed
    assert bars.scores(reference, swapped, "bfloat16", groups=[[0, 2], [1]]).passed
    # int8's bar (5e-2) is wider than the 0.012 between them: a swap within the bar passes
    assert bars.scores(reference, swapped, "int8", groups=[[0, 1, 2]]).passed
    # float32 orders them 0.005 apart (within 1e-2): a swap passes
    assert bars.scores(np.array([0.500, 0.495]), np.array([0.497, 0.498]), "bfloat16", groups=[[0, 1]]).passed


def test_scores_bar_on_labels_and_on_nothing() -> None:
    reference = np.array([[1.0, -2.0], [0.5, 0.25]])
    assert bars.scores(reference, reference + np.array([[0.0, 0.015], [0.0, 0.0]]), "bfloat16").passed  # 0.015 / 2
    assert not bars.scores(reference, reference + np.array([[0.0, 0.0], [0.0, 0.02]]), "bfloat16").passed
    nothing = bars.scores(np.array([]), np.array([]), "bfloat16", groups=[[]])
    assert nothing.passed and nothing.summary == "max score difference 0.00e+00 (bar <= 0.01)"


def row(ids: list[int], values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(ids, dtype=np.int64), np.array(values, dtype=np.float32)


def test_sparse_bar_is_the_largest_difference_over_the_largest_weight() -> None:
    reference = [row([3, 7, 10], [2.0, 1.0, 0.1]), row([5], [0.5])]
    # text 0: 0.02 / 2 = 0.01; text 1: 0.004 / 0.5 = 0.008
    close = bars.sparse(reference, [row([3, 7, 10], [2.02, 0.99, 0.1]), row([5], [0.504])], "bfloat16")
    assert close.passed
    assert close.summary == "max weight difference 1.00e-02 of the largest weight (bar <= 0.02)"
    apart = [row([3, 7, 10], [2.06, 1.0, 0.1]), row([5], [0.5])]  # 0.06 / 2 = 0.03
    assert not bars.sparse(reference, apart, "bfloat16").passed
    assert bars.sparse(reference, apart, "bfloat16").summary == (
        "max weight difference 3.00e-02 of the largest weight (bar <= 0.02)"
    )
    assert bars.sparse(reference, apart, "int8").passed
    # text 1's one weight 0.52 for 0.5: 0.02 / 0.5 = 0.04, each vector over its own largest weight, not 2.0
    assert not bars.sparse(reference, [reference[0], row([5], [0.52])], "bfloat16").passed


def test_sparse_bar_fails_a_lost_dimension_and_names_it() -> None:
    reference = [row([3, 7, 10], [2.0, 1.0, 0.1]), row([2, 7], [1.0, 0.5])]
    lost = bars.sparse(reference, [reference[0], row([2], [1.0])], "int8")
    assert not lost.passed
    assert lost.summary == (
        "max weight difference 5.00e-01 of the largest weight (bar <= 0.05); text 1 loses dimension 7"
    )
    # a weight below the bar's share of the largest (0.02 of 2.0 is 0.01) may go, and a small one may come
    assert bars.sparse([row([3, 9], [2.0, 0.02])], [row([3, 4], [2.0, 0.01])], "bfloat16").passed
    assert bars.sparse([row([], [])], [row([], [])], "bfloat16").passed  # an empty vector


def test_maxsim_bar_is_the_largest_relative_difference_between_texts() -> None:
    a, b = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
    # MaxSim(a, a) = 2, (a, b) = 1 + 0, (b, a) = 1, (b, b) = 1; with b's row x 1.0005: 1.0005, 1.0005, 1.00100025
    close = bars.maxsim([a, b], [a, b * 1.0005], "bfloat16")
    assert close.passed
    assert close.summary == "max MaxSim relative difference 1.00e-03 (bar <= 0.002)"
    apart = [a, b * 1.003]  # (b, b) = 1.006009
    assert not bars.maxsim([a, b], apart, "bfloat16").passed
    assert bars.maxsim([a, b], apart, "bfloat16").summary == "max MaxSim relative difference 6.01e-03 (bar <= 0.002)"
    assert bars.maxsim([a, b], apart, "int8").passed
    assert not bars.maxsim([a, b], [a, b * 1.006], "int8").passed  # 1.012036
    # a's second row turned toward b's: MaxSim(a, b) = 1 + 0.6 against 1
    assert not bars.maxsim([a, b], [np.array([[1.0, 0.0], [0.6, 0.8]]), b], "int8").passed
    empty = np.zeros((0, 2))
    assert bars.maxsim([empty, b], [empty, b], "bfloat16").passed  # no tokens: MaxSim 0, no division by it
    # a score near 0 is held in units of the query's tokens (one here), not divided by almost nothing:
    # MaxSim([1, 0] with [0, 1]) = 0, with [0.001, 1] = 0.001: 1e-3 of one token
    q, d = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    near_zero = bars.maxsim([q, d], [q, np.array([[0.001, 1.0]])], "bfloat16")
    assert near_zero.passed and near_zero.summary == "max MaxSim relative difference 1.00e-03 (bar <= 0.002)"


def test_the_int8_bars_are_no_tighter_than_bfloat16s() -> None:
    assert bars.EMBEDDING_MIN_COSINE["int8"] <= bars.EMBEDDING_MIN_COSINE["bfloat16"] < 1
    for table in (bars.SCORE_MAX_DIFFERENCE, bars.SPARSE_MAX_DIFFERENCE, bars.MAXSIM_MAX_RELATIVE):
        assert 0 < table["bfloat16"] <= table["int8"]


def test_a_margin_holds_a_fast_mode_that_far_inside_the_bar() -> None:
    # min cosine 0.99993: inside 0.9999, not 1.5x inside it (1 - 1e-4 / 1.5 = 0.9999333)
    reference, fast = np.array([[1.0, 0.0]]), np.array([[0.99993, np.sqrt(1 - 0.99993**2)]])
    assert bars.embeddings(reference, fast, "bfloat16").passed
    held = bars.embeddings(reference, fast, "bfloat16", margin=1.5)
    assert not held.passed and held.summary == "min cosine to float32 0.999930 (bar >= 0.9999 with a 1.5x margin)"
    # a score 7e-3 away: inside 1e-2, not 1.5x inside it (6.67e-3)
    assert not bars.scores(np.array([0.5]), np.array([0.507]), "bfloat16", margin=1.5).passed
    assert bars.sparse([row([1], [1.0])], [row([1], [0.987])], "bfloat16", margin=1.5).passed  # 1.3e-2 <= 1.33e-2
    assert not bars.maxsim([np.array([[1.0, 0.0]])], [np.array([[1.0015, 0.0]])], "bfloat16", margin=1.5).passed


def test_calibration_pairs_are_each_query_against_the_other_texts() -> None:
    pairs, groups = bars.calibration_pairs()
    texts = bars.CALIBRATION_TEXTS
    assert len(groups) == 4 and [len(g) for g in groups] == [len(texts) - 1] * 4
    assert [i for g in groups for i in g] == list(range(len(pairs)))
    for q, group in enumerate(groups):
        assert {pairs[i][0] for i in group} == {texts[q]}
        assert sorted(pairs[i][1] for i in group) == sorted(t for k, t in enumerate(texts) if k != q)


# --- each job in bfloat16 (dtype="auto") and int8 on held-out texts ---


@dataclass(frozen=True)
class Job:
    """How a job is loaded from its folder, what it answers on the held-out texts, and its bar."""

    load: Callable[[Any], BaseEncoder]  # dtype -> the job
    outputs: Callable[[BaseEncoder], Any]
    judge: Callable[[Any, Any, str], bars.Measured]  # (float32's outputs, the fast mode's, mode)
    tables: tuple[dict[str, float], ...]  # the bars the judge holds it to


def sparse_rows(vectors: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    dense = vectors.to_dense().numpy()
    return [(np.flatnonzero(r), r[np.flatnonzero(r)]) for r in dense]


def lexical_rows(weights: list[dict[str, float]]) -> list[tuple[np.ndarray, np.ndarray]]:
    rows = []
    for w in weights:
        ids = np.array(sorted(int(k) for k in w), dtype=np.int64)
        rows.append((ids, np.array([w[str(i)] for i in ids], dtype=np.float32)))
    return rows


def m3_judge(reference: tuple, fast: tuple, mode: str) -> bars.Measured:
    held = (
        bars.embeddings(reference[0], fast[0], mode),
        bars.sparse(reference[1], fast[1], mode),
        bars.maxsim(reference[2], fast[2], mode),
    )
    return bars.Measured(all(m.passed for m in held), "; ".join(m.summary for m in held))


def bitwise_equal(a: Any, b: Any) -> bool:
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(bitwise_equal(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(np.asarray(a), np.asarray(b))


# the real all-MiniLM-L6-v2's loads take over 20 s on a shared 2-core machine
JOBS = (
    pytest.param("embedder", marks=pytest.mark.slow),
    "cross_encoder",
    "sparse_encoder",
    "multi_vector_encoder",
    "m3_encoder",
)


def make_job(name: str, root: Path, real_model_path: Path, texts: list[str]) -> Job:
    if name == "embedder":  # the real all-MiniLM-L6-v2
        return Job(
            lambda dtype: Embedder.from_pretrained(real_model_path, dtype=dtype),
            lambda job: job.encode(texts),
            bars.embeddings,
            (bars.EMBEDDING_MIN_COSINE,),
        )
    if name == "cross_encoder":
        folder = cross_encoder_folder(real_model_path, root / "cross", num_labels=1)
        pairs = [(query, document) for query in QUERIES for document in texts[:DOCUMENTS]]
        groups = [list(range(q * DOCUMENTS, (q + 1) * DOCUMENTS)) for q in range(len(QUERIES))]
        return Job(
            lambda dtype: CrossEncoder.from_pretrained(folder, dtype=dtype),
            lambda job: job.predict(pairs),
            lambda reference, fast, mode: bars.scores(reference, fast, mode, groups),
            (bars.SCORE_MAX_DIFFERENCE,),
        )
    if name == "sparse_encoder":
        folder = splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade", max_seq_length=64)
        return Job(
            lambda dtype: SparseEncoder.from_pretrained(folder, dtype=dtype),
            lambda job: sparse_rows(job.encode(texts)),
            bars.sparse,
            (bars.SPARSE_MAX_DIFFERENCE,),
        )
    if name == "multi_vector_encoder":  # tokens that point different ways, as a trained ColBERT's do
        folder = colbert_folder(real_model_path, root / "colbert", **COLBERT_OPTIONS, spread_tokens=True)
        return Job(
            lambda dtype: MultiVectorEncoder.from_pretrained(folder, dtype=dtype),
            lambda job: [vectors.numpy() for vectors in job.encode_document(texts)],
            bars.maxsim,
            (bars.MAXSIM_MAX_RELATIVE,),
        )
    folder = write_m3_folder(root / "bge-m3")  # test_m3.py's tiny XLM-RoBERTa with BGE-M3's heads
    return Job(
        lambda dtype: M3Encoder.from_pretrained(folder, dtype=dtype),
        lambda job: (lambda out: (out["dense_vecs"], lexical_rows(out["lexical_weights"]), out["colbert_vecs"]))(
            job.encode(texts, return_dense=True, return_sparse=True, return_colbert_vecs=True)
        ),
        m3_judge,
        (bars.EMBEDDING_MIN_COSINE, bars.SPARSE_MAX_DIFFERENCE, bars.MAXSIM_MAX_RELATIVE),
    )


@pytest.fixture(scope="module")
def held_out(corpus_texts: list[str]) -> list[str]:
    texts = corpus_texts[:HELD_OUT]
    assert not set(texts) & set(bars.CALIBRATION_TEXTS) and not set(QUERIES) & set(bars.CALIBRATION_TEXTS)
    return texts


@pytest.fixture(scope="module", params=JOBS)
def job(
    request: pytest.FixtureRequest, real_model_path: Path, held_out: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    root = tmp_path_factory.mktemp(request.param)
    yield make_job(request.param, root, real_model_path, held_out)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def float32(job: Job) -> Any:
    """float32's outputs of the held-out texts (dtype=None: the reference)."""
    return job.outputs(job.load(None))


@pytest.fixture(scope="module")
def auto(job: Job) -> tuple[BaseEncoder, Any]:
    """The job loaded with dtype="auto" where the CPU's verdict is bfloat16, and its outputs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FORCE_VARIABLE, "bfloat16")
        encoder = job.load("auto")
    return encoder, job.outputs(encoder)


def min_cosine(reference: np.ndarray, fast: np.ndarray) -> float:
    """The embeddings bar's number by another route: unit rows, then their dot products."""
    a = reference / np.linalg.norm(reference.astype(np.float64), axis=1, keepdims=True)
    b = fast / np.linalg.norm(fast.astype(np.float64), axis=1, keepdims=True)
    return float(np.einsum("nd,nd->n", a, b).min())


def test_auto_keeps_bfloat16_within_the_bar_or_float32_exactly(
    job: Job, float32: Any, auto: tuple[BaseEncoder, Any]
) -> None:
    encoder, outputs = auto
    measured = job.judge(float32, outputs, "bfloat16")
    if encoder.precision == "bfloat16":
        assert encoder.precision_reason.startswith("bfloat16: dtype='auto' picks it: forced by BERTLITE_AUTO_DTYPE")
        assert not bitwise_equal(outputs, float32)  # bfloat16 runs
        assert measured.passed, measured.summary
        if isinstance(encoder, Embedder):
            assert min_cosine(float32, outputs) >= bars.EMBEDDING_MIN_COSINE["bfloat16"]
    else:
        assert encoder.precision == "float32" and encoder.dtype == torch.float32
        reason = "float32: dtype='auto' keeps float32: bfloat16 misses this job's bar"
        assert encoder.precision_reason.startswith(reason)
        assert bitwise_equal(outputs, float32), f"{encoder.precision_reason}; held out: {measured.summary}"


@pytest.mark.parametrize("bar", ["loose", "impossible"])
def test_the_bar_decides_what_auto_keeps(job: Job, float32: Any, bar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bar any bfloat16 answer meets keeps bfloat16, whose outputs differ from float32's within it; a bar none
    meets (a cosine above 1, no difference at all) goes back to float32's weights, bit for bit."""
    monkeypatch.setenv(FORCE_VARIABLE, "bfloat16")
    for table in job.tables:
        if table is bars.EMBEDDING_MIN_COSINE:
            monkeypatch.setitem(table, "bfloat16", 0.9 if bar == "loose" else 1.0000001)
        else:
            monkeypatch.setitem(table, "bfloat16", 0.5 if bar == "loose" else 0.0)
    encoder = job.load("auto")
    outputs = job.outputs(encoder)
    if bar == "loose":
        assert encoder.precision == "bfloat16", encoder.precision_reason
        assert not bitwise_equal(outputs, float32)
        measured = job.judge(float32, outputs, "bfloat16")
        assert measured.passed, measured.summary
        if isinstance(encoder, Embedder):
            assert 0.9 <= min_cosine(float32, outputs) < 1 - 1e-7
    else:
        assert encoder.precision == "float32" and encoder.dtype == torch.float32
        assert "bfloat16 misses this job's bar" in encoder.precision_reason
        margin = f"with a {bars.AUTO_MARGIN}x margin)"
        assert (
            f"(bar >= 1.0000001 {margin}" in encoder.precision_reason
            or f"(bar <= 0.0 {margin}" in encoder.precision_reason
        )
        assert bitwise_equal(outputs, float32)


def test_int8_meets_its_bar_on_held_out_texts(job: Job, float32: Any) -> None:
    encoder = job.load("int8")
    assert encoder.precision == "int8"
    assert encoder.precision_reason.startswith("int8: asked for; this job's bar on the calibration texts: ")
    outputs = job.outputs(encoder)
    measured = job.judge(float32, outputs, "int8")
    assert measured.passed, measured.summary
    if isinstance(encoder, Embedder):
        assert min_cosine(float32, outputs) >= bars.EMBEDDING_MIN_COSINE["int8"]


def test_int8_that_misses_its_bar_runs_and_says_so(job: Job, float32: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """int8 is asked for, so it runs whatever the bar says; a bar it cannot meet is one warning at load."""
    for table in job.tables:
        monkeypatch.setitem(table, "int8", 1.0000001 if table is bars.EMBEDDING_MIN_COSINE else 0.0)
    with pytest.warns(Int8PrecisionWarning, match=r"int8 misses this job's bar .*\(bar (>= 1.0000001|<= 0.0)\)"):
        encoder = job.load("int8")
    assert encoder.precision == "int8"
    assert not bitwise_equal(job.outputs(encoder), float32)


def test_bfloat16_asked_for_meets_its_bar_on_held_out_texts(job: Job, float32: Any) -> None:
    """dtype="bfloat16" by name: float32 Parameters, GEMMs on bf16 inputs, held to the same bar as auto's."""
    encoder = job.load("bfloat16")
    assert (encoder.precision, encoder.dtype) == ("bfloat16", torch.float32)
    assert encoder.precision_reason == "bfloat16: asked for"
    outputs = job.outputs(encoder)
    assert not bitwise_equal(outputs, float32)  # bfloat16 runs
    measured = job.judge(float32, outputs, "bfloat16")
    assert measured.passed, measured.summary
    if isinstance(encoder, Embedder):
        assert min_cosine(float32, outputs) >= bars.EMBEDDING_MIN_COSINE["bfloat16"]
