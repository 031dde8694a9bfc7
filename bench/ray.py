"""`bertlite embed --engine ray` (local Ray, N replicas of 1 thread) against the single engine, as commands.

Both run the CLI in fresh processes on the same corpus rows (one jsonl file for the single engine,
--files files for Ray), in rotated rounds. Per engine: the whole command's wall time, and the rate the
command prints (single engine: encoding only; Ray: submission to the renamed output folder).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from itertools import count
from pathlib import Path
from typing import Any

from bench.common import (
    CORPUS,
    add_model_and_json_arguments,
    child_env,
    default_model_path,
    environment,
    interleaved,
    timed,
    write_json,
)

# The summary line both engines print; the single engine adds its precision in brackets before the colon.
SUMMARY = re.compile(r"embedded (\d+) texts.* in ([\d.]+) s\b[^:]*: ([\d.]+) texts/s")


def run_cli(args: list[str], cwd: Path) -> dict[str, Any]:
    """Run `bertlite embed *args --quiet` and read its summary line.

    Args:
        args: the command's arguments.
        cwd: the folder it runs in.

    Returns:
        texts, wall_s, wall_texts_per_s, reported_s and texts_per_s (the command's own).

    Raises:
        RuntimeError: the command failed or printed no summary.
    """
    command = [sys.executable, "-m", "bertlite.cli", "embed", *args, "--quiet"]
    wall, result = timed(
        lambda: subprocess.run(
            command, cwd=cwd, env=child_env(quiet=False), capture_output=True, text=True, check=False
        )
    )
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


def bench_ray(model: str, lines: list[str], files: int, replicas: int, rounds: int) -> dict[str, Any]:
    """Run the single engine and the Ray engine on the same rows, in rotated rounds.

    Args:
        model: the checkpoint folder.
        lines: the corpus's jsonl rows.
        files: how many files the rows are split into for Ray.
        replicas: Ray replicas.
        rounds: runs per engine.

    Returns:
        Per engine, the medians of wall_texts_per_s and texts_per_s, and every run.
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "all.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (work / "parts").mkdir()
        per_file = -(-len(lines) // files)
        for i in range(files):
            chunk = lines[i * per_file : (i + 1) * per_file]
            (work / "parts" / f"part{i:03d}.jsonl").write_text("\n".join(chunk) + "\n", encoding="utf-8")
        single, ray = count(), count()  # each run writes its own output
        commands = {
            "single": lambda: run_cli([model, "-i", "all.jsonl", "-o", f"single{next(single)}.npy"], work),
            "ray": lambda: run_cli(
                [model, "-i", "parts/*.jsonl", "-o", f"ray{next(ray)}", "--engine", "ray", "--replicas", str(replicas)],
                work,
            ),
        }
        runs = interleaved(commands, rounds)
    return {
        name: {
            "wall_texts_per_s": statistics.median(r["wall_texts_per_s"] for r in results),
            "texts_per_s": statistics.median(r["texts_per_s"] for r in results),
            "runs": results,
        }
        for name, results in runs.items()
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ray job's flags."""
    parser.add_argument("--texts", type=int, default=4000, help="first N corpus rows; 0 = all 11,491 (default 4000)")
    parser.add_argument("--files", type=int, default=4, help="input files for the Ray engine (default 4)")
    parser.add_argument("--replicas", type=int, default=2, help="Ray replicas, 1 thread each (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per engine (default 1)")
    add_model_and_json_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the ray job and write the JSON."""
    model = args.model or default_model_path()
    env = environment(model, ("ray",))
    lines = CORPUS.read_text(encoding="utf-8").splitlines()[: args.texts or None]
    engines = bench_ray(model, lines, args.files, args.replicas, args.rounds)
    single, ray = engines["single"], engines["ray"]
    print(
        f"{len(lines)} texts, {env['cores']} CPUs: single engine {single['texts_per_s']:.1f} texts/s "
        f"(whole command {single['wall_texts_per_s']:.1f}); Ray, {args.replicas} replicas "
        f"{ray['texts_per_s']:.1f} texts/s (whole command {ray['wall_texts_per_s']:.1f})"
    )
    result = {
        "texts": len(lines),
        "files_for_ray": args.files,
        "replicas": args.replicas,
        "threads": {"single": "torch default (one per core)", "ray": "1 per replica"},
        "engines": engines,
    }
    write_json(args.json, "ray", result, env)
