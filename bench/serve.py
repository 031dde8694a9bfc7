"""`bertlite serve` throughput and latency against offline Embedder.encode and two other servers, same texts.

Runs: offline (Embedder.encode on all the texts at once: 100%), bertlite_serve (the real CLI),
naive (bench.naive_server: one encode per request) and batcher_only (bertlite serve's queue and worker
without HTTP). Clients run in this process on the same cores (bench.serve_clients). Per level (concurrency),
rounds interleave one offline run with one round of each server; a round's of_offline is its texts/s over
the mean of the offline runs around it, and the median round counts. Offline context rows (--extra-rounds)
are not interleaved. Measure on a quiet machine: offline needs one core, the servers' clients another.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from bench.common import default_model_path, environment, read_corpus, timed, write_json
from bench.serve_clients import BatcherOnly, Served

REQUESTS = 256
ROUNDS = 11
EXTRA_ROUNDS = 3
RUNS = ("bertlite_serve", "naive", "batcher_only")  # in this order in each round
METHOD = (
    "interleaved rounds: per level, offline Embedder.encode (defaults, all texts at once), then a round of "
    "each server; of_offline = a round's texts/s over the mean of the offline runs before and after it; "
    "per level the median round, best and worst, every round kept"
)


class Offline:
    """Embedder.encode in this process, on the texts the clients send."""

    def __init__(self, model: str, texts: list[str], threads: int | None) -> None:
        import torch

        from bertlite import Embedder

        if threads:
            torch.set_num_threads(threads)
        self.texts = texts
        self.embedder = Embedder.from_pretrained(model, dtype="float32")
        self.embedder.encode(texts)  # warm-up: every length of the run

    def round(self, run: Callable[[], object] | None = None) -> dict:
        """One timed run (default: encode's defaults on all the texts at once): texts/s, and texts per
        CPU second of this process (the model, the tokenizer), which shared cores disturb less."""
        run = run or (lambda: self.embedder.encode(self.texts))
        cpu = time.process_time()
        wall, _ = timed(run)
        cpu = time.process_time() - cpu
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


def interleaved(
    offline: Offline, runners: dict, requests: list[list[str]], levels: list[int], rounds: int
) -> tuple[list[dict], dict[str, dict[int, list[dict]]]]:
    """Offline runs and server rounds in turn.

    Args:
        offline: the offline runner.
        runners: the servers by name (Served or BatcherOnly).
        requests: the texts of each request.
        levels: the concurrency levels.
        rounds: rounds per level.

    Returns:
        Offline's runs in time order, and each server's rows by level, each paired with the offline runs around it.
    """
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
    """Print offline's rates and a line per server and level."""
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The serve job's flags."""
    parser.add_argument("--model", help="folder or hub id (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument(
        "--requests", type=int, default=REQUESTS, help=f"requests per round of a level (default {REQUESTS})"
    )
    parser.add_argument("--texts-per-request", type=int, default=1, help="corpus texts per request (default 1)")
    parser.add_argument("--concurrency", default="1,8,32,128", help="comma-separated levels (default 1,8,32,128)")
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
        type=_runs,
        help=f"which to run besides offline (default all: {','.join(RUNS)})",
    )
    parser.add_argument("--note", default="", help="a note stored with the results (e.g. 'machine shared')")
    parser.add_argument("--json", "--out", dest="json", type=Path, help="write every number here")


def _runs(value: str) -> list[str]:
    runs = value.split(",")
    unknown = sorted(set(runs) - set(RUNS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    return runs


def run(args: argparse.Namespace) -> None:
    """Run the serve job and write the JSON."""
    if args.rounds < 1 or args.extra_rounds < 0:
        sys.exit("error: --rounds must be >= 1 and --extra-rounds >= 0")
    model = args.model or default_model_path()
    levels = [int(c) for c in args.concurrency.split(",")]
    n = args.requests * args.texts_per_request
    texts = read_corpus(n)
    requests = [texts[i : i + args.texts_per_request] for i in range(0, n, args.texts_per_request)]

    offline = Offline(model, texts, args.threads)
    env = environment(model, ("starlette", "uvicorn", "orjson"))
    threads = ["--threads", str(args.threads)] if args.threads else []
    commands = {
        "bertlite_serve": [sys.executable, "-m", "bertlite.cli", "serve", model, "--port", "0"]
        + ["--dtype", "float32", *threads],
        "naive": [sys.executable, "-m", "bench.naive_server", model, *threads],
    }
    runners: dict = {}
    extras: dict = {}
    try:
        for name in RUNS:  # bertlite serve first: its rounds sit closest to the offline run before them
            if name in args.runs:
                runners[name] = (
                    BatcherOnly(model, args.threads) if name == "batcher_only" else Served(name, commands[name])
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
        "texts_per_request": args.texts_per_request,
        "requests_per_level": args.requests,
        "rounds": args.rounds,
        "text_source": f"data/stdlib_docs.jsonl, first {n} paragraphs (truncated at 256 tokens)",
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
    write_json(args.json, "serve", result, env)
