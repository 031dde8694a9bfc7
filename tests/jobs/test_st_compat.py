"""sentence-transformers' inference API where its own tests use it: each case run on bertlite and on
sentence-transformers in the same test, on tiny folders built here."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentence_transformers
import torch

import bertlite
from tests.helpers import cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import one_torch_thread  # noqa: F401 (an autouse fixture)

TOL = 1e-5
TEXTS = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PAIRS = [("How many people live in Berlin?", "Berlin has 3.5 million people."), ("a cat", "a dog sleeps")]
CPU = {"device": "cpu"}


def as_numpy(value: Any) -> np.ndarray:
    """An output of either library as a dense float64 array."""
    if isinstance(value, torch.Tensor):
        value = value.to_dense() if value.is_sparse else value
        return value.double().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


@pytest.fixture(scope="module")
def splade(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = masked_lm_folder(real_model_path, tmp_path_factory.mktemp("compat") / "mlm")
    return splade_folder(base, base.parent / "splade")


@pytest.fixture(scope="module")
def reranker(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cross_encoder_folder(real_model_path, tmp_path_factory.mktemp("compat") / "reranker", num_labels=1)


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_sentences_keyword_is_inputs_in_sentence_transformer(real_model_path: Path, method: str) -> None:
    ours = bertlite.SentenceTransformer(str(real_model_path), **CPU)
    theirs = sentence_transformers.SentenceTransformer(str(real_model_path), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = getattr(ours, method)(sentences=TEXTS)
    np.testing.assert_allclose(got, getattr(theirs, method)(sentences=TEXTS), atol=TOL)
    # given both, the new name wins, as in sentence-transformers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        both = getattr(ours, method)(sentences=["ignored"], inputs=TEXTS[:1])
    np.testing.assert_allclose(both, getattr(theirs, method)(TEXTS[:1]), atol=TOL)


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_sentences_keyword_is_inputs_in_sparse_encoder(splade: Path, method: str) -> None:
    ours = bertlite.SparseEncoder(str(splade), **CPU)
    theirs = sentence_transformers.SparseEncoder(str(splade), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = getattr(ours, method)(sentences=TEXTS)
    np.testing.assert_allclose(as_numpy(got), as_numpy(getattr(theirs, method)(sentences=TEXTS)), atol=TOL)


def test_sentences_and_activation_fct_keywords_in_cross_encoder(reranker: Path) -> None:
    ours = bertlite.CrossEncoder(str(reranker), **CPU)
    theirs = sentence_transformers.CrossEncoder(str(reranker), **CPU)
    with pytest.warns(FutureWarning, match="`sentences` argument was renamed"):
        got = ours.predict(sentences=PAIRS, activation_fn=torch.nn.Identity())
    expected = theirs.predict(sentences=PAIRS, activation_fct=torch.nn.Identity())
    np.testing.assert_allclose(got, expected, atol=TOL)
    with pytest.warns(FutureWarning, match="`activation_fct` argument was renamed"):
        ranked = ours.rank(PAIRS[0][0], [b for _, b in PAIRS], activation_fct=torch.nn.Identity())
    expected_ranks = theirs.rank(PAIRS[0][0], [b for _, b in PAIRS], activation_fct=torch.nn.Identity())
    assert [r["corpus_id"] for r in ranked] == [r["corpus_id"] for r in expected_ranks]
    np.testing.assert_allclose([r["score"] for r in ranked], [r["score"] for r in expected_ranks], atol=TOL)
