"""The serve job's servers and clients: servers in their own processes (bertlite serve, the naive one) or the
batcher alone in this one, and asyncio clients on kept-alive connections with a hand-written HTTP/1.1 exchange.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

from bench.common import child_env

try:  # the clients share the cores with the server: parse its responses as cheaply as it writes them
    from orjson import loads
except ImportError:
    from json import loads


def start(command: list[str]) -> tuple[subprocess.Popen, str]:
    """Start a server process and wait until it prints "ready on URL" to stderr; (the process, its URL)."""
    env = child_env(quiet=False)
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if "ready on " in line:
            return proc, line.split("ready on ", 1)[1].strip()
    raise RuntimeError(f"{command} exited before it was ready: {proc.wait()}")


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server process and wait for it."""
    proc.terminate()
    proc.wait(timeout=60)


async def post_embed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, body: bytes) -> bytes:
    """One POST /embed over a kept-alive connection; the response body. A hand-written
    HTTP/1.1 exchange (uvicorn answers with Content-Length), so the client costs the
    shared cores as little as it can."""
    writer.write(
        b"POST /embed HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status, *headers = head.decode("latin-1").split("\r\n")
    length = next(int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:"))
    payload = await reader.readexactly(length)
    if status.split()[1] != "200":
        raise RuntimeError(f"{status}: {payload[:200]!r}")
    return payload


async def load(url: str, requests: list[list[str]], concurrency: int) -> dict:
    """`concurrency` clients, each on its own kept-alive connection, send the requests until none is left.
    The connections open and the bodies are written before the clock starts: a level times requests,
    not connection setup (which made the first batch of each round a partial one)."""
    latencies: list[float] = []
    next_request = iter(range(len(requests)))
    host, port = url.removeprefix("http://").rsplit(":", 1)
    bodies = [json.dumps({"inputs": texts}).encode() for texts in requests]
    connections = await asyncio.gather(*(asyncio.open_connection(host, int(port)) for _ in range(concurrency)))
    free = list(connections)

    async def client() -> None:
        reader, writer = free.pop()
        for i in next_request:
            t = time.perf_counter()
            body = await post_embed(reader, writer, f"{host}:{port}", bodies[i])
            if len(loads(body)) != len(requests[i]):
                raise RuntimeError(f"request {i}: {len(requests[i])} texts, not as many vectors")
            latencies.append(time.perf_counter() - t)

    try:
        return await _timed_level(client, concurrency, requests, latencies)
    finally:
        for _, writer in connections:
            writer.close()


async def _timed_level(
    client: Callable[[], Awaitable[None]], concurrency: int, requests: list[list[str]], latencies: list[float]
) -> dict:
    """Run `concurrency` copies of client at once; texts/s over the level's wall time, and latency percentiles."""
    start_s = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - start_s
    texts = sum(len(r) for r in requests)
    return {
        "concurrency": concurrency,
        "requests": len(requests),
        "texts": texts,
        "wall_s": round(wall, 3),
        "texts_per_s": round(texts / wall, 1),
        "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(1000 * float(np.percentile(latencies, 99)), 1),
    }


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of a process so far, (its main thread, all its other threads): in bertlite
    serve, the event loop (HTTP, parsing, JSON) and the model (the worker, OpenMP, tokenizers)."""
    tick = os.sysconf("SC_CLK_TCK")
    main_s = other_s = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        if int(tid) == pid:
            main_s += seconds
        else:
            other_s += seconds
    return main_s, other_s


def worker_counters(url: str) -> dict[str, float]:
    """bertlite serve's own /metrics: the worker's model seconds and its batches."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics") as r:
        lines = r.read().decode().splitlines()
    wanted = ("bertlite_batch_duration_seconds_sum", "bertlite_batch_duration_seconds_count")
    return {name: float(line.split()[-1]) for line in lines for name in wanted if line.startswith(name + " ")}


class BatcherOnly:
    """The server's queue and worker without HTTP, in this process: what dynamic batching
    itself reaches, apart from the HTTP and client CPU that share the cores with the model."""

    def __init__(self, model: str, threads: int | None) -> None:
        import torch

        from bertlite import Embedder
        from bertlite.serve.batching import Batcher
        from bertlite.serve.metrics import Metrics

        if threads:
            torch.set_num_threads(threads)
        self.embedder = Embedder.from_pretrained(model, dtype="float32")
        self.batcher = Batcher(lambda: self.embedder, 16384, Metrics())
        self.batcher.start()
        self.batcher.done.wait()

    def level(self, requests: list[list[str]], concurrency: int) -> dict:
        """One level: `concurrency` clients tokenize and queue the requests until none is left."""
        return asyncio.run(self._level(requests, concurrency))

    async def _level(self, requests: list[list[str]], concurrency: int) -> dict:
        latencies: list[float] = []
        pending = iter(requests)

        async def client() -> None:
            for texts in pending:
                t = time.perf_counter()
                encodings = self.embedder.encodings(texts)  # as the server's handler does
                await self.batcher.embed(encodings, sum(len(e.ids) for e in encodings))
                latencies.append(time.perf_counter() - t)

        return await _timed_level(client, concurrency, requests, latencies)

    def close(self) -> None:
        """Stop the worker."""
        self.batcher.stop(60)


class Served:
    """A server in its own process (the real `bertlite serve` CLI, or the naive one)."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.name = name
        self.proc, self.url = start(command)

    def level(self, requests: list[list[str]], concurrency: int) -> dict:
        """One level, with the server's CPU seconds (and, for bertlite serve, its batches)."""
        before = worker_counters(self.url) if self.name == "bertlite_serve" else {}
        cpu_before = thread_cpu(self.proc.pid)
        row = asyncio.run(load(self.url, requests, concurrency))
        cpu = [b - a for a, b in zip(cpu_before, thread_cpu(self.proc.pid), strict=True)]
        row["loop_cpu_s"], row["model_cpu_s"] = (round(x, 2) for x in cpu)
        row["texts_per_model_cpu_s"] = round(row["texts"] / max(cpu[1], 1e-9), 1)
        if before:
            after = worker_counters(self.url)
            seconds, batches = (
                after[k] - before[k]
                for k in ("bertlite_batch_duration_seconds_sum", "bertlite_batch_duration_seconds_count")
            )
            row["worker_busy"] = round(seconds / row["wall_s"], 3)  # share of the wall time in the model
            row["texts_per_batch"] = round(row["texts"] / batches, 1)
        return row

    def close(self) -> None:
        """Stop the server process."""
        stop(self.proc)
