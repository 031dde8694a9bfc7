"""Reranking at the scale clients send, over real HTTP: the cohere client's 100 and 1,000 documents on
a `bertlite serve` process with its default limits equal CrossEncoder.rank; the 1,000-document
request runs in forwards within --max-batch-tokens (read from /metrics) and its peak memory stays
bounded; concurrent reranks, each run in several batches shared with the others, get their own
rankings; a long query is tokenized once per request, however many documents it is paired with."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cohere
import httpx
import pytest
from tokenizers import Tokenizer

from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.serve.app import Limits
from tests.helpers import ROOT, cross_encoder_folder
from tests.serve_helpers import (
    lines,
    one_torch_thread,  # noqa: F401 (an autouse fixture)
    running,
    wait_for,
)

pytestmark = pytest.mark.slow  # a server process, 512,000 tokens of forwards

WORDS = "how do I sort a list in python without changing the original order of its items".split()
MAX_BATCH_TOKENS = 16384  # bertlite serve's default
# The 1,000-document request's growth of the server's peak RSS: in one forward it took 534 MiB more
# (2-layer, 32-wide model, 512,000 tokens); in forwards of 16,384 tokens, 44 MiB (2 cores, AMD EPYC).
PEAK_GROWTH_MIB = 250


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def reranker_folder(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cross_encoder_folder(real_model_path, tmp_path_factory.mktemp("scale") / "reranker", num_labels=1)


@pytest.fixture(scope="module")
def reranker(reranker_folder: Path) -> CrossEncoder:
    return CrossEncoder.from_pretrained(reranker_folder, dtype="float32")


@pytest.fixture(scope="module")
def server(reranker_folder: Path) -> Iterator[tuple[str, int]]:
    """(url, pid) of `bertlite serve` on the folder, with every limit at its default."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "bertlite.cli", "serve", str(reranker_folder), "--port", "0", "--dtype", "float32"]
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = wait_for(lines(proc.stderr), "bertlite serve: ready on ").split("ready on ")[1].strip()
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) / 1024


def batch_tokens(url: str) -> dict[str, float]:
    """The bertlite_batch_tokens histogram: its count, sum, and the count of forwards within the budget."""
    text = httpx.get(f"{url}/metrics").text

    def value(name: str) -> float:
        return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE).group(1))

    return {
        "count": value("bertlite_batch_tokens_count"),
        "sum": value("bertlite_batch_tokens_sum"),
        "within": value(f'bertlite_batch_tokens_bucket{{le="{float(MAX_BATCH_TOKENS)}"}}'),
    }


def assert_ranked_as(ranked: Sequence[tuple[int, float]], expected: list[dict[str, Any]]) -> None:
    """The server's (index, score) ranking is CrossEncoder.rank's: every document once, each score within
    1e-5 of rank's, best first; two documents change places only where rank's scores are that close."""
    scores = {e["corpus_id"]: e["score"] for e in expected}
    assert sorted(i for i, _ in ranked) == sorted(scores)
    assert max(abs(score - scores[i]) for i, score in ranked) <= 1e-5
    order = [scores[i] for i, _ in ranked]
    assert all(a >= b - 2e-5 for a, b in zip(order, order[1:], strict=False))


def cohere_ranked(response: Any) -> list[tuple[int, float]]:
    return [(r.index, r.relevance_score) for r in response.results]


def test_the_cohere_client_reranks_100_and_1000_documents_as_cross_encoder_rank(
    server: tuple[str, int], reranker: CrossEncoder
) -> None:
    url, pid = server
    client = cohere.ClientV2(api_key="unused", base_url=url, max_retries=0, timeout=600)
    query = "how to sort a list in python"
    documents = [f"document {i}: {words(12, i)}" for i in range(100)]
    got = client.rerank(model="m", query=query, documents=documents)
    assert_ranked_as(cohere_ranked(got), reranker.rank(query, documents))

    # 1,000 pairs of 512 tokens each (a 600-word query, cut to fit): 512,000 tokens in one request.
    query, documents = words(600, 0), [f"short text {i}" for i in range(1000)]
    before, peak = batch_tokens(url), peak_rss_mib(pid)
    got = client.rerank(model="m", query=query, documents=documents)
    growth = peak_rss_mib(pid) - peak
    after = batch_tokens(url)
    assert_ranked_as(cohere_ranked(got), reranker.rank(query, documents))
    tokens = got.meta.tokens.input_tokens
    assert tokens == 1000 * 512
    forwards = after["count"] - before["count"]
    assert after["sum"] - before["sum"] == tokens
    assert forwards >= tokens / MAX_BATCH_TOKENS  # before: one forward of 512,000 tokens
    assert after["within"] - before["within"] == forwards  # each within --max-batch-tokens
    assert growth < PEAK_GROWTH_MIB, f"the request grew the server's peak RSS by {growth:.0f} MiB"


def test_concurrent_reranks_in_shared_batches_get_their_own_rankings(reranker: CrossEncoder) -> None:
    requests = [
        (f"query {c}: {words(5, c)}", [f"doc {c}.{i} {words(3 + i % 9, i)}" for i in range(60)]) for c in range(32)
    ]

    async def rerank(http: httpx.AsyncClient, query: str, documents: list[str]) -> list[dict[str, Any]]:
        r = await http.post("/rerank", json={"query": query, "texts": documents})
        assert r.status_code == 200, r.text
        return r.json()

    async def load(url: str) -> list[list[dict[str, Any]]]:
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            return await asyncio.gather(*(rerank(http, q, d) for q, d in requests))

    # About 1,000 tokens a request: each runs in two or three batches, taking turns with the others.
    with running(lambda: reranker, Limits(max_batch_tokens=512)) as (url, _):
        answers = asyncio.run(load(url))
        metrics = batch_tokens(url)
    for (query, documents), answer in zip(requests, answers, strict=True):
        assert_ranked_as([(a["index"], a["score"]) for a in answer], reranker.rank(query, documents))
    assert metrics["count"] >= 2 * len(requests)


class CountingTokenizer:
    """A tokenizers.Tokenizer that counts the characters it is given to encode."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self.chars = 0

    def encode(self, sequence: str, pair: str | None = None, *args: Any, **kwargs: Any) -> Any:
        self.chars += len(sequence) + len(pair or "")
        return self._tokenizer.encode(sequence, pair, *args, **kwargs)

    def encode_batch(self, inputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.chars += sum(len(i) if isinstance(i, str) else len(i[0]) + len(i[1]) for i in inputs)
        return self._tokenizer.encode_batch(inputs, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def test_a_long_query_is_tokenized_once_per_request(reranker_folder: Path) -> None:
    reranker = CrossEncoder.from_pretrained(reranker_folder, dtype="float32")
    reranker.tokenize_pairs("a query", ["a document"])  # builds its pair tokenizer, counted from here on
    # Every tokenizer a rerank request can go through: the job's, the long-text cutter's, the pairs'.
    counters = [CountingTokenizer(reranker.backend_tokenizer), CountingTokenizer(reranker._cutter._counter)]
    counters.append(CountingTokenizer(reranker._query_pairs._tokenizer))
    reranker.backend_tokenizer, reranker._cutter._counter, reranker._query_pairs._tokenizer = counters
    query = words(200_000, 1)[:1_000_000]  # 1 MB: before, each of the 32 pairs read it all (11.6 s)
    documents = [f"document {i} of the same length" for i in range(10, 42)]

    def characters(docs: list[str]) -> int:
        start = sum(c.chars for c in counters)
        r = httpx.post(f"{url}/rerank", json={"query": query, "texts": docs}, timeout=600)
        assert r.status_code == 200, r.text
        return sum(c.chars for c in counters) - start

    with running(lambda: reranker) as (url, _):
        one, many = characters(documents[:1]), characters(documents)
    assert one >= len(documents[0])  # the counters see the request's tokenizing
    assert one < len(query) / 10  # the query is read only as far as truncation needs
    assert many - one == sum(len(d) for d in documents[1:])  # each more document costs its own characters only
