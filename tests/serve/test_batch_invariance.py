"""`bertlite serve` gives a request the same bits whatever requests its batcher merges it with: concurrent
requests to /v1/embeddings, /embed, /rerank and /embed_sparse each get exactly the answer (float for float,
after JSON decoding) the same request gets when it is sent alone."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.sparse_encoder import SparseEncoder
from tests.helpers import cross_encoder_folder, masked_lm_folder, splade_folder
from tests.serve_helpers import (
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    running,
    tiny_model_folder,
)

# Single tokens of the real tokenizer; texts of 1 to 60 of them, several of equal length.
WORDS = "the of and to in is was for on that with as by at from new list sort value key order river music water".split()
LENGTHS = [1, 2, 3, 3, 5, 8, 8, 12, 17, 20, 20, 25, 33, 40, 48, 60]
REQUESTS = 16
THREADS = 8


def texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(n)) for n in LENGTHS]


TEXTS = texts(0)


def request_bodies(route: str, seed: int) -> list[dict[str, Any]]:
    """REQUESTS different bodies for `route`: 1 to 6 texts each, any of TEXTS in any order, repeats included."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(REQUESTS):
        chosen = [rng.choice(TEXTS) for _ in range(rng.randint(1, 6))]
        if route == "/v1/embeddings":
            bodies.append({"input": chosen, "model": "bertlite"})
        elif route == "/rerank":
            bodies.append({"query": rng.choice(TEXTS), "texts": chosen, "raw_scores": rng.random() < 0.5})
        else:
            bodies.append({"inputs": chosen})
    return bodies


def post(url: str, body: dict[str, Any]) -> Any:
    response = httpx.post(url, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def assert_concurrent_answers_are_the_alone_answers(url: str, route: str, seed: int) -> None:
    bodies = request_bodies(route, seed)
    alone = [post(url + route, body) for body in bodies]  # one at a time: each request is its own batch
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(post, url + route, body) for body in bodies]
        together = [future.result(timeout=120) for future in futures]
    for i, (got, expected) in enumerate(zip(together, alone, strict=True)):
        assert got == expected, f"{route}: request {i} ({bodies[i]}) answered otherwise when sent with others"


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve-invariance")
    return {
        "embedding": tiny_model_folder(real_model_path, root / "embedding"),
        "reranker": cross_encoder_folder(real_model_path, root / "reranker", num_labels=1),
        "splade": splade_folder(masked_lm_folder(real_model_path, root / "mlm"), root / "splade"),
    }


LOADERS: dict[str, Callable[[Path], Any]] = {
    "embedding": lambda folder: Embedder.from_pretrained(folder, dtype="float32"),
    "reranker": lambda folder: CrossEncoder.from_pretrained(folder, dtype="float32"),
    "splade": lambda folder: SparseEncoder.from_pretrained(folder, dtype="float32"),
}


@pytest.fixture(scope="module", params=list(LOADERS))
def server(request: pytest.FixtureRequest, folders: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """(kind, base url) of a server of each kind of model, on 127.0.0.1."""
    kind = request.param
    job = LOADERS[kind](folders[kind])
    with running(lambda: job) as (url, _):
        yield kind, url


ROUTES = {"embedding": ["/v1/embeddings", "/embed"], "reranker": ["/rerank"], "splade": ["/embed_sparse"]}


def test_concurrent_requests_get_the_bits_they_get_alone(server: tuple[str, str]) -> None:
    kind, url = server
    for seed, route in enumerate(ROUTES[kind]):
        assert_concurrent_answers_are_the_alone_answers(url, route, seed)
