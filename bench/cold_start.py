"""Cold start of bertlite and transformers: import, load and one sentence's vector, in fresh processes.

Each library runs in `rounds` fresh processes (bench.cold_child), interleaved; the medians count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from functools import partial
from typing import Any

from bench import emulate
from bench.cold_child import LIBRARIES
from bench.common import child_env, interleaved, write_json


def bench_cold_start(model_path: str, rounds: int) -> dict[str, Any]:
    """Run each library's cold start `rounds` times, in rotated rounds, each in a fresh process.

    Args:
        model_path: the checkpoint folder.
        rounds: fresh processes per library.

    Returns:
        rounds, raw (every process's times) and median (per library and time).

    Raises:
        RuntimeError: a child process failed.
    """

    def cold_start(lib: str) -> dict[str, float]:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.cold_child", lib, model_path],
            capture_output=True,
            text=True,
            env=child_env(),
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{lib} cold start failed:\n{proc.stderr}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    raw = interleaved({lib: partial(cold_start, lib) for lib in LIBRARIES}, rounds, label="cold start ")
    median = {lib: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for lib, runs in raw.items()}
    return {"rounds": rounds, "raw": raw, "median": median}


def format_cold_start(result: dict[str, Any]) -> str:
    """The table of bench_cold_start's result, with bertlite's ratios to transformers."""
    bl, auto, tf = (result["median"][lib] for lib in ("bertlite", "bertlite_embedder_auto", "transformers"))
    lines = [
        f"Cold start, median of {result['rounds']} fresh processes (import + load + one sentence); "
        "bertlite: BertModel fp32 + Embedder; Embedder auto: Embedder.from_pretrained's defaults",
        f"{'metric':<28}{'bertlite':>10}{'Embedder auto':>15}{'transformers':>14}{'bl / tf':>9}{'auto / tf':>11}",
    ]
    for key, label in (
        ("first_vector_s", "time to first vector (s)"),
        ("import_s", "import (s)"),
        ("from_pretrained_s", "from_pretrained (s)"),
        ("peak_rss_mib", "peak RSS (MiB)"),
    ):
        fmt = ".1f" if key == "peak_rss_mib" else ".3f"
        lines.append(
            f"{label:<28}{bl[key]:>10{fmt}}{auto[key]:>15{fmt}}{tf[key]:>14{fmt}}"
            f"{bl[key] / tf[key]:>8.3f}x{auto[key] / tf[key]:>10.3f}x"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The cold-start job's flags."""
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per library (default 5)")
    emulate.add_start_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run the cold-start job and write the JSON."""
    model_path, env = emulate.start(args)
    result = {"cold_start": bench_cold_start(model_path, args.rounds)}
    print("\n" + format_cold_start(result["cold_start"]))
    write_json(args.json, "cold-start", result, env)
