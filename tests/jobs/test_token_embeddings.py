"""Embedder.encode(output_value="token_embeddings") against sentence-transformers on the real checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from bertlite import Embedder


@pytest.fixture(scope="module")
def texts(corpus_texts: list[str]) -> list[str]:
    # Short, unicode, corpus texts of 9 to 59 tokens, and the longest, past the model's 256-token max_seq_length.
    return ["a", "Ünïcödé: naïve café, 東京 🙂", *corpus_texts[:6], max(corpus_texts, key=len)]


@pytest.fixture(scope="module")
def packed(real_model_path: Path) -> Embedder:
    return Embedder.from_pretrained(real_model_path, dtype=None)


@pytest.fixture(scope="module", params=["packed", "padded"])
def embedder(request: pytest.FixtureRequest, packed: Embedder, real_model_path: Path) -> Embedder:
    """The packed embedder, and one that runs padded batches, as transformers does."""
    return packed if request.param == "packed" else Embedder.from_pretrained(real_model_path, dtype=None, unpad=False)


@pytest.fixture(scope="module")
def reference(real_model_path: Path, texts: list[str]) -> list[np.ndarray]:
    st = SentenceTransformer(str(real_model_path), device="cpu")
    return [t.numpy() for t in st.encode(texts, output_value="token_embeddings")]


def assert_same_tokens(ours: list, theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.dtype == np.float32
        assert a.shape == b.shape, f"text {i}: {a.shape}, sentence-transformers {b.shape}"
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_token_embeddings_equal_sentence_transformers(
    embedder: Embedder, texts: list[str], reference: list[np.ndarray]
) -> None:
    ours = embedder.encode(texts, output_value="token_embeddings")
    assert_same_tokens(ours, reference)
    assert max(len(t) for t in ours) == 256  # the longest text was truncated to max_seq_length
    tokenized = embedder.encode_tokenized(embedder.tokenize(texts), batch_size=3, output_value="token_embeddings")
    assert_same_tokens(tokenized, reference)
    as_torch = embedder.encode(texts[:2], convert_to="torch", output_value="token_embeddings")
    assert all(isinstance(t, torch.Tensor) for t in as_torch)


def test_sentence_embeddings_stay_the_default(packed: Embedder, texts: list[str]) -> None:
    embedder = packed
    vectors = embedder.encode(texts)
    assert vectors.shape == (len(texts), 384)
    np.testing.assert_array_equal(embedder.encode(texts, output_value="sentence_embedding"), vectors)
    np.testing.assert_array_equal(embedder.encode_tokenized(embedder.tokenize(texts)), vectors)


def test_unknown_output_value_is_a_clear_error(packed: Embedder) -> None:
    embedder = packed
    with pytest.raises(ValueError, match="output_value='tokens' must be 'sentence_embedding' or 'token_embeddings'"):
        embedder.encode(["a"], output_value="tokens")
    with pytest.raises(ValueError, match="output_value='tokens'"):
        embedder.encode_tokenized(embedder.tokenize(["a"]), output_value="tokens")
