"""Choices timed on this CPU, kept in a JSON file in the user cache folder.

Which kernel runs fastest is not a rule of flags: a CPU's vector units, its caches and the kernels torch
ships decide it together. So a choice that depends on it (dtype="auto", whether oneDNN fuses an
activation into its GEMM) is timed once, and the timings are kept per CPU, ISA caps, torch version,
thread count and what was timed, in a JSON file, so later processes do not time again.

BERTLITE_CACHE_DIR moves the cache folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertlite.utils.capabilities import Capabilities

FASTER_BY = 1.10  # a choice must beat the default by this much: a smaller gain is within a machine's noise
CACHE_VARIABLE = "BERTLITE_CACHE_DIR"
CACHE_FILE = "timings.json"
REPEATS = 3  # timed passes per candidate, interleaved; the best counts


def cache_path() -> Path:
    """The JSON file that keeps the timings: $BERTLITE_CACHE_DIR, else $XDG_CACHE_HOME/bertlite, else
    ~/.cache/bertlite."""
    folder = os.environ.get(CACHE_VARIABLE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "bertlite"
    )
    return Path(folder) / CACHE_FILE


def machine_key(caps: Capabilities, what: str) -> str:
    """The cache key of a timing of `what` on this CPU, torch and thread count.

    Args:
        caps: this CPU's capabilities (bertlite.utils.capabilities.detect()).
        what: what was timed, with the sizes it depends on.

    Returns:
        The key.
    """
    import torch

    parts = [
        caps.model_name or "unknown CPU",
        " ".join(caps.flags or ()),
        " ".join(caps.isa_limits),
        f"torch {torch.__version__}",
        f"{torch.get_num_threads()} threads",
        what,
    ]
    return "; ".join(parts)


def best_of(runs: Mapping[str, Callable[[], Any]], repeats: int = REPEATS) -> dict[str, float]:
    """Time each candidate's pass, interleaved, after one untimed call each; the best pass counts.

    Args:
        runs: candidate name -> a function of no arguments that runs one pass.
        repeats: timed passes per candidate.

    Returns:
        Candidate name -> seconds of its best pass.
    """
    for run in runs.values():
        run()  # oneDNN builds its kernels on the first call
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def cached_or_timed(key: str, names: Sequence[str], measure: Callable[[], dict[str, float]]) -> tuple[dict, bool]:
    """The timings kept under `key`, else measure()'s, which are kept for later processes.

    Args:
        key: machine_key() of what is timed.
        names: the candidates an entry must hold (a positive number of seconds each) to be used.
        measure: times the candidates: name -> seconds.

    Returns:
        (name -> seconds, whether they came from the cache).
    """
    path = cache_path()
    entries = _read_cache(path)
    seconds = entries.get(key)
    if isinstance(seconds, dict) and all(
        isinstance(seconds.get(name), (int, float)) and seconds[name] > 0 for name in names
    ):
        return seconds, True
    seconds = measure()
    entries[key] = seconds
    _write_cache(path, entries)
    return seconds, False


def _read_cache(path: Path) -> dict[str, Any]:
    # A missing, unreadable or damaged cache only costs a new timing; it is rewritten whole.
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, entries: dict[str, Any]) -> None:
    # Written beside and renamed into place, so a reader never sees half a file; a read-only home
    # only means the next process times again.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
