"""Every job at its defaults (no dtype given) computes float32: the numbers transformers and sentence-transformers
compute, within 1e-5, on models built here (the real all-MiniLM-L6-v2, tiny random heads).

BERTLITE_AUTO_DTYPE=bfloat16 is set for every test, so a default that went through dtype="auto" would run
bfloat16, whose errors (about 1e-3) fail the bar: test_bfloat16_fails_the_bar shows that it does."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from sentence_transformers import CrossEncoder as STCrossEncoder
from sentence_transformers import MultiVectorEncoder as STMultiVectorEncoder
from sentence_transformers import SentenceTransformer as STSentenceTransformer
from sentence_transformers import SparseEncoder as STSparseEncoder

import bertlite
from bertlite import CrossEncoder, Embedder, MultiVectorEncoder, SparseEncoder
from bertlite.errors import SlowDtypeWarning
from bertlite.jobs.m3 import M3Encoder
from tests.helpers import (
    COLBERT_OPTIONS,
    bert_m3_folder,
    colbert_folder,
    cross_encoder_folder,
    m3_reference,
    masked_lm_folder,
    splade_folder,
)

# What they check must hold where dtype="auto" would run bfloat16 (the defaults never ask for it).
pytestmark = pytest.mark.usefixtures("auto_would_pick_bfloat16")

TOL = 1e-5
TEXTS = [
    "A man is eating food.",
    "a",
    "naïve café, Größe, 日本語のテキスト and emoji 🙂",
    "Python's asyncio runs coroutines on an event loop, one task at a time.",
]
PAIRS = [("what is a list", text) for text in TEXTS]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("defaults")


def assert_float32(job: object) -> None:
    assert job.dtype == torch.float32 and job.precision == "float32"


def max_diff(ours: object, theirs: object) -> float:
    ours = ours.to_dense() if isinstance(ours, torch.Tensor) and ours.is_sparse else ours
    theirs = theirs.to_dense() if isinstance(theirs, torch.Tensor) and theirs.is_sparse else theirs
    return float(np.abs(np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)).max())


def test_embedder_equals_sentence_transformers(real_model_path: Path) -> None:
    embedder = Embedder.from_pretrained(real_model_path)
    assert_float32(embedder)
    expected = STSentenceTransformer(str(real_model_path), device="cpu").encode(TEXTS)
    assert max_diff(embedder.encode(TEXTS), expected) <= TOL


def test_bfloat16_fails_the_bar(real_model_path: Path) -> None:
    """The bar tells float32 from bfloat16, so the tests above fail where a default runs bfloat16."""
    expected = STSentenceTransformer(str(real_model_path), device="cpu").encode(TEXTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowDtypeWarning)  # a CPU without native bf16 emulates it
        embedder = Embedder.from_pretrained(real_model_path, dtype="bfloat16")
    assert max_diff(embedder.encode(TEXTS), expected) > TOL


def test_sentence_transformer_equals_sentence_transformers(real_model_path: Path) -> None:
    ours = bertlite.SentenceTransformer(str(real_model_path), device="cpu")
    assert_float32(ours)
    expected = STSentenceTransformer(str(real_model_path), device="cpu").encode(TEXTS)
    assert max_diff(ours.encode(TEXTS), expected) <= TOL


def test_cross_encoder_equals_sentence_transformers(real_model_path: Path, root: Path) -> None:
    folder = cross_encoder_folder(real_model_path, root / "reranker", num_labels=1)
    expected = STCrossEncoder(str(folder), device="cpu").predict(PAIRS)
    for ours in (CrossEncoder.from_pretrained(folder), CrossEncoder(str(folder))):
        assert_float32(ours)
        assert max_diff(ours.predict(PAIRS), expected) <= TOL


def test_cross_encoder_on_a_plain_transformers_classifier(real_model_path: Path, root: Path) -> None:
    """A folder as transformers saves a BertForSequenceClassification, no sentence-transformers files: its
    logits (two labels: no activation) equal transformers' own."""
    folder = cross_encoder_folder(real_model_path, root / "classifier", num_labels=2, save_with_st=False)
    model = transformers.BertForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = model(**batch).logits.numpy()
    for ours in (CrossEncoder.from_pretrained(folder), CrossEncoder(str(folder))):
        assert_float32(ours)
        assert ours.num_labels == 2
        assert max_diff(ours.predict(PAIRS), expected) <= TOL


def test_sparse_encoder_equals_sentence_transformers(real_model_path: Path, root: Path) -> None:
    folder = splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade", max_seq_length=24)
    expected = STSparseEncoder(str(folder), device="cpu").encode(TEXTS, convert_to_sparse_tensor=False)
    for ours in (SparseEncoder.from_pretrained(folder), SparseEncoder(str(folder))):
        assert_float32(ours)
        got = ours.encode(TEXTS, convert_to_sparse_tensor=False)
        assert torch.equal(got != 0, expected != 0), "active dimensions differ"
        assert max_diff(got, expected) <= TOL


def test_multi_vector_encoder_equals_sentence_transformers(real_model_path: Path, root: Path) -> None:
    folder = colbert_folder(real_model_path, root / "colbert", **COLBERT_OPTIONS, spread_tokens=True)
    st = STMultiVectorEncoder(str(folder), device="cpu")
    expected = {"query": st.encode_query(TEXTS), "document": st.encode_document(TEXTS)}
    for ours in (MultiVectorEncoder.from_pretrained(folder), MultiVectorEncoder(str(folder))):
        assert_float32(ours)
        got = {"query": ours.encode_query(TEXTS), "document": ours.encode_document(TEXTS)}
        for kind in ("query", "document"):
            for mine, theirs in zip(got[kind], expected[kind], strict=True):
                assert np.shape(mine) == tuple(theirs.shape)
                assert max_diff(mine, theirs.numpy()) <= TOL, kind


def test_m3_encoder_equals_transformers(real_model_path: Path, root: Path) -> None:
    folder = bert_m3_folder(real_model_path, root / "m3")
    expected = m3_reference(folder, TEXTS)
    ours = M3Encoder.from_pretrained(folder)
    assert_float32(ours)
    got = ours.encode(TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    assert max_diff(got["dense_vecs"], np.stack(expected["dense_vecs"])) <= TOL
    for mine, theirs in zip(got["colbert_vecs"], expected["colbert_vecs"], strict=True):
        assert mine.shape == theirs.shape and max_diff(mine, theirs) <= TOL
    assert any(expected["lexical_weights"]), "no text kept a lexical weight"
    for mine, theirs in zip(got["lexical_weights"], expected["lexical_weights"], strict=True):
        assert set(mine) == set(theirs)
        assert max((abs(float(mine[k]) - theirs[k]) for k in theirs), default=0.0) <= TOL
