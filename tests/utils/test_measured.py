"""bertlite.utils.measured: the rule that turns noisy timed rounds into a choice, and when a choice is kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertlite.utils import measured
from bertlite.utils.measured import FASTER_BY, ROUNDS, TRIES, Rounds, choose, judge, time_rounds

KEY = "test CPU; what was timed"


def rounds(*challenger_x: float, busy: int = 0) -> Rounds:
    """Rounds in which the challenger ran challenger_x[i] times faster than the default's 10 ms."""
    return Rounds({"default": [0.01] * len(challenger_x), "challenger": [0.01 / x for x in challenger_x]}, busy)


@pytest.fixture
def timings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """timings(*per_process): the rounds each later call of choose() gets from its timing, one Rounds per
    process, with an empty cache. Returns a function that runs choose() as a new process would."""
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    timed: list[Rounds] = []

    def use(*per_process: Rounds):
        queue = list(per_process)

        def measure() -> Rounds:
            timed.append(queue.pop(0))
            return timed[-1]

        def process() -> measured.Choice:
            return choose(KEY, "default", "challenger", measure)

        return process, timed

    return use


def _entry() -> dict:
    return json.loads(measured.cache_path().read_text())[KEY]


# --- the rule --------------------------------------------------------------------------


def test_a_win_in_every_round_is_picked_and_kept(timings):
    process, timed = timings(rounds(1.5, 1.45, 1.6, 1.5, 1.55))
    choice = process()
    assert (choice.picked, choice.decided, choice.cached) == ("challenger", True, False)
    assert choice.spread() == pytest.approx({"rounds": 5, "busy": 0, "min": 1.45, "median": 1.5, "max": 1.6})
    again = process()  # a new process: the file answers, nothing is timed
    assert (again.picked, again.decided, again.cached, len(timed)) == ("challenger", True, True, 1)
    assert again.ratios() == pytest.approx([1.5, 1.45, 1.6, 1.5, 1.55])
    assert _entry() == {"rounds": rounds(1.5, 1.45, 1.6, 1.5, 1.55).seconds, "busy": 0}


def test_a_loss_in_every_round_keeps_the_default_and_is_kept(timings):
    process, timed = timings(rounds(0.62, 0.6, 0.65, 0.61, 0.63))
    assert (process().picked, process().decided, len(timed)) == ("default", True, 1)


def test_a_single_lucky_round_does_not_win(timings):
    process, _ = timings(rounds(1.0, 1.02, 2.5, 0.98, 1.0))
    choice = process()
    assert (choice.picked, choice.decided) == ("default", False)
    assert choice.why == f"some rounds have challenger at >= {FASTER_BY:.2f}x, some not"


@pytest.mark.parametrize("last", [1.05, 0.5])
def test_a_win_must_hold_in_every_round(last):
    choice = judge(rounds(1.3, 1.3, 1.3, 1.3, last), "default", "challenger")
    assert (choice.picked, choice.decided) == ("default", False)


def test_rounds_that_spread_too_wide_decide_nothing_even_where_each_wins():
    choice = judge(rounds(1.2, 2.4, 1.5, 1.4, 1.6), "default", "challenger")
    assert (choice.picked, choice.decided) == ("default", False)
    assert choice.why == f"the rounds spread over more than {measured.SPREAD_LIMIT:.2f}x"


def test_too_few_rounds_decide_nothing():
    choice = judge(rounds(*[1.5] * (ROUNDS - 1), busy=9), "default", "challenger")
    assert (choice.picked, choice.decided) == ("default", False)
    assert choice.why == f"{ROUNDS - 1} of {ROUNDS} rounds counted in the time allowed"
    assert "(1.50-1.50x over 4 rounds; 9 dropped: other processes had the CPU)" in choice.summary()


def test_rounds_that_disagree_are_never_kept_and_timing_stops_after_tries(timings):
    noisy = rounds(1.5, 0.8, 1.6, 1.4, 0.9)
    process, timed = timings(*[noisy] * (TRIES + 1))
    for n in range(1, TRIES + 1):
        choice = process()
        assert (choice.picked, choice.decided, choice.cached, choice.tries, len(timed)) == (
            "default",
            False,
            False,
            n,
            n,
        )
        assert "challenger ran 1.40x default (0.80-1.60x over 5 rounds): default, not kept" in choice.summary()
        assert _entry() == {"rounds": noisy.seconds, "busy": 0, "undecided": n}
    gave_up = process()  # TRIES processes did not decide: the default, without timing
    assert (gave_up.picked, gave_up.decided, gave_up.cached, gave_up.tries) == ("default", False, True, TRIES)
    assert len(timed) == TRIES
    assert gave_up.summary().endswith(f"default; {TRIES} processes timed rounds that did not decide, so no more timing")


def test_rounds_that_decide_after_disagreeing_ones_are_kept(timings):
    process, timed = timings(rounds(1.5, 0.8, 1.6, 1.4, 0.9), rounds(1.5, 1.5, 1.6, 1.4, 1.5))
    assert process().decided is False
    assert (process().picked, process().decided) == ("challenger", True)
    assert "undecided" not in _entry() and (process().cached, len(timed)) == (True, 2)


@pytest.mark.parametrize(
    "entry",
    [
        {"default": 0.02, "challenger": 0.01},  # the format before rounds: one best pass per candidate
        {"rounds": {"default": [0.02] * 5}, "busy": 0},  # a candidate missing
        {"rounds": {"default": [0.02] * 5, "challenger": [0.01] * 4}, "busy": 0},  # rounds of unequal count
        {"rounds": {"default": [0.02] * 5, "challenger": [0.01] * 5}},  # no busy count
        {"rounds": {"default": [0.02] * 5, "challenger": [0.0] * 5}, "busy": 0},  # not seconds
        "bfloat16",
    ],
)
def test_an_entry_in_another_format_is_timed_again_and_rewritten(timings, entry):
    process, timed = timings(rounds(*[1.5] * 5))
    measured.cache_path().parent.mkdir(parents=True)
    measured.cache_path().write_text(json.dumps({KEY: entry, "another key": {"kept": True}}))
    assert (process().picked, len(timed)) == ("challenger", 1)
    assert json.loads(measured.cache_path().read_text()) == {
        KEY: {"rounds": rounds(*[1.5] * 5).seconds, "busy": 0},
        "another key": {"kept": True},
    }


# --- taking the rounds ------------------------------------------------------------------


class FakeSampler:
    """measured.sample's stand-in: per candidate, the seconds of a pass in turn (the last repeats), and
    the CPU share each sample got; records every call."""

    def __init__(self, passes: dict[str, list[float]], shares: list[float] | None = None):
        self.passes, self.shares, self.calls = passes, list(shares or []), []
        self.clock = 0.0

    def __call__(self, run, passes: int) -> tuple[float, float]:
        name = run()
        self.calls.append((name, passes))
        took = self.passes[name].pop(0) if len(self.passes[name]) > 1 else self.passes[name][0]
        self.clock += took * passes
        share = self.shares.pop(0) if passes > 1 and self.shares else 1.0  # warm-up passes have the CPU
        return took, share


def _runs() -> dict:
    return {"default": lambda: "default", "challenger": lambda: "challenger"}


def test_warms_until_stable_then_samples_enough_work_alternating_the_order(monkeypatch):
    sampler = FakeSampler({"default": [0.05, 0.011, 0.0102, 0.01], "challenger": [0.02, 0.005]})
    monkeypatch.setattr(measured, "sample", sampler)
    taken = time_rounds(_runs(), clock=lambda: sampler.clock)
    warm = [("default", 1)] * 3 + [("challenger", 1)] * 3  # stable at the third pass each: 0.011 ~ 0.0102, 0.005
    assert sampler.calls[:6] == warm
    samples = sampler.calls[6:]  # 0.03 s of work: 3 passes of 10.2 ms, 6 of 5 ms
    assert samples[:4] == [("default", 3), ("challenger", 6), ("challenger", 6), ("default", 3)]
    assert len(samples) == 2 * ROUNDS
    assert taken == Rounds({"default": [0.01] * ROUNDS, "challenger": [0.005] * ROUNDS}, busy=0)


def test_rounds_without_the_cpu_are_dropped_and_retaken(monkeypatch):
    # The CPU share of each sample in turn, two a round: one sample of the second and of the fourth round lacked it.
    shares = [1.0, 0.95] + [0.33, 1.0] + [1.0, 1.0] + [1.0, 0.4] + [0.9, 1.0] * 4
    sampler = FakeSampler({"default": [0.01], "challenger": [0.01]}, shares)
    monkeypatch.setattr(measured, "sample", sampler)
    taken = time_rounds(_runs(), clock=lambda: sampler.clock)
    assert taken.busy == 2 and len(taken.seconds["default"]) == ROUNDS
    assert judge(taken, "default", "challenger").spread()["busy"] == 2


def test_the_rounds_stop_when_the_budget_is_spent(monkeypatch):
    # A busy machine: every sample lacks the CPU, so no round counts, and the timing stops at the budget.
    sampler = FakeSampler({"default": [0.01], "challenger": [0.01]}, [0.3] * 10_000)
    monkeypatch.setattr(measured, "sample", sampler)
    taken = time_rounds(_runs(), clock=lambda: sampler.clock)
    assert taken.seconds == {"default": [], "challenger": []}
    assert sampler.clock == pytest.approx(measured.BUDGET_SECONDS, abs=0.1)  # one 0.06 s round past it at most
    assert taken.busy == pytest.approx(measured.BUDGET_SECONDS / 0.06, abs=2)
    choice = judge(taken, "default", "challenger")
    assert not choice.decided and choice.summary().startswith(f"no round counted ({taken.busy} dropped")


def test_a_sample_stops_at_twice_its_work_and_reports_the_cpu_share(monkeypatch):
    # Passes of 50 ms on a clock the test keeps, in which the process runs one thread of its threads' time.
    clock = [0.0]

    def run():
        clock[0] += 0.05

    monkeypatch.setattr(measured, "time", SimpleNamespace(perf_counter=lambda: clock[0], process_time=lambda: clock[0]))
    threads = min(torch.get_num_threads(), len(os.sched_getaffinity(0)))
    assert measured.sample(run, 100) == (pytest.approx(0.05), pytest.approx(1 / threads))
    assert clock[0] == pytest.approx(0.1)  # 2 of 100 passes: the second ended past 2 * 30 ms


def test_the_sampler_reports_seconds_per_pass_and_a_cpu_share():
    seconds, share = measured.sample(lambda: sum(range(20_000)), 3)
    assert seconds > 0 and 0 < share <= 1.5  # one busy thread of possibly several; the clocks' ticks differ a little
