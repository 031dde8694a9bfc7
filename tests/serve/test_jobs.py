"""`bertlite serve` for every job over real HTTP on 127.0.0.1: the cohere client on /v2/rerank, httpx on
TEI's routes and Cohere's /v1/rerank, the openai client with token ids; every answer equals the Python
API on the same tiny checkpoint (built here with transformers and sentence-transformers); routes a
model cannot serve answer 424 naming what it serves; kind detection and --task."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cohere
import httpx
import numpy as np
import openai
import pytest

from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.kinds import detect_kind, kind_of, load_job
from bertlite.jobs.multi_vector import MultiVectorEncoder
from bertlite.jobs.sparse_encoder import SparseEncoder
from bertlite.serve.app import Limits
from tests.helpers import colbert_folder, cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import (
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    running,
    tiny_model_folder,
)

pytestmark = pytest.mark.slow  # tiny checkpoints saved by sentence-transformers, a server per model

KEY = "sk-jobs"
QUERY = "how do I sort a list in python"
DOCUMENTS = ["sorted(list) returns a new list", "the weather is fine today", "list.sort() sorts in place", "tea"]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
PROMPTS = {"query": "search query: ", "document": "passage: "}


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random checkpoints (the real tokenizer) of every kind, saved by sentence-transformers as its
    users save them; cls1 is the reranker's plain transformers folder."""
    root = tmp_path_factory.mktemp("jobs")
    cross_encoder_folder(real_model_path, root / "reranker", num_labels=1)
    cross_encoder_folder(real_model_path, root / "classifier", num_labels=3, seed=1, id2label=LABELS)
    splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade")
    colbert_folder(real_model_path, root / "colbert", prompts=PROMPTS)  # prompts that tell queries from documents
    tiny_model_folder(real_model_path, root / "embedding")
    folders = {name: root / name for name in ("reranker", "classifier", "splade", "colbert", "embedding")}
    return {**folders, "cls1": root / "reranker-raw"}


def test_detect_kind_reads_the_folders_sentence_transformers_saves(
    folders: dict[str, Path], real_model_path: Path
) -> None:
    assert detect_kind(folders["reranker"]) == "cross-encoder"
    assert detect_kind(folders["cls1"]) == "cross-encoder"  # a bare transformers classifier: its architectures
    assert detect_kind(folders["splade"]) == "sparse"
    assert detect_kind(folders["colbert"]) == "multi-vector"
    assert detect_kind(real_model_path) == "embedding"
    assert detect_kind(folders["embedding"]) == "embedding"  # no sentence-transformers files at all
    assert kind_of(load_job("sparse", folders["splade"], dtype="float32")) == "sparse"
    with pytest.raises(ValueError, match="unknown kind 'colbert'; one of embedding, cross-encoder"):
        load_job("colbert", folders["colbert"])


def test_serve_detects_the_kind_and_task_forces_it(folders: dict[str, Path]) -> None:
    from bertlite.cli import build_parser
    from bertlite.cli.loading import load_job

    def load(*argv: str) -> object:
        return load_job(build_parser().parse_args(["serve", *argv, "--dtype", "float32"]))

    assert isinstance(load(str(folders["reranker"])), CrossEncoder)
    assert isinstance(load(str(folders["colbert"])), MultiVectorEncoder)
    # A transformers classifier's base model, read as a plain embedding model.
    assert isinstance(load(str(folders["cls1"])), CrossEncoder)
    assert isinstance(load(str(folders["cls1"]), "--task", "embedding"), Embedder)
    with pytest.raises(ValueError, match="--truncate-dim: the model is a cross-encoder model"):
        load(str(folders["reranker"]), "--truncate-dim", "8")


@pytest.fixture(scope="module")
def reranker(folders: dict[str, Path]) -> CrossEncoder:
    return CrossEncoder.from_pretrained(folders["reranker"], dtype="float32")


@pytest.fixture(scope="module")
def rerank_server(reranker: CrossEncoder) -> Iterator[str]:
    limits = Limits(max_client_batch_size=8, max_rerank_documents=12)
    with running(lambda: reranker, limits, model_name="rr", api_key=KEY) as (url, _):
        yield url


def test_cohere_client_rerank_equals_cross_encoder_rank(rerank_server: str, reranker: CrossEncoder) -> None:
    expected = reranker.rank(QUERY, DOCUMENTS)
    assert np.diff([r["score"] for r in expected]).max() < -1e-5  # no near-ties whose order could flip
    client = cohere.ClientV2(api_key=KEY, base_url=rerank_server, max_retries=0)
    got = client.rerank(model="rr", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in got.results] == [r["corpus_id"] for r in expected[:2]]
    assert np.allclose([r.relevance_score for r in got.results], [r["score"] for r in expected[:2]], atol=1e-6)
    everything = client.rerank(model="rr", query=QUERY, documents=DOCUMENTS, top_n=50)  # over: all, as Cohere
    assert [r.index for r in everything.results] == [r["corpus_id"] for r in expected]
    with pytest.raises(cohere.UnprocessableEntityError):
        client.rerank(model="rr", query=QUERY, documents=DOCUMENTS, top_n=0)


def test_v1_rerank_takes_document_objects_and_returns_them(rerank_server: str, reranker: CrossEncoder) -> None:
    expected = reranker.rank(QUERY, DOCUMENTS)
    # As Cohere's v1: an object's other fields travel with it and come back under return_documents.
    documents = [{"text": d, "id": f"doc-{i}", "title": "t"} if i % 2 else {"text": d} for i, d in enumerate(DOCUMENTS)]
    body = {"query": QUERY, "documents": documents, "return_documents": True}
    r = httpx.post(f"{rerank_server}/v1/rerank", json=body, headers=auth())
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == [e["corpus_id"] for e in expected]
    assert [x["document"] for x in results] == [documents[e["corpus_id"]] for e in expected]
    tokens = sum(len(e.ids) for e in reranker.encodings([(QUERY, d) for d in DOCUMENTS]))
    assert r.json()["usage"] == {"total_tokens": tokens}


def test_tei_rerank_and_predict_equal_predict(rerank_server: str, reranker: CrossEncoder) -> None:
    pairs = [(QUERY, d) for d in DOCUMENTS]
    scores = reranker.predict(pairs)
    logits = reranker.encode_tokenized(reranker.encodings(pairs))[:, 0]
    body = {"query": QUERY, "texts": DOCUMENTS, "return_text": True}
    ranked = httpx.post(f"{rerank_server}/rerank", json=body, headers=auth()).json()
    assert [x["index"] for x in ranked] == list(np.argsort(-scores, kind="stable"))
    assert np.allclose([x["score"] for x in ranked], scores[[x["index"] for x in ranked]], atol=1e-6)
    assert [x["text"] for x in ranked] == [DOCUMENTS[x["index"]] for x in ranked]
    raw = httpx.post(
        f"{rerank_server}/rerank", json={"query": QUERY, "texts": DOCUMENTS, "raw_scores": True}, headers=auth()
    )
    assert np.allclose([x["score"] for x in raw.json()], logits[[x["index"] for x in raw.json()]], atol=1e-6)
    assert not np.allclose(logits, scores, atol=1e-3)  # the activation matters

    one = httpx.post(f"{rerank_server}/predict", json={"inputs": list(pairs[0])}, headers=auth()).json()
    assert one == [{"label": "LABEL_0", "score": pytest.approx(float(scores[0]), abs=1e-6)}]
    batch = httpx.post(f"{rerank_server}/predict", json={"inputs": [list(p) for p in pairs]}, headers=auth()).json()
    assert np.allclose([b[0]["score"] for b in batch], scores, atol=1e-6)


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        (
            "/v1/rerank",
            {"query": QUERY, "documents": DOCUMENTS, "top_n": -1},
            422,
            "top_n: must be an integer >= 1, got -1",
        ),
        ("/v1/rerank", {"query": QUERY, "documents": []}, 422, "documents: must not be an empty list"),
        ("/v1/rerank", {"query": "", "documents": DOCUMENTS}, 422, "query: must not be empty"),
        (
            "/rerank",
            {"query": QUERY, "texts": ["a", ""]},
            422,
            "texts[1]: must not be empty (a pair with an empty side)",
        ),
        (
            "/rerank",
            {"query": QUERY, "texts": ["a"] * 13},
            413,
            "13 documents in one request, over --max-rerank-documents 12",
        ),
        (
            "/v2/rerank",
            {"query": QUERY, "documents": ["a"] * 13},
            413,
            "13 documents in one request, over --max-rerank-documents 12",
        ),
        (
            "/v1/rerank",
            {"query": QUERY, "documents": [{"title": "t"}]},
            422,
            'documents[0]: an object must hold "text" (a string); its fields: title',
        ),
        ("/v1/rerank", {"query": QUERY, "documents": [{"text": 1}]}, 422, 'documents[0]: "text" must be a string'),
        ("/v1/rerank", {"query": QUERY, "documents": [["a"]]}, 422, "documents[0]: must be a string, got a list"),
        (
            "/predict",
            {"inputs": [["a", "b"]] * 9},
            413,
            "9 inputs in one request, over --max-client-batch-size 8",
        ),
        ("/predict", {"inputs": [["a", "b"], ["", "c"]]}, 422, "inputs[1]: a pair with an empty first text"),
        ("/predict", {"inputs": []}, 422, "inputs: must be a text, a [text, text] pair, or a non-empty list"),
        (
            "/embed",
            {"inputs": "x"},
            424,
            "/embed is not served: the model is a reranker (a cross-encoder with one label); it serves /rerank, "
            "/v1/rerank, /v2/rerank, /predict, /tokenize, /decode",
        ),
        ("/embed_sparse", {"inputs": "x"}, 424, "/embed_sparse is not served: the model is a reranker"),
        ("/v1/embeddings", {"input": "x"}, 424, "/v1/embeddings is not served: the model is a reranker"),
    ],
)
def test_rerank_errors_name_the_field(rerank_server: str, path: str, body: dict, status: int, message: str) -> None:
    r = httpx.post(f"{rerank_server}{path}", json=body, headers=auth())
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["message"] if isinstance(error, dict) else error).startswith(message), r.text


def test_info_tokenize_and_decode_on_a_reranker(rerank_server: str, reranker: CrossEncoder) -> None:
    info = httpx.get(f"{rerank_server}/info", headers=auth()).json()
    assert info["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    tokens = httpx.post(f"{rerank_server}/tokenize", json={"inputs": ["Sort it"]}, headers=auth()).json()
    ids = reranker.backend_tokenizer.encode("Sort it").ids
    assert [t["id"] for t in tokens[0]] == ids
    assert tokens[0][0] == {"id": ids[0], "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[0][1] == {"id": ids[1], "text": "Sort", "special": False, "start": 0, "stop": 4}
    # As TEI, offsets count UTF-8 bytes: "é" is two.
    accented = httpx.post(f"{rerank_server}/tokenize", json={"inputs": "café au lait"}, headers=auth()).json()
    assert [(t["text"], t["start"], t["stop"]) for t in accented[0][1:-1]] == [
        ("café", 0, 5),
        ("au", 6, 8),
        ("lai", 9, 12),
        ("t", 12, 13),  # the word piece "##t"
    ]
    decoded = httpx.post(f"{rerank_server}/decode", json={"ids": ids}, headers=auth()).json()
    assert decoded == ["sort it"]
    bad = httpx.post(f"{rerank_server}/decode", json={"ids": [[5], [1, 40000]]}, headers=auth())
    assert bad.status_code == 422 and bad.json()["error"].startswith("ids[1]: token id 40000 is not below"), bad.text


def test_a_classifier_predicts_labels_and_refuses_rerank(folders: dict[str, Path]) -> None:
    classifier = CrossEncoder.from_pretrained(folders["classifier"], dtype="float32")
    inputs = [["a premise", "a hypothesis"], ["good", "day"], ["bad", "day"]]
    expected = classifier.predict([tuple(x) for x in inputs], apply_softmax=True)
    logits = classifier.encode_tokenized(classifier.encodings(["one text"]))[0]  # the activation is the identity
    with running(lambda: classifier) as (url, _):
        got = httpx.post(f"{url}/predict", json={"inputs": inputs}).json()
        single = httpx.post(f"{url}/predict", json={"inputs": "one text"}).json()  # TEI classifies one text too
        softmax = np.exp(logits) / np.exp(logits).sum()
        assert [p["label"] for p in single] == [LABELS[i] for i in np.argsort(-softmax, kind="stable")]
        assert np.allclose(sorted((p["score"] for p in single), reverse=True), sorted(softmax, reverse=True), atol=1e-6)
        for row, probabilities in zip(got, expected, strict=True):
            order = np.argsort(-probabilities, kind="stable")
            assert [p["label"] for p in row] == [LABELS[i] for i in order]
            assert np.allclose([p["score"] for p in row], probabilities[order], atol=1e-6)
        info = httpx.get(f"{url}/info").json()
        assert info["model_type"]["classifier"]["id2label"] == {str(k): v for k, v in LABELS.items()}
        refused = httpx.post(f"{url}/rerank", json={"query": "q", "texts": ["a"]})
        assert refused.status_code == 424
        assert refused.json()["error"] == (
            "/rerank is not served: the model is a classifier (a cross-encoder with 3 labels); it serves "
            "/predict, /tokenize, /decode"
        )


def test_embed_sparse_equals_sparse_encoder(folders: dict[str, Path]) -> None:
    encoder = SparseEncoder.from_pretrained(folders["splade"], dtype="float32")
    texts = DOCUMENTS[:3]
    expected = encoder.encode_tokenized(encoder.encodings(texts))
    with running(lambda: encoder) as (url, _):
        got = httpx.post(f"{url}/embed_sparse", json={"inputs": texts}).json()
        for row, (indices, values) in zip(got, expected, strict=True):
            assert [x["index"] for x in row] == indices.tolist()
            assert np.allclose([x["value"] for x in row], values, atol=1e-5)
        assert httpx.get(f"{url}/info").json()["model_type"] == {"embedding": {"pooling": "splade"}}
        dense = httpx.post(f"{url}/embed", json={"inputs": "x"})
        assert dense.status_code == 424 and "a sparse (SPLADE) embedding model; it serves /embed_sparse" in dense.text


def test_embed_all_of_a_multi_vector_model_equals_encode_query_and_document(folders: dict[str, Path]) -> None:
    encoder = MultiVectorEncoder.from_pretrained(folders["colbert"], dtype="float32")
    texts = DOCUMENTS[:3]
    queries, documents = encoder.encode_query(texts), encoder.encode_document(texts)
    with running(lambda: encoder) as (url, _):
        as_queries = httpx.post(f"{url}/embed_all", json={"inputs": texts, "is_query": True}).json()
        as_documents = httpx.post(f"{url}/embed_all", json={"inputs": texts}).json()
    for got, expected in ((as_queries, queries), (as_documents, documents)):
        for row, vectors in zip(got, expected, strict=True):
            assert np.asarray(row).shape == np.asarray(vectors).shape
            assert np.allclose(row, vectors, atol=1e-5)
    assert len(as_queries[0]) == len(as_documents[0]) + 1  # the query prompt is a token longer


def test_openai_token_id_input_equals_the_texts_vectors(folders: dict[str, Path]) -> None:
    embedder = Embedder.from_pretrained(folders["embedding"], dtype="float32", max_length=16)
    texts = ["alpha beta gamma", "delta"]
    ids = [e.ids for e in embedder.tokenize(texts)]
    with running(lambda: embedder) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        got = client.embeddings.create(model="m", input=ids, encoding_format="float")
        assert np.allclose([d.embedding for d in got.data], embedder.encode(texts), atol=1e-6)
        assert got.usage.total_tokens == sum(map(len, ids))
        one = client.embeddings.create(model="m", input=ids[1], encoding_format="float")
        assert np.allclose(one.data[0].embedding, embedder.encode(texts[1:])[0], atol=1e-6)
        with pytest.raises(
            openai.UnprocessableEntityError, match="input 1: token id 30522 is not below the vocabulary size 30522"
        ):
            client.embeddings.create(model="m", input=[[101, 102], [101, 30522]])
        with pytest.raises(
            openai.APIStatusError, match="input 0 has 17 token ids, over the max input length of 16"
        ) as e:
            client.embeddings.create(model="m", input=[[101] * 17])
        assert e.value.status_code == 413
        with pytest.raises(openai.UnprocessableEntityError, match=r"input\[1\]: an empty list of token ids"):
            client.embeddings.create(model="m", input=[[101], []])
        refused = httpx.post(f"{url}/rerank", json={"query": "q", "texts": ["a"]})
        assert refused.status_code == 424 and refused.json()["error_type"] == "Backend"


def test_embed_all_of_an_embedding_model_equals_its_token_embeddings(folders: dict[str, Path]) -> None:
    embedder = Embedder.from_pretrained(folders["embedding"], dtype="float32")
    texts = ["alpha beta gamma", "delta", ""]
    expected = embedder.encode(texts, output_value="token_embeddings")
    vectors = embedder.encode(texts)
    with running(lambda: embedder) as (url, _):
        # /embed and /embed_all at once: the worker runs them in batches of their own output.
        with httpx.Client() as client:
            got = client.post(f"{url}/embed_all", json={"inputs": texts}).json()
            dense = client.post(f"{url}/embed", json={"inputs": texts, "normalize": False}).json()
        wrong = httpx.post(f"{url}/embed_all", json={"inputs": texts, "is_query": True})
    for row, tokens in zip(got, expected, strict=True):
        assert np.asarray(row).shape == np.asarray(tokens).shape
        assert np.allclose(row, tokens, atol=1e-5)
    assert np.allclose(dense, vectors, atol=1e-6)
    assert wrong.status_code == 422 and wrong.json()["error"].startswith("is_query: only for a multi-vector model")
