"""`bertlite serve` under load (bounded): concurrent clients each get their own vectors, no
request is lost, batches really hold several requests; overload gets 429s, then /health answers."""

from __future__ import annotations

import asyncio
import random
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest
from tokenizers import Encoding

from bertlite.jobs.embedder import Embedder
from bertlite.serve.app import Limits
from tests.serve_helpers import (
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    running,
    tiny_model_folder,
)

CLIENTS, REQUESTS, MAX_TEXTS = 32, 20, 8


@pytest.fixture(scope="module")
def tiny_embedder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    folder = tiny_model_folder(real_model_path, tmp_path_factory.mktemp("tiny"))
    return Embedder.from_pretrained(folder, dtype="float32", normalize=True)  # bf16 vectors move with their batch


@pytest.fixture(scope="module")
def pool(corpus_texts: list[str]) -> list[str]:
    # Distinct texts of varied length, so a vector sent to the wrong request shows.
    return list(dict.fromkeys(t[: 10 + 3 * (i % 40)] for i, t in enumerate(corpus_texts[:400])))


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


@pytest.mark.slow
def test_concurrent_clients_get_their_own_vectors(tiny_embedder: Embedder, pool: list[str]) -> None:
    reference = dict(zip(pool, tiny_embedder.encode(pool), strict=True))
    rng = random.Random(0)
    plans = [[rng.sample(pool, rng.randint(1, MAX_TEXTS)) for _ in range(REQUESTS)] for _ in range(CLIENTS)]

    async def client(url: str, plan: Sequence[list[str]], endpoint: str) -> list[float]:
        diffs = []
        # A client (one connection) each: httpx's pool slows down with many connections.
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for texts in plan:
                diffs.append(await one_request(http, texts, endpoint))
        return diffs

    async def one_request(http: httpx.AsyncClient, texts: list[str], endpoint: str) -> float:
        if endpoint == "openai":
            r = await http.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"})
            assert r.status_code == 200, r.text
            got = [d["embedding"] for d in r.json()["data"]]
        else:
            r = await http.post("/embed", json={"inputs": texts})
            assert r.status_code == 200, r.text
            got = r.json()
        return float(np.abs(np.asarray(got, dtype=np.float32) - [reference[t] for t in texts]).max())

    async def load(url: str) -> list[list[float]]:
        endpoints = ["openai", "tei"] * (CLIENTS // 2)
        return await asyncio.gather(*(client(url, p, e) for p, e in zip(plans, endpoints, strict=True)))

    with running(lambda: tiny_embedder, Limits(max_batch_tokens=4096)) as (url, _):
        diffs = asyncio.run(load(url))
        metrics = httpx.get(f"{url}/metrics").text
    assert max(max(d) for d in diffs) <= 1e-6
    assert sum(len(d) for d in diffs) == CLIENTS * REQUESTS
    served = metric(metrics, 'bertlite_requests_total{endpoint="/v1/embeddings",status="200"}') + metric(
        metrics, 'bertlite_requests_total{endpoint="/embed",status="200"}'
    )
    assert served == CLIENTS * REQUESTS
    # Every request went through a batch (plus the warm-up forward), and batches held several.
    batched = metric(metrics, "bertlite_batch_requests_sum")
    batches = metric(metrics, "bertlite_batch_requests_count")
    assert batched == CLIENTS * REQUESTS
    assert batches < batched / 2
    assert metric(metrics, "bertlite_queue_depth") == 0


def test_overload_gets_429_at_once_then_health_answers(
    tiny_embedder: Embedder, pool: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, extra = 8, 32
    gate = threading.Event()
    with running(lambda: tiny_embedder, Limits(max_concurrent_requests=admitted)) as (url, _):
        encode, encode_tokenized = tiny_embedder.encode, tiny_embedder.encode_tokenized

        def held(encodings: list[Encoding], **kwargs: object) -> np.ndarray:
            # Holds the model until the test has seen every 429: the admitted requests stay in flight.
            # (/health's forward is [CLS] [SEP] only.)
            if any(len(e.ids) > 2 for e in encodings) and not gate.wait(60):
                raise TimeoutError("the test never released the model")
            return encode_tokenized(encodings, **kwargs)

        monkeypatch.setattr(tiny_embedder, "encode_tokenized", held)  # the worker looks it up per batch

        async def overload() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=100)) as http:
                tasks = [
                    asyncio.create_task(http.post("/embed", json={"inputs": [t]})) for t in pool[: admitted + extra]
                ]
                done = []
                for next_done in asyncio.as_completed(tasks):
                    done.append(await next_done)
                    if sum(r.status_code == 429 for r in done) == extra:
                        gate.set()
                return [task.result() for task in tasks]

        responses = asyncio.run(overload())
        health = httpx.get(f"{url}/health")
        metrics = httpx.get(f"{url}/metrics").text
    statuses = [r.status_code for r in responses]
    assert statuses.count(429) == extra and statuses.count(200) == admitted
    rejected = next(r for r in responses if r.status_code == 429).json()
    assert rejected == {
        "error": "too many requests in flight (--max-concurrent-requests 8); retry later",
        "error_type": "Overloaded",
    }
    for text, r in zip(pool, responses, strict=False):
        if r.status_code == 200:
            assert np.abs(np.asarray(r.json()[0], dtype=np.float32) - encode([text])[0]).max() <= 1e-6
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert metric(metrics, 'bertlite_requests_total{endpoint="/embed",status="429"}') == extra


def test_a_failing_request_fails_alone_and_the_server_stays_healthy(
    tiny_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, in_forward = threading.Event(), threading.Event()
    encode = tiny_embedder.encode

    with running(lambda: tiny_embedder) as (url, app):
        served = app.state.service.job  # what the worker runs
        served_encode = served.encode_tokenized

        def flaky(encodings: list[Encoding], **kwargs: object) -> np.ndarray:
            texts = served.tokenizer.decode_batch([e.ids for e in encodings])
            if "hold" in texts:
                in_forward.set()
            if "hold" in texts and not gate.wait(60):
                raise TimeoutError("the test never released the model")
            if any("boom" in t for t in texts):
                raise RuntimeError("simulated kernel failure")
            return served_encode(encodings, **kwargs)

        monkeypatch.setattr(served, "encode_tokenized", flaky)

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                held = asyncio.create_task(http.post("/v1/embeddings", json={"input": "hold"}))
                assert await asyncio.to_thread(in_forward.wait, 60)
                # While "hold" is in the forward, a bad and a good request queue up: one batch.
                bad = asyncio.create_task(http.post("/v1/embeddings", json={"input": ["boom"]}))
                good = asyncio.create_task(http.post("/v1/embeddings", json={"input": ["fine", "also fine"]}))
                for _ in range(2000):
                    if metric((await http.get("/metrics")).text, "bertlite_queue_depth") == 2:
                        break
                else:
                    raise AssertionError("the two requests never queued behind the held one")
                gate.set()
                return [await held, await bad, await good]

        held, bad, good = asyncio.run(scenario())
        health = httpx.get(f"{url}/health")
    assert held.status_code == 200 and good.status_code == 200
    vectors = [d["embedding"] for d in good.json()["data"]]
    assert np.abs(np.asarray(vectors, dtype=np.float32) - encode(["fine", "also fine"])).max() <= 1e-6
    assert bad.status_code == 500
    assert bad.json()["error"] == {
        "message": "the forward failed: simulated kernel failure",
        "type": "server_error",
        "param": None,
        "code": "forward_failed",
    }
    assert health.json() == {"status": "ok"}
