"""Dynamic batching: requests wait in one queue; one worker thread packs them into
token-budget batches, runs each batch through the job's `encode_tokenized` (Embedder,
CrossEncoder, SparseEncoder, MultiVectorEncoder: it sorts by length and takes the unpadded
path) and hands every request its own rows back. A batch holds only requests that want the
same output (an Embedder's vectors, or its token embeddings for /embed_all). The handlers
tokenize each request (they need its token count for the limits and the usage), and the
worker runs those encodings, so no text is tokenized twice.

Every batch is within max_batch_tokens (a single input over it runs alone), so memory is
bounded by the budget, not by the request: a request bigger than the budget runs in several
batches. Requests take turns: a batch takes rows from the requests in hand in turn order, and a
request with rows left goes to the back, so a big request shares the worker with the requests
that come meanwhile instead of holding it to the end. Each request gets its rows back in order,
joined, once all have run.

On a CPU in float32 the worker runs a whole batch (at most max_batch_tokens real
tokens) as one forward with attention per sequence, as TEI does: no token is padded
anywhere, so nothing is gained by splitting a batch by length, while every extra
forward costs. encode's own default (forwards of similar lengths, attention on a padded
grid) is faster on a whole corpus sorted by length, but on the mixed lengths of the
few dozen requests a server holds it pads short texts to the long ones.

The event loop only enqueues and awaits a future, so it never blocks on the model;
while the worker runs a batch, the next requests gather in the queue. A request whose
client went away is cancelled, and the worker drops it before it computes anything.

Health comes from the worker, not from a forward per call: after a successful batch
/health costs nothing; after a failed one (an exception, or NaN/Inf vectors) it runs one
probe forward, shared by the calls that wait, as TEI does.

Once free, the worker waits a moment for the requests it expects: as many as were in
flight when its last batch finished (that batch's plus those queued meanwhile). Taking
only what is queued would split N concurrent clients into two halves that alternate
(one half computes while the other queues), each batch half the size it could be. The
wait ends as soon as those requests are there, and is bounded by a share of the last
batch's model time, so it costs at most that share of the throughput; with one client
it is never taken.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import Encoding

from bertlite.quant.allocator import release_freed_memory
from bertlite.serve.metrics import Metrics

# The warm-up and /health forward: [CLS] [SEP] only.
HEALTH_TEXTS = [""]
# The longest wait for expected requests: this share of the last batch's model time, at most MAX_GATHER_S.
GATHER_SHARE = 0.1
MAX_GATHER_S = 0.02
# The worker hands freed heap pages back to the kernel at most this often (bertlite.quant.allocator).
TRIM_EVERY_S = 1.0


class NotReadyError(RuntimeError):
    pass


@dataclass(eq=False)  # a job is itself: a key of the batch it has rows in
class _Job:
    """One request: its encodings, run a batch of rows at a time, and its results so far."""

    encodings: Sequence[Encoding]
    lengths: Sequence[int]  # each encoding's tokens
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    output: str | None = None  # encode_tokenized's output_value; None: the job's default result
    enqueued: float = field(default_factory=time.perf_counter)
    taken: int = 0  # rows handed to batches so far
    parts: list[Any] = field(default_factory=list)  # the results of its rows so far, in order
    computed: int = 0  # rows whose results are in parts
    dropped: bool = False  # failed: its other rows are not run


class Batcher:
    """load() runs first in the worker thread, so the server answers /health (503) while the model loads."""

    def __init__(
        self,
        load: Callable[[], Any],
        max_batch_tokens: int,
        metrics: Metrics,
        on_loaded: Callable[[str | None], None] | None = None,
        *,
        gather_share: float = GATHER_SHARE,
        max_gather_s: float = MAX_GATHER_S,
    ) -> None:
        """load() returns the job (an Embedder, CrossEncoder, SparseEncoder or MultiVectorEncoder: anything
        with encodings and encode_tokenized). on_loaded(error) is called from the worker thread once the
        model is ready (error None) or failed. gather_share, max_gather_s: bound the wait for expected
        requests (see the module's docstring)."""
        self._load = load
        self._on_loaded = on_loaded
        self.max_batch_tokens = max_batch_tokens
        self.gather_share = gather_share
        self.max_gather_s = max_gather_s
        self.metrics = metrics
        self.job: Any = None  # the loaded job
        self._one_forward = False  # set once the model is loaded: see _one_forward()
        self.load_error: str | None = None
        self.last_error: str | None = None  # why the worker's last forward failed; None after a success
        self._probe: asyncio.Future | None = None  # the health probe in flight
        self.ready = threading.Event()
        self.done = threading.Event()  # set when the worker has loaded (or failed to load)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # The worker's own (no lock): the requests in hand with rows to run, in turn order.
        self._turns: deque[_Job] = deque()
        self._served: list[_Job] = []  # the last batch's requests: to the back of the turns, after the newcomers
        self._stopping = False  # stop() was called: finish the requests in hand, then end
        self._thread = threading.Thread(target=self._run, name="bertlite-serve-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def check_ready(self) -> None:
        """NotReadyError (saying why) while the model loads, after it failed to load, or once the worker stopped."""
        if not self.ready.is_set():
            raise NotReadyError(self.load_error or "the model is loading")

    async def check_health(self) -> None:
        """NotReadyError as check_ready, or once the worker thread is gone; RuntimeError (saying why) when
        the last forward failed and a probe forward of [CLS] [SEP] fails too. Free after a success."""
        self.check_ready()
        if not self._thread.is_alive():
            raise NotReadyError("the embedding worker is not running")
        if self.last_error is None:
            return
        if self._probe is None or self._probe.done():
            encodings = self.job.encodings(HEALTH_TEXTS)
            self._probe = asyncio.ensure_future(self.embed(encodings, [len(e.ids) for e in encodings]))
        await asyncio.shield(self._probe)  # a health call that gives up does not cancel the others' probe

    async def embed(self, encodings: Sequence[Encoding], lengths: Sequence[int], output: str | None = None) -> Any:
        """The job's results for texts it has tokenized (its encodings(), prompt included): one item per
        encoding (an array's rows, or a list's elements), as its encode_tokenized gives them.

        Args:
            encodings: the texts' encodings.
            lengths: each encoding's token count, for the batches' token budget.
            output: encode_tokenized's output_value (e.g. "token_embeddings"); None: its default.
        """
        self.check_ready()
        loop = asyncio.get_running_loop()
        job = _Job(encodings, lengths, loop, loop.create_future(), output)
        self.metrics.queue_depth.inc()
        self._queue.put(job)
        return await job.future

    def _run(self) -> None:
        try:
            self.job = self._load()
            self._one_forward = _one_forward(self.job)
            warm_up = self.job.encode_tokenized(self.job.encodings(HEALTH_TEXTS))
            self.last_error = _nonfinite(warm_up)  # served anyway: each request and /health then say why
        except Exception as e:  # the server stays up and says why in /health, unless on_loaded stops it
            self.load_error = f"the model failed to load: {e}"
            self.done.set()
            if self._on_loaded is not None:
                self._on_loaded(self.load_error)
            return
        self.ready.set()
        self.done.set()
        if self._on_loaded is not None:
            self._on_loaded(None)
        batch: dict[_Job, range] = {}
        expected, wait_s = 1, 0.0
        trimmed = time.perf_counter()
        try:
            while True:
                if not self._turns:
                    if self._stopping:
                        return
                    self._admit(self._queue.get())
                    continue
                batch = self._gather(expected, wait_s)
                if batch:
                    start = time.perf_counter()
                    queued = self._forward(batch)
                    wait_s = min(self.max_gather_s, self.gather_share * (time.perf_counter() - start))
                    expected = len(batch) + queued
                    if time.perf_counter() - trimmed > TRIM_EVERY_S:
                        release_freed_memory()
                        trimmed = time.perf_counter()
        except Exception as e:  # a bug outside the forward: no request may wait for a worker that is gone
            traceback.print_exc(file=sys.stderr)
            self._fail_all(f"the embedding worker stopped: {type(e).__name__}: {e}", [*self._turns, *batch])

    def _fail_all(self, message: str, jobs: list[_Job | None]) -> None:
        """Refuse new requests (embed() and /health say why) and fail every job that waits."""
        self.load_error = message
        self.ready.clear()
        while True:
            try:
                jobs.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for job in jobs:
            if job is not None:
                job.loop.call_soon_threadsafe(_set_exception, job.future, RuntimeError(message))

    def _admit(self, job: _Job | None) -> None:
        """A request from the queue joins the turns (None: stop() was called)."""
        if job is None:
            self._stopping = True
        else:
            self._turns.append(job)

    def _gather(self, expected: int, wait_s: float) -> dict[_Job, range]:
        """The next batch: rows of the requests in turn order, within max_batch_tokens (a row over it runs
        alone); while fewer than `expected` requests are in it, up to wait_s more for the next ones to
        arrive. The requests that queued while the last batch ran come before those it served, which go
        to the back of the turns (or out of them once all their rows are taken).

        Returns:
            The rows of each request in the batch (a range of its encodings), in batch order.
        """
        self._admit_queued()
        for job in self._served:
            self._turns.remove(job)
            if job.taken < len(job.encodings):
                self._turns.append(job)
        batch: dict[_Job, range] = {}
        tokens = 0
        deadline = time.perf_counter() + wait_s
        while True:
            tokens = self._fill(batch, tokens)
            remaining = deadline - time.perf_counter()
            if len(batch) >= expected or tokens >= self.max_batch_tokens or remaining <= 0 or self._stopping:
                break
            try:
                self._admit(self._queue.get(timeout=remaining))
            except queue.Empty:
                break
            self._admit_queued()
        self._served = list(batch)
        return batch

    def _admit_queued(self) -> None:
        while True:
            try:
                self._admit(self._queue.get_nowait())
            except queue.Empty:
                return

    def _fill(self, batch: dict[_Job, range], tokens: int) -> int:
        """Add to batch the next rows of each request in turn, while they fit; returns the batch's tokens."""
        for job in list(self._turns):
            if tokens >= self.max_batch_tokens:
                break
            if job in batch or job.taken == len(job.encodings):  # it took what fitted, or all its rows
                continue
            if job.dropped or job.future.cancelled():  # failed, or the client went away
                self._turns.remove(job)
                self.metrics.queue_depth.dec()
                continue
            if batch and job.output != next(iter(batch)).output:
                continue
            start = stop = job.taken
            # An empty batch takes a row over the budget too: it runs alone.
            while stop < len(job.encodings) and (tokens == 0 or tokens + job.lengths[stop] <= self.max_batch_tokens):
                tokens += job.lengths[stop]
                stop += 1
            if stop == start:
                continue  # its next row does not fit: it goes first in the next batch
            if start == 0:
                self.metrics.queue_wait.observe(time.perf_counter() - job.enqueued)
            batch[job] = range(start, stop)
            job.taken = stop
            if stop == len(job.encodings):
                self.metrics.queue_depth.dec()  # nothing of it waits any more
        return tokens

    def _forward(self, batch: dict[_Job, range]) -> int:
        """Run the batch and hand each request its rows (each request its results once all its rows have
        run); how many requests queued while it ran, counted before the results go out (a client
        answered may send its next request at once, and that one did not wait for this batch)."""
        start = time.perf_counter()
        encodings = [job.encodings[i] for job, rows in batch.items() for i in rows]
        output_value = next(iter(batch)).output
        try:
            one_forward = len(encodings) if self._one_forward else None
            output = {} if output_value is None else {"output_value": output_value}
            vectors = self.job.encode_tokenized(encodings, batch_size=one_forward, **output)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            if len(batch) > 1:  # run each request's rows alone, so one bad request fails only itself
                for job, rows in batch.items():
                    queued = self._forward({job: rows})
                return queued
            queued = self._queue.qsize()
            self.last_error = f"the forward failed: {e}"
            job = next(iter(batch))
            job.dropped = True
            job.loop.call_soon_threadsafe(_set_results, [(job.future, RuntimeError(self.last_error))])
            return queued
        self.metrics.batch_seconds.observe(time.perf_counter() - start)
        self.metrics.batch_tokens.observe(sum(job.lengths[i] for job, rows in batch.items() for i in rows))
        self.metrics.batch_requests.observe(len(batch))
        results: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any]]] = {}
        offset, self.last_error = 0, None
        for job, rows in batch.items():
            part = vectors[offset : offset + len(rows)]
            offset += len(rows)
            if job.dropped:
                continue
            if error := _nonfinite(part):
                self.last_error = error
                job.dropped = True
                results.setdefault(job.loop, []).append((job.future, RuntimeError(error)))
                continue
            job.parts.append(part)
            job.computed += len(rows)
            if job.computed == len(job.encodings):
                results.setdefault(job.loop, []).append((job.future, _joined(job.parts)))
        queued = self._queue.qsize()
        # One wake-up per event loop for the whole batch, not one per request.
        for loop, pairs in results.items():
            loop.call_soon_threadsafe(_set_results, pairs)
        return queued


def _one_forward(embedder: Any) -> bool:
    """Whether a batch runs as one forward: on a CPU on the unpadded path, where the model runs the mixed
    lengths of a server's batch with attention per sequence (attention "auto" or "varlen"), every dtype in
    float32, instead of encode()'s length-sorted sub-batches."""
    return embedder.unpad and embedder.model.device.type == "cpu"


def _nonfinite(rows: Any) -> str | None:
    """What is wrong with one request's results that hold NaN or Inf; None when they are finite.

    rows: an array whose rows are the inputs' results, or a list of one item per input: an array, or a
    tuple of arrays (a sparse vector's indices and values)."""
    if isinstance(rows, np.ndarray):
        finite = np.isfinite(rows.reshape(len(rows), -1)).all(axis=1)
    else:
        finite = np.array([all(np.isfinite(a).all() for a in _arrays(item)) for item in rows], dtype=bool)
    if finite.all():
        return None
    return (
        f"the model gave NaN or Inf in the vector of input {int(np.argmin(finite))} (an overflow in "
        "--dtype float16, or non-finite weights); serve the model in float32 or bfloat16"
    )


def _arrays(item: Any) -> tuple[np.ndarray, ...]:
    """The float arrays of one input's result (a sparse vector's integer indices cannot be non-finite)."""
    items = item if isinstance(item, tuple | list) else (item,)
    return tuple(a for a in map(np.asarray, items) if a.dtype.kind in "fc")


def _joined(parts: list[Any]) -> Any:
    """A request's results from those of its batches: one array, or one list."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(part, np.ndarray) for part in parts):
        return np.concatenate(parts)
    return [item for part in parts for item in part]


def _set_results(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for future, value in pairs:
        if future.done():
            continue
        if isinstance(value, Exception):
            future.set_exception(value)
        else:
            future.set_result(value)


def _set_exception(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
