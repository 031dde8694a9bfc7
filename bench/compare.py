"""Two commits of bertlite side by side: Embedder texts/s per dtype, before (--base) and after (this tree).

Each measurement is a fresh child process that imports one tree's bertlite and embeds the same corpus
texts (tokenization included) after a warm-up call; rounds alternate which tree runs first, and the
after/before ratio is taken round by round (bench.common.per_round_ratio). The base commit is checked
out with `git worktree` into a temporary folder and removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import ROOT, child_env, default_model_path, environment, interleaved, per_round_ratio, write_json

DTYPES = ("float32", "auto", "int8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's flags."""
    parser.add_argument("--base", required=True, help="the commit (or branch, tag) to compare against")
    parser.add_argument("--texts", type=int, default=1000, help="corpus texts per measurement (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per dtype (default 3)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma-separated (default {','.join(DTYPES)})")
    parser.add_argument("--model", help="checkpoint folder or hub id (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--json", type=Path, help="write the result here")


def measure(tree: Path, dtype: str, model: str, texts: int) -> float:
    """texts/s of one child process running `tree`'s bertlite.

    Args:
        tree: a checkout whose bertlite/ the child imports.
        dtype: "int8" (quantize, eager ops), "int8-compiled" (quantize after building the compiled kernels,
            as a long job does), or a dtype name Embedder.from_pretrained takes.
        model: the checkpoint.
        texts: corpus texts to embed.

    Returns:
        Texts per second of the timed encode.
    """
    compiled = "1" if dtype == "int8-compiled" else "0"
    env = child_env() | {"PYTHONPATH": f"{tree}:{ROOT}", "BERTLITE_INT8_COMPILE": compiled}
    # This tree's child script for both trees (it knows every dtype spelling), run without putting bench/ on the
    # path; `tree`'s bertlite comes first on it.
    child = f"import runpy; runpy.run_path({str(ROOT / 'bench' / 'compare_child.py')!r}, run_name='__main__')"
    command = [sys.executable, "-c", child, dtype, model, str(texts)]
    out = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"bench compare: the child for {tree} ({dtype}) failed:\n{out.stderr[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(row["bertlite"]).resolve().parent.parent != tree.resolve():
        raise SystemExit(f"bench compare: the child imported {row['bertlite']}, not {tree}'s bertlite")
    return float(row["texts_per_s"])


def compare(base: Path, dtypes: list[str], model: str, texts: int, rounds: int) -> dict[str, Any]:
    """Alternate the two trees per dtype for `rounds` rounds; medians and the per-round after/before ratio."""
    results: dict[str, Any] = {}
    for dtype in dtypes:
        trees = {"before": base, "after": ROOT}
        calls = {name: partial(measure, tree, dtype, model, texts) for name, tree in trees.items()}
        runs = interleaved(calls, rounds, describe=lambda rate: f"{rate:.1f} texts/s", label=f"{dtype} ")
        # per_round_ratio takes seconds: texts/s is their inverse, so before/after seconds = after/before speed
        ratio = per_round_ratio([1 / s for s in runs["before"]], [1 / s for s in runs["after"]])
        results[dtype] = {
            "before_texts_per_s": statistics.median(runs["before"]),
            "after_texts_per_s": statistics.median(runs["after"]),
            "after_over_before": ratio,
            "rounds": runs,
        }
        print(f"{dtype}: after / before = {ratio:.3f}", flush=True)
    return results


def run(args: argparse.Namespace) -> None:
    """Check out --base, compare, print the ratios, write --json."""
    model = args.model or default_model_path()
    base_commit = subprocess.run(
        ["git", "rev-parse", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as folder:
        base = Path(folder) / "base"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base), base_commit], cwd=ROOT, check=True)
        try:
            results = compare(base, args.dtypes.split(","), model, args.texts, args.rounds)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    result = {"base_commit": base_commit, "texts": args.texts, "compare": results}
    write_json(args.json, "compare", result, environment(model))
