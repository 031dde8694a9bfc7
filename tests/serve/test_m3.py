"""One `bertlite serve` of a BGE-M3 folder over real HTTP on 127.0.0.1: the OpenAI client's dense vectors, TEI's
/embed_sparse lexical weights and /embed_all ColBERT vectors, each equal to M3Encoder.encode's."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from bertlite.jobs.kinds import detect_kind
from bertlite.jobs.m3 import M3Encoder
from tests.jobs.test_m3 import RTOL, write_m3_folder
from tests.serve_helpers import one_torch_thread, running  # noqa: F401 (one_torch_thread: an autouse fixture)

pytestmark = pytest.mark.slow  # a server in a thread, over HTTP

TEXTS = ["the list of items", "sort a dict by value", "zebra zebra json"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_m3_folder(tmp_path_factory.mktemp("m3-serve") / "bge-m3")


def test_a_bge_m3_folder_is_its_own_kind(folder: Path) -> None:
    assert detect_kind(folder) == "m3"
    (folder.parent / "no-colbert").mkdir()
    (folder.parent / "no-colbert" / "sparse_linear.pt").write_bytes((folder / "sparse_linear.pt").read_bytes())
    assert detect_kind(folder.parent / "no-colbert") == "embedding"


def test_one_server_gives_the_three_outputs_of_the_python_api(folder: Path) -> None:
    encoder = M3Encoder.from_pretrained(folder, dtype="float32")
    expected = encoder.encode(TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    with running(lambda: encoder) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        dense = client.embeddings.create(model="bge-m3", input=TEXTS, encoding_format="float")
        sparse = httpx.post(f"{url}/embed_sparse", json={"inputs": TEXTS}).json()
        colbert = httpx.post(f"{url}/embed_all", json={"inputs": TEXTS}).json()
        tei_dense = httpx.post(f"{url}/embed", json={"inputs": TEXTS}).json()
        info = httpx.get(f"{url}/info").json()
        rerank = httpx.post(f"{url}/rerank", json={"query": "a", "texts": ["b"]})
    np.testing.assert_allclose([d.embedding for d in dense.data], expected["dense_vecs"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(tei_dense, expected["dense_vecs"], atol=1e-5, rtol=0)
    for row, weights in zip(sparse, expected["lexical_weights"], strict=True):
        assert [str(x["index"]) for x in row] == sorted(weights, key=int)
        values = [weights[k] for k in sorted(weights, key=int)]
        np.testing.assert_allclose([x["value"] for x in row], values, atol=1e-5, rtol=RTOL)  # weights reach tens
    for row, vectors in zip(colbert, expected["colbert_vecs"], strict=True):
        assert np.asarray(row).shape == vectors.shape
        np.testing.assert_allclose(row, vectors, atol=1e-5, rtol=0)
    assert info["model_type"]["embedding"] == {"pooling": "cls"} and info["dimension"] == 32
    assert set(info["routes"]) >= {"/v1/embeddings", "/embed", "/embed_sparse", "/embed_all"}
    assert rerank.status_code == 424 and "a BGE-M3 model (dense, sparse and multi-vector)" in rerank.text


def test_a_hub_bge_m3_is_found_and_loaded_and_other_repos_cost_no_lookup(hub, folder: Path) -> None:
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    hub.add_commit("org/bge-m3", files)
    hub.add_commit("org/xlmr", {k: v for k, v in files.items() if not k.endswith(".pt")})
    bert = {"model_type": "bert", "architectures": ["BertModel"]}
    hub.add_commit("org/bert", {"config.json": json.dumps(bert).encode()})
    assert detect_kind("org/bge-m3") == "m3" and hub.count("HEAD", "org/bge-m3/resolve/main/colbert") == 1
    assert detect_kind("org/xlmr") == "embedding"
    assert detect_kind("org/bert") == "embedding" and hub.count("HEAD", "org/bert/resolve/main/colbert") == 0
    local = M3Encoder.from_pretrained(folder, dtype="float32").encode(TEXTS, return_sparse=True)
    remote = M3Encoder.from_pretrained("org/bge-m3", dtype="float32").encode(TEXTS, return_sparse=True)
    np.testing.assert_array_equal(remote["dense_vecs"], local["dense_vecs"])
    assert remote["lexical_weights"] == local["lexical_weights"]
