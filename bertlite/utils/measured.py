"""Choices timed on this CPU, decided only when the timings agree, kept in a JSON file in the user cache folder.

Which kernel runs fastest is not a rule of flags: a CPU's vector units, its caches and the kernels torch
ships decide it together. So a choice that depends on it (dtype="auto", whether oneDNN fuses an
activation into its GEMM) is timed, a default against one challenger, by one rule:

- each candidate is warmed until two passes in a row take about the same time (oneDNN builds its
  kernels on first use, and a CPU raises its clock under load); then each sample repeats the pass
  until it holds about SAMPLE_SECONDS of work, so it rises above the timer's and the scheduler's noise;
- the samples are taken in rounds, one per candidate, the order alternating; a round in which the
  process got less than MIN_SHARE of its threads' CPU time is dropped, because it times the other
  processes, not the kernels; each round left gives one ratio: the default's seconds over the challenger's;
- the challenger wins only if it is at least FASTER_BY faster in every one of ROUNDS rounds;
- the choice is decided when ROUNDS rounds counted within BUDGET_SECONDS, all on one side of
  FASTER_BY, their ratios within SPREAD_LIMIT of each other. Otherwise the default is used and not
  kept: the next process times again, up to TRIES processes, after which the default is used without
  timing until the entry is removed from the cache file.

Decided choices are kept, with their rounds, per CPU, ISA caps, torch version, thread count and what
was timed, in a JSON file, so later processes do not time again. BERTLITE_CACHE_DIR moves the cache folder.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertlite.utils.capabilities import Capabilities

FASTER_BY = 1.10  # a choice must beat the default by this much: a smaller gain is within a machine's noise
SPREAD_LIMIT = 1.5  # the largest per-round ratio over the smallest, beyond which the rounds disagree
ROUNDS = 5  # rounds that decide; the challenger must win every one
MIN_SHARE = 0.8  # of its threads' CPU time the process must get in a round for the round to count
SAMPLE_SECONDS = 0.03  # the work in one sample: several scheduler ticks, so one preemption moves it little
STABLE = 0.10  # warm once two passes in a row differ by at most this share
WARMUP_PASSES = 10  # at most this many warm-up passes per candidate ...
WARMUP_SECONDS = 0.25  # ... or this long
MAX_PASSES = 1000  # a sample of tiny shapes need not reach SAMPLE_SECONDS
BUDGET_SECONDS = 1.0  # no round starts this long after the warm-up; fewer than ROUNDS rounds decide nothing
TRIES = 3  # processes whose rounds did not decide before the default is used without timing
CACHE_VARIABLE = "BERTLITE_CACHE_DIR"
CACHE_FILE = "timings.json"


@dataclass(frozen=True)
class Rounds:
    """The candidates' timed rounds."""

    seconds: dict[str, list[float]]  # candidate -> seconds per pass, one per round that counted
    busy: int = 0  # rounds dropped: the process got less than MIN_SHARE of its threads' CPU time


@dataclass(frozen=True)
class Choice:
    """What the timing of a default against a challenger picked, and the rounds it rests on."""

    default: str
    challenger: str
    rounds: Rounds
    picked: str  # the challenger only where it won every round and the rounds decided
    why: str  # "decided", or why the rounds did not decide
    cached: bool = False  # read from the cache file, not timed in this process
    tries: int = 0  # processes whose rounds did not decide (0 once decided)

    @property
    def decided(self) -> bool:
        """Whether the rounds agreed, so later processes use this choice without timing."""
        return self.why == "decided"

    def ratios(self) -> list[float]:
        """Per round, how many times faster the challenger ran than the default."""
        return _ratios(self.rounds, self.default, self.challenger)

    def spread(self) -> dict[str, float]:
        """The rounds that counted and were dropped, and the per-round ratios' min, median and max."""
        ratios = self.ratios()
        spread: dict[str, float] = {"rounds": len(ratios), "busy": self.rounds.busy}
        if ratios:
            spread |= {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
        return spread

    def seconds(self) -> dict[str, float]:
        """Each candidate's median seconds per pass over the rounds that counted."""
        return {name: statistics.median(s) for name, s in self.rounds.seconds.items() if s}

    def summary(self) -> str:
        """One line: the challenger's speed against the default, its spread, and what was picked and kept."""
        spread = self.spread()
        dropped = f"{self.rounds.busy} dropped: other processes had the CPU" if self.rounds.busy else ""
        if spread["rounds"]:
            low, mid, high, n = spread["min"], spread["median"], spread["max"], spread["rounds"]
            dropped = f"; {dropped}" if dropped else ""
            ran = f"{self.challenger} ran {mid:.2f}x {self.default} ({low:.2f}-{high:.2f}x over {n} rounds{dropped})"
        else:
            ran = f"no round counted ({dropped})" if dropped else "no round counted"
        if self.decided:
            return f"{ran}: {self.picked} ({self.challenger} is picked at >= {FASTER_BY:.2f}x in every round)"
        if self.cached:
            return f"{ran}: {self.default}; {self.tries} processes timed rounds that did not decide, so no more timing"
        return f"{ran}: {self.default}, not kept: {self.why} (try {self.tries} of {TRIES})"


def _ratios(rounds: Rounds, default: str, challenger: str) -> list[float]:
    return [d / c for d, c in zip(rounds.seconds[default], rounds.seconds[challenger], strict=True)]


def judge(rounds: Rounds, default: str, challenger: str, cached: bool = False, tries: int = 0) -> Choice:
    """Apply the rule to timed rounds: the challenger wins only in every round, and only agreeing rounds decide.

    Args:
        rounds: the candidates' rounds (as time_rounds returns them).
        default: the candidate kept unless the challenger wins.
        challenger: the other candidate.
        cached: whether the rounds were read from the cache file.
        tries: processes whose rounds did not decide so far.

    Returns:
        The Choice.
    """
    rounds = Rounds({name: list(rounds.seconds[name]) for name in (default, challenger)}, rounds.busy)
    ratios = _ratios(rounds, default, challenger)
    wins = bool(ratios) and min(ratios) >= FASTER_BY
    if len(ratios) < ROUNDS:
        why = f"{len(ratios)} of {ROUNDS} rounds counted in the time allowed"
    elif not wins and max(ratios) >= FASTER_BY:
        why = f"some rounds have {challenger} at >= {FASTER_BY:.2f}x, some not"
    elif max(ratios) > SPREAD_LIMIT * min(ratios):
        why = f"the rounds spread over more than {SPREAD_LIMIT:.2f}x"
    else:
        why = "decided"
    picked = challenger if wins and why == "decided" else default
    return Choice(default, challenger, rounds, picked, why, cached, tries)


def sample(run: Callable[[], Any], passes: int) -> tuple[float, float]:
    """Run `passes` passes of `run`, fewer where they take over twice SAMPLE_SECONDS (a busy machine).

    Args:
        run: a function of no arguments that runs one pass.
        passes: how many.

    Returns:
        (seconds per pass, the share of its threads' CPU time the process got meanwhile).
    """
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = min(torch.get_num_threads(), cores)  # more threads than cores can never all run at once
    start, cpu = time.perf_counter(), time.process_time()
    done = 0
    while done < passes and (done == 0 or time.perf_counter() - start < 2 * SAMPLE_SECONDS):
        run()
        done += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall / done, cpu / (max(wall, 1e-9) * threads)


def time_rounds(
    runs: Mapping[str, Callable[[], Any]], rounds: int = ROUNDS, clock: Callable[[], float] = time.perf_counter
) -> Rounds:
    """Time each candidate's pass: warmed, then rounds of one sample each, until `rounds` counted or the
    budget ran out.

    Args:
        runs: candidate name -> a function of no arguments that runs one pass.
        rounds: the rounds to take that count.
        clock: seconds, for the budget (tests inject one).

    Returns:
        The Rounds; fewer than `rounds` where BUDGET_SECONDS after the warm-up ran out.
    """
    passes = {name: _warm(run, clock) for name, run in runs.items()}
    start = clock()
    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    busy = 0
    while len(seconds[names[0]]) < rounds and clock() - start <= BUDGET_SECONDS:
        order = names if (len(seconds[names[0]]) + busy) % 2 == 0 else names[::-1]  # a drift favours neither
        taken = {name: sample(runs[name], passes[name]) for name in order}
        if min(share for _, share in taken.values()) < MIN_SHARE:
            busy += 1
            continue
        for name in names:
            seconds[name].append(taken[name][0])
    return Rounds(seconds, busy)


def _warm(run: Callable[[], Any], clock: Callable[[], float]) -> int:
    """Run passes until two in a row agree within STABLE (bounded); return the passes a sample needs."""
    began, last, took = clock(), math.inf, math.inf
    for _ in range(WARMUP_PASSES):
        last, (took, _) = took, sample(run, 1)
        if abs(took - last) <= STABLE * took or clock() - began > WARMUP_SECONDS:
            break
    return max(1, min(MAX_PASSES, math.ceil(SAMPLE_SECONDS / max(took, 1e-9))))


# Every verdict this process has decided or read, by machine_key: timed at most once per process.
_decided: dict[str, Choice] = {}


def decide(key: str, default: str, challenger: str, measure: Callable[[], Rounds]) -> Choice:
    """choose()'s verdict, once per process: the one memo of every timed choice (kernels, fusion, native ops).

    Args:
        key, default, challenger, measure: as choose() takes them.

    Returns:
        The Choice.
    """
    if key not in _decided:
        _decided[key] = choose(key, default, challenger, measure)
    return _decided[key]


def choose(key: str, default: str, challenger: str, measure: Callable[[], Rounds]) -> Choice:
    """The choice kept under `key`, else judge(measure()); a decided one is kept for later processes.

    An entry that does not hold rounds of both candidates (an older format, a damaged file) is timed
    again. Rounds that did not decide are kept with a count of tries: later processes time again until
    TRIES processes did not decide, then take the default without timing.

    Args:
        key: machine_key() of what is timed.
        default: the candidate kept unless the challenger wins.
        challenger: the other candidate.
        measure: times both.

    Returns:
        The Choice.
    """
    path = cache_path()
    entries = _read_cache(path)
    entry = entries.get(key)
    rounds = _kept_rounds(entry, (default, challenger))
    tries = entry.get("undecided", 0) if isinstance(entry, dict) else 0
    tries = tries if isinstance(tries, int) and tries > 0 else 0
    if rounds is not None:
        kept = judge(rounds, default, challenger, cached=True)
        if kept.decided:
            return kept
        if tries >= TRIES:
            return replace(kept, tries=tries)
    choice = judge(measure(), default, challenger)
    if not choice.decided:
        choice = replace(choice, tries=tries + 1)
    entries[key] = {"rounds": choice.rounds.seconds, "busy": choice.rounds.busy}
    if not choice.decided:
        entries[key]["undecided"] = choice.tries
    _write_cache(path, entries)
    return choice


def _kept_rounds(entry: Any, names: Sequence[str]) -> Rounds | None:
    # Only rounds of both candidates, of equal length and positive seconds, are judged again.
    seconds = entry.get("rounds") if isinstance(entry, dict) else None
    busy = entry.get("busy") if isinstance(entry, dict) else None
    if not isinstance(seconds, dict) or not isinstance(busy, int):
        return None
    kept = [seconds.get(name) for name in names]
    if not all(isinstance(r, list) and all(isinstance(s, (int, float)) and s > 0 for s in r) for r in kept):
        return None
    return Rounds(dict(zip(names, kept, strict=True)), busy) if len({len(r) for r in kept}) == 1 else None


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
