"""The batcher's gather window, with a stand-in embedder that records every batch: requests the
worker expects back are served in one batch with those already queued, and the wait is bounded;
one forward per batch on a CPU in float32; a request over the token budget runs in batches within
it, taking turns with the requests that arrive meanwhile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from bertlite.jobs.embedder import Embedder
from bertlite.serve.batching import HEALTH_TEXTS, Batcher, _one_forward
from bertlite.serve.metrics import Metrics
from tests.serve_helpers import tiny_model_folder

TIMEOUT_S = 30  # bounds every wait below; none of them is expected to come near it


class RecordingEmbedder:
    """Its "encodings" are the texts themselves; encode_tokenized() records them and, while `gate` is
    clear, holds the worker inside the forward."""

    unpad = False  # the worker runs it as it is

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.outputs: list[str | None] = []  # each batch's output_value
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def encodings(self, texts: Sequence[str]) -> list[str]:
        return list(texts)

    def encode_tokenized(
        self, texts: Sequence[str], batch_size: int | None = None, output_value: str | None = None
    ) -> np.ndarray:
        self.entered.set()
        assert self.gate.wait(TIMEOUT_S), "the test never opened the gate"
        self.batches.append(list(texts))
        self.outputs.append(output_value)
        return np.array([[float(len(t))] for t in texts], dtype=np.float32)


def batcher_with(max_gather_s: float) -> tuple[Batcher, RecordingEmbedder]:
    embedder = RecordingEmbedder()
    batcher = Batcher(lambda: embedder, 16384, Metrics(), gather_share=1e6, max_gather_s=max_gather_s)
    batcher.start()
    assert batcher.done.wait(TIMEOUT_S) and batcher.ready.is_set(), batcher.load_error
    return batcher, embedder


@pytest.fixture
def stopped() -> Iterator[list[Batcher]]:
    batchers: list[Batcher] = []
    yield batchers
    for batcher in batchers:
        batcher.stop(TIMEOUT_S)


async def one_behind_three(batcher: Batcher, embedder: RecordingEmbedder) -> list[asyncio.Task]:
    """Request a1 runs alone while a2..a4 queue; returns a2..a4 once a1 is answered, when the worker
    has four requests in flight to expect and holds three of them."""
    embedder.gate.clear()
    embedder.entered.clear()
    first = asyncio.ensure_future(batcher.embed(["a1"], [1]))
    await asyncio.get_running_loop().run_in_executor(None, embedder.entered.wait, TIMEOUT_S)
    queued = [asyncio.ensure_future(batcher.embed([f"a{i}"], [1])) for i in (2, 3, 4)]
    await asyncio.sleep(0)  # one loop turn: each task runs up to its await, so its job is in the queue
    embedder.gate.set()
    assert (await asyncio.wait_for(first, TIMEOUT_S)).tolist() == [[2.0]]
    return queued


def test_a_request_that_arrives_within_the_window_joins_the_queued_ones(stopped: list[Batcher]) -> None:
    batcher, embedder = batcher_with(max_gather_s=TIMEOUT_S)
    stopped.append(batcher)

    async def run() -> list[np.ndarray]:
        queued = await one_behind_three(batcher, embedder)
        late = asyncio.ensure_future(batcher.embed(["a5"], [1]))
        return await asyncio.wait_for(asyncio.gather(*queued, late), TIMEOUT_S)

    vectors = asyncio.run(run())
    assert embedder.batches == [HEALTH_TEXTS, ["a1"], ["a2", "a3", "a4", "a5"]]
    assert [v.tolist() for v in vectors] == [[[2.0]]] * 4
    metrics = batcher.metrics.render().decode()  # the warm-up forward is not a batch
    assert "bertlite_batch_requests_count 2.0" in metrics and "bertlite_batch_requests_sum 5.0" in metrics


def test_the_wait_is_bounded(stopped: list[Batcher]) -> None:
    batcher, embedder = batcher_with(max_gather_s=0.05)
    stopped.append(batcher)

    async def run() -> list[np.ndarray]:
        queued = await one_behind_three(batcher, embedder)
        # No fourth request comes: the three go without it once the window closes.
        return await asyncio.wait_for(asyncio.gather(*queued), TIMEOUT_S)

    vectors = asyncio.run(run())
    assert embedder.batches == [HEALTH_TEXTS, ["a1"], ["a2", "a3", "a4"]]
    assert [v.tolist() for v in vectors] == [[[2.0]]] * 3


def test_one_client_at_a_time_never_waits_for_the_window(stopped: list[Batcher]) -> None:
    batcher, embedder = batcher_with(max_gather_s=3600.0)
    stopped.append(batcher)

    async def run() -> list[np.ndarray]:
        # Each request is all the worker expects, so it goes at once; a wait would run into the timeout.
        return [await asyncio.wait_for(batcher.embed([f"b{i}"], [1]), TIMEOUT_S) for i in range(5)]

    vectors = asyncio.run(run())
    assert embedder.batches == [HEALTH_TEXTS] + [[f"b{i}"] for i in range(5)]
    assert [v.tolist() for v in vectors] == [[[2.0]]] * 5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_on_a_cpu_a_batch_is_one_forward(
    real_model_path: Path, tmp_path: Path, corpus_texts: list[str], dtype: str
) -> None:
    folder = tiny_model_folder(real_model_path, tmp_path / "tiny")
    embedder = Embedder.from_pretrained(folder, dtype=dtype)
    assert _one_forward(embedder)
    # Mixed lengths in one forward (the model runs their attention per sequence), from the encodings the
    # handlers make: the bits encode() gives on its own length-sorted batches.
    texts = [corpus_texts[0][:20], " ".join(corpus_texts[1:6]), corpus_texts[6], ""]
    vectors = embedder.encode_tokenized(embedder.tokenize(texts), batch_size=len(texts))
    assert np.array_equal(vectors, embedder.encode(texts))
    assert not _one_forward(Embedder.from_pretrained(folder, dtype="float32", unpad=False))


def test_a_batch_holds_only_requests_that_want_the_same_output(stopped: list[Batcher]) -> None:
    batcher, embedder = batcher_with(max_gather_s=0.0)
    stopped.append(batcher)

    async def run() -> None:
        embedder.gate.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(batcher.embed(["c0"], [1]))
        await asyncio.get_running_loop().run_in_executor(None, embedder.entered.wait, TIMEOUT_S)
        # Queued while c0 runs: two that want vectors around one that wants token embeddings.
        outputs = [None, "token_embeddings", None]
        queued = [asyncio.ensure_future(batcher.embed([f"c{i}"], [1], out)) for i, out in enumerate(outputs, 1)]
        await asyncio.sleep(0)
        embedder.gate.set()
        await asyncio.wait_for(asyncio.gather(first, *queued), TIMEOUT_S)

    asyncio.run(run())
    # [0]: the warm-up. c3 joins c1's batch; c2, passed over, is first in the next one.
    assert embedder.batches[1:] == [["c0"], ["c1", "c3"], ["c2"]]
    assert embedder.outputs[1:] == [None, None, "token_embeddings"]


def test_a_request_over_the_budget_runs_in_batches_within_it_and_gets_its_rows_in_order(
    stopped: list[Batcher],
) -> None:
    embedder = RecordingEmbedder()
    batcher = Batcher(lambda: embedder, 10, Metrics(), max_gather_s=0.0)
    batcher.start()
    stopped.append(batcher)
    assert batcher.done.wait(TIMEOUT_S) and batcher.ready.is_set(), batcher.load_error
    # Each text's tokens are its length; the 12-token one is over the budget and runs alone.
    texts = ["x" * n for n in (1, 2, 3, 4, 5, 6, 12, 7)]

    async def run() -> np.ndarray:
        return await asyncio.wait_for(batcher.embed(texts, [len(t) for t in texts]), TIMEOUT_S)

    rows = asyncio.run(run())
    assert rows.tolist() == [[float(len(t))] for t in texts]
    assert [[len(t) for t in batch] for batch in embedder.batches[1:]] == [[1, 2, 3, 4], [5], [6], [12], [7]]
    metrics = batcher.metrics.render().decode()
    assert "bertlite_batch_tokens_count 5.0" in metrics and "bertlite_batch_tokens_sum 40.0" in metrics


def test_a_big_request_takes_turns_with_those_that_arrive_meanwhile(stopped: list[Batcher]) -> None:
    embedder = RecordingEmbedder()
    batcher = Batcher(lambda: embedder, 4, Metrics(), max_gather_s=0.0)
    batcher.start()
    stopped.append(batcher)
    assert batcher.done.wait(TIMEOUT_S) and batcher.ready.is_set(), batcher.load_error
    big = [f"b{i}" for i in range(10)]

    async def run() -> list[np.ndarray]:
        embedder.gate.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(batcher.embed(big, [1] * len(big)))
        await asyncio.get_running_loop().run_in_executor(None, embedder.entered.wait, TIMEOUT_S)
        small = asyncio.ensure_future(batcher.embed(["s0", "s1"], [1, 1]))  # queued while b0..b3 run
        await asyncio.sleep(0)
        embedder.gate.set()
        return await asyncio.wait_for(asyncio.gather(first, small), TIMEOUT_S)

    rows, small_rows = asyncio.run(run())
    # The small request goes first in the next batch, not after the big one's last.
    assert embedder.batches[1:] == [["b0", "b1", "b2", "b3"], ["s0", "s1", "b4", "b5"], ["b6", "b7", "b8", "b9"]]
    assert rows.tolist() == [[2.0]] * 10 and small_rows.tolist() == [[2.0]] * 2


def test_a_client_gone_mid_request_has_its_other_rows_dropped(stopped: list[Batcher]) -> None:
    embedder = RecordingEmbedder()
    batcher = Batcher(lambda: embedder, 2, Metrics(), max_gather_s=0.0)
    batcher.start()
    stopped.append(batcher)
    assert batcher.done.wait(TIMEOUT_S) and batcher.ready.is_set(), batcher.load_error

    async def run() -> np.ndarray:
        embedder.gate.clear()
        embedder.entered.clear()
        gone = asyncio.ensure_future(batcher.embed([f"g{i}" for i in range(6)], [1] * 6))
        await asyncio.get_running_loop().run_in_executor(None, embedder.entered.wait, TIMEOUT_S)
        gone.cancel()  # what the endpoint does when the client disconnects
        other = asyncio.ensure_future(batcher.embed(["o0"], [1]))
        await asyncio.sleep(0)
        embedder.gate.set()
        return await asyncio.wait_for(other, TIMEOUT_S)

    assert asyncio.run(run()).tolist() == [[2.0]]
    assert embedder.batches[1:] == [["g0", "g1"], ["o0"]]
    assert "bertlite_queue_depth 0.0" in batcher.metrics.render().decode()
