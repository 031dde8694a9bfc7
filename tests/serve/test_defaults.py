"""`bertlite serve MODEL` without --dtype serves float32: every route of every kind of model answers what
sentence-transformers (or transformers, for BGE-M3's heads) computes, within 1e-5, over HTTP on 127.0.0.1, and
/info says which precision runs and why. BERTLITE_AUTO_DTYPE=bfloat16 is set, so a default that went through
--dtype auto would run bfloat16 there."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from sentence_transformers import CrossEncoder as STCrossEncoder
from sentence_transformers import MultiVectorEncoder as STMultiVectorEncoder
from sentence_transformers import SentenceTransformer as STSentenceTransformer
from sentence_transformers import SparseEncoder as STSparseEncoder

from bertlite.cli import build_parser
from bertlite.cli.loading import load_job
from tests.helpers import (
    bert_m3_folder,
    colbert_folder,
    cross_encoder_folder,
    m3_reference,
    masked_lm_folder,
    splade_folder,
)
from tests.serve_helpers import one_torch_thread, running  # noqa: F401 (one_torch_thread: an autouse fixture)

pytestmark = pytest.mark.slow  # a server per kind of model, over HTTP

# What they check must hold where dtype="auto" would run bfloat16 (the defaults never ask for it).
pytestmark = pytest.mark.usefixtures("auto_would_pick_bfloat16")

TOL = 1e-5
QUERY = "how do I sort a list in python"
TEXTS = ["sorted(list) returns a new list", "the weather is fine today", "naïve café 🙂", "tea"]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
FLOAT32_NOTE = "bertlite serve: running float32 (the reference's numbers); --dtype auto may run bfloat16 here"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serve-defaults")


@contextlib.contextmanager
def serve_default(folder: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[str, dict], object]]:
    """post(path, body) -> the JSON answer of `bertlite serve FOLDER`'s job, loaded as the command loads it at
    its defaults, in a server on 127.0.0.1; checks the line it printed at load and /info's precision."""
    args = build_parser().parse_args(["serve", str(folder)])
    with running(lambda: load_job(args)) as (url, _):
        assert FLOAT32_NOTE in capsys.readouterr().err.splitlines()
        info = httpx.get(f"{url}/info").json()
        assert info["precision"] == info["dtype"] == "float32"
        assert info["precision_reason"].startswith("float32: the reference's numbers"), info

        def post(path: str, body: dict) -> object:
            r = httpx.post(f"{url}{path}", json=body, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        yield post


def close(got: object, expected: object) -> None:
    diff = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64))
    assert diff.size == 0 or diff.max() <= TOL


def test_embedding_routes(real_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = STSentenceTransformer(str(real_model_path), device="cpu")
    vectors = st.encode(TEXTS)
    tokens = st.encode(TEXTS, output_value="token_embeddings")
    with serve_default(real_model_path, capsys) as post:
        close([d["embedding"] for d in post("/v1/embeddings", {"input": TEXTS, "model": "m"})["data"]], vectors)
        close(post("/embed", {"inputs": TEXTS}), vectors)
        for row, expected in zip(post("/embed_all", {"inputs": TEXTS}), tokens, strict=True):
            assert np.shape(row) == tuple(expected.shape)
            close(row, expected.numpy())


def test_rerank_routes(real_model_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = cross_encoder_folder(real_model_path, root / "reranker", num_labels=1)
    scores = STCrossEncoder(str(folder), device="cpu").predict([(QUERY, t) for t in TEXTS])
    order = np.argsort(-scores, kind="stable")
    with serve_default(folder, capsys) as post:
        ranked = post("/rerank", {"query": QUERY, "texts": TEXTS})
        assert [x["index"] for x in ranked] == order.tolist()
        close([x["score"] for x in ranked], scores[order])
        for path in ("/v1/rerank", "/v2/rerank"):
            results = post(path, {"query": QUERY, "documents": TEXTS})["results"]
            assert [x["index"] for x in results] == order.tolist()
            close([x["relevance_score"] for x in results], scores[order])
        predicted = post("/predict", {"inputs": [[QUERY, t] for t in TEXTS]})
        close([row[0]["score"] for row in predicted], scores)


def test_classifier_predict(real_model_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = cross_encoder_folder(real_model_path, root / "classifier", num_labels=3, seed=1, id2label=LABELS)
    pairs = [(QUERY, t) for t in TEXTS]
    probabilities = STCrossEncoder(str(folder), device="cpu").predict(pairs, apply_softmax=True)
    with serve_default(folder, capsys) as post:
        for row, expected in zip(post("/predict", {"inputs": [list(p) for p in pairs]}), probabilities, strict=True):
            got = {p["label"]: p["score"] for p in row}
            close([got[LABELS[i]] for i in range(3)], expected)


def test_embed_sparse(real_model_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade")
    expected = STSparseEncoder(str(folder), device="cpu").encode(TEXTS, convert_to_sparse_tensor=False).numpy()
    with serve_default(folder, capsys) as post:
        for row, dense in zip(post("/embed_sparse", {"inputs": TEXTS}), expected, strict=True):
            assert [x["index"] for x in row] == np.flatnonzero(dense).tolist()
            close([x["value"] for x in row], dense[np.flatnonzero(dense)])


def test_embed_all_of_a_multi_vector_model(
    real_model_path: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = colbert_folder(
        real_model_path, root / "colbert", prompts={"query": "query: ", "document": "passage: "}, spread_tokens=True
    )
    st = STMultiVectorEncoder(str(folder), device="cpu")
    expected = {True: st.encode_query(TEXTS), False: st.encode_document(TEXTS)}
    with serve_default(folder, capsys) as post:
        for is_query, vectors in expected.items():
            for row, theirs in zip(post("/embed_all", {"inputs": TEXTS, "is_query": is_query}), vectors, strict=True):
                assert np.shape(row) == tuple(theirs.shape)
                close(row, theirs.numpy())


def test_m3_routes(real_model_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = bert_m3_folder(real_model_path, root / "m3")
    expected = m3_reference(folder, TEXTS)
    with serve_default(folder, capsys) as post:
        close(
            [d["embedding"] for d in post("/v1/embeddings", {"input": TEXTS, "model": "m"})["data"]],
            expected["dense_vecs"],
        )
        close(post("/embed", {"inputs": TEXTS}), expected["dense_vecs"])
        for row, weights in zip(post("/embed_sparse", {"inputs": TEXTS}), expected["lexical_weights"], strict=True):
            assert [str(x["index"]) for x in row] == sorted(weights, key=int)
            close([x["value"] for x in row], [weights[str(x["index"])] for x in row])
        for row, vectors in zip(post("/embed_all", {"inputs": TEXTS}), expected["colbert_vecs"], strict=True):
            assert np.shape(row) == vectors.shape
            close(row, vectors)
