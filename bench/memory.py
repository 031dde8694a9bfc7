"""Memory: peak RSS of `bertlite embed` on long single lines and on long files, RSS of `bertlite serve` over a soak.

Parts (--parts, default all):
  single  `bertlite embed` on one line of each --sizes-mb (corpus paragraphs joined by spaces): its peak RSS
          (the child's ru_maxrss) and wall time. Memory should not grow with the line: only max_length
          tokens of it are used.
  soak    `bertlite serve` (float32) under --concurrency clients that each send requests of 4-32 texts of
          mixed lengths (one to eight corpus paragraphs joined) for --soak-minutes; the server's RSS
          (VmRSS) every --sample-s seconds: start (after a warm-up), 5 minutes, end, max.
  file    `bertlite embed` on .txt files of --file-lines lines (1 to 12 words of each corpus paragraph), with a tiny
          random model (2 layers, hidden 32) so the run measures reading and writing, not the model.
RSS is what the process holds, not speed: a soak on a shared machine is still a fair measure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    add_model_and_json_arguments,
    child_env,
    default_model_path,
    environment,
    read_corpus,
    write_json,
)
from bench.serve_clients import post_embed, start, stop

SIZES_MB = "1,10,100"
FILE_LINES = "40000,4000000"
SOAK_MINUTES = 30.0
SAMPLE_S = 30.0
CONCURRENCY = 32
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def rss_mib(pid: int) -> float:
    """A process's resident set (VmRSS) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def run_embed(model: str, source: Path, output: Path) -> dict:
    """`bertlite embed MODEL -i source -o output --quiet` in a fresh process: its peak RSS and wall time.

    Raises:
        RuntimeError: the command failed.
    """
    command = [sys.executable, "-m", "bertlite.cli", "embed", model, "-i", str(source), "-o", str(output), "--quiet"]
    start_s = time.perf_counter()
    proc = subprocess.Popen(command, env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: ru_maxrss is its peak RSS in KiB
    wall = time.perf_counter() - start_s
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"bertlite embed exited {proc.returncode}: {stderr.strip()[-500:]}")
    return {"peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "wall_s": round(wall, 2)}


def single_lines(model: str, sizes_mb: list[float], folder: Path) -> list[dict]:
    """Peak RSS of `bertlite embed` on one line of each size."""
    paragraphs = " ".join(text.replace("\n", " ") for text in read_corpus())
    rows = []
    for size in sizes_mb:
        n = int(size * 1_000_000)
        source = folder / "line.txt"
        with open(source, "w", encoding="utf-8") as f:
            written = 0
            while written < n:
                chunk = paragraphs[: n - written]
                f.write(chunk)
                written += len(chunk)
            f.write("\n")
        row = {"size_mb": size, **run_embed(model, source, folder / "line.npy")}
        print(f"single line of {size} MB: peak RSS {row['peak_rss_mib']} MiB, {row['wall_s']} s", flush=True)
        rows.append(row)
    return rows


def long_files(model: str, lines: list[int], folder: Path) -> list[dict]:
    """Peak RSS of `bertlite embed` on .txt files of each line count, with a tiny random model."""
    tiny = tiny_model(model, folder / "tiny")
    # Short lines of 1 to 12 words (the start of each corpus paragraph): memory is about the line count,
    # and millions of whole paragraphs would take hours on a small machine.
    words = [text.split() for text in read_corpus()]
    rows = []
    for count in lines:
        source = folder / "lines.txt"
        with open(source, "w", encoding="utf-8") as f:
            for i in range(count):
                f.write(" ".join(words[i % len(words)][: 1 + i % 12]) + "\n")
        row = {
            "lines": count,
            "model": "tiny random (2 layers, hidden 32)",
            **run_embed(tiny, source, folder / "f.npy"),
        }
        print(f"file of {count} lines: peak RSS {row['peak_rss_mib']} MiB, {row['wall_s']} s", flush=True)
        rows.append(row)
    return rows


def tiny_model(model: str, folder: Path) -> str:
    """A random 2-layer, hidden-32 BERT with `model`'s tokenizer, saved in `folder`."""
    import torch

    from bertlite import BertConfig, BertModel

    config = json.loads((Path(model) / "config.json").read_text())
    torch.manual_seed(0)
    tiny = BertConfig(
        vocab_size=config["vocab_size"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=config["max_position_embeddings"],
    )
    BertModel(tiny).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (Path(model) / name).exists():
            shutil.copy(Path(model) / name, folder / name)
    return str(folder)


def soak_requests(seed: int, count: int) -> list[bytes]:
    """`count` /embed bodies of 4-32 texts, each one to eight corpus paragraphs joined: lengths from a few
    tokens to past max_length, so every batch has a new shape."""
    rng = random.Random(seed)
    corpus = read_corpus()
    bodies = []
    for _ in range(count):
        texts = [" ".join(rng.choices(corpus, k=rng.choice((1, 1, 1, 2, 3, 8)))) for _ in range(rng.randint(4, 32))]
        bodies.append(json.dumps({"inputs": texts}).encode())
    return bodies


async def _soak_clients(
    url: str, bodies: list[bytes], concurrency: int, seconds: float, pid: int, every: float
) -> dict:
    """`concurrency` clients send bodies in turn until `seconds` pass; RSS sampled every `every` seconds."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connections = await asyncio.gather(*(asyncio.open_connection(host, int(port)) for _ in range(concurrency)))
    deadline = time.perf_counter() + seconds
    sent = [0]
    samples: list[tuple[float, float]] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            await post_embed(reader, writer, f"{host}:{port}", bodies[i % len(bodies)])
            sent[0] += 1
            i += concurrency

    async def sampler() -> None:
        t0 = time.perf_counter()
        while True:
            samples.append((round(time.perf_counter() - t0, 1), round(rss_mib(pid), 1)))
            if time.perf_counter() >= deadline:
                return
            await asyncio.sleep(min(every, max(deadline - time.perf_counter(), 0.0)))

    try:
        await asyncio.gather(sampler(), *(client(r, w, k) for k, (r, w) in enumerate(connections)))
    finally:
        for _, writer in connections:
            writer.close()
    return {"requests": sent[0], "samples": samples}


def soak(model: str, minutes: float, concurrency: int, every: float) -> dict:
    """RSS of `bertlite serve` over a mixed-length soak."""
    proc, url = start([sys.executable, "-m", "bertlite.cli", "serve", model, "--port", "0", "--dtype", "float32"])
    try:
        bodies = soak_requests(0, 4096)
        asyncio.run(_soak_clients(url, bodies[:64], concurrency, 0.0, proc.pid, every))  # warm-up: one round
        result = asyncio.run(_soak_clients(url, bodies, concurrency, minutes * 60, proc.pid, every))
    finally:
        stop(proc)
    samples = result["samples"]
    at_5 = min(samples, key=lambda s: abs(s[0] - 300))
    summary = {
        "minutes": minutes,
        "concurrency": concurrency,
        "requests": result["requests"],
        "rss_start_mib": samples[0][1],
        "rss_5min_mib": at_5[1] if samples[-1][0] >= 300 else None,
        "rss_end_mib": samples[-1][1],
        "rss_max_mib": max(s[1] for s in samples),
        "samples_s_mib": samples,
    }
    print(
        f"soak {minutes} min at c={concurrency}: {result['requests']} requests; RSS start {summary['rss_start_mib']}, "
        f"5 min {summary['rss_5min_mib']}, end {summary['rss_end_mib']}, max {summary['rss_max_mib']} MiB",
        flush=True,
    )
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The memory job's flags."""
    add_model_and_json_arguments(parser)
    parser.add_argument("--parts", default="single,soak,file", help="which parts to run (default all three)")
    parser.add_argument("--sizes-mb", default=SIZES_MB, help=f"single-line sizes in MB (default {SIZES_MB})")
    parser.add_argument(
        "--soak-minutes", type=float, default=SOAK_MINUTES, help=f"soak duration (default {SOAK_MINUTES:g})"
    )
    parser.add_argument("--sample-s", type=float, default=SAMPLE_S, help=f"RSS sample interval (default {SAMPLE_S:g})")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help=f"soak clients (default {CONCURRENCY})")
    parser.add_argument("--file-lines", default=FILE_LINES, help=f"line counts of the file part (default {FILE_LINES})")


def run(args: argparse.Namespace) -> None:
    """Run the memory job's parts and write the JSON."""
    parts = set(args.parts.split(","))
    unknown = sorted(parts - {"single", "soak", "file"})
    if unknown:
        sys.exit(f"error: unknown part(s) {', '.join(unknown)} (known: single, soak, file)")
    model = args.model or default_model_path()
    env = environment(model, ("starlette", "uvicorn"))
    result: dict = {"parts": sorted(parts)}
    with tempfile.TemporaryDirectory() as tmp:
        if "single" in parts:
            result["single_line"] = single_lines(model, [float(s) for s in args.sizes_mb.split(",")], Path(tmp))
        if "soak" in parts:
            result["soak"] = soak(model, args.soak_minutes, args.concurrency, args.sample_s)
        if "file" in parts:
            result["file"] = long_files(model, [int(n) for n in args.file_lines.split(",")], Path(tmp))
    write_json(args.json, "memory", result, env)
