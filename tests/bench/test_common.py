"""bench.common's rounds: rotated order, every call's result, seconds per round and the configs' rates."""

from __future__ import annotations

import pytest

from bench.common import interleaved, rates, timed, timed_rounds


def test_interleaved_rotates_the_order_and_keeps_every_call():
    calls: list[str] = []
    runs = {name: (lambda name=name: calls.append(name) or len(calls)) for name in "abc"}
    results = interleaved(runs, 3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert results == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}


def test_timed_rounds_times_each_call_and_keeps_its_last_output():
    outputs = iter(range(100))
    seconds, last = timed_rounds({"a": lambda: next(outputs), "b": lambda: next(outputs)}, 2, 0.0, count=10)
    assert [len(s) for s in seconds.values()] == [2, 2]
    assert all(s >= 0 for values in seconds.values() for s in values)
    assert last == {"a": 3, "b": 2}  # round 2 runs b first
    assert timed(lambda: "x")[1] == "x"


def test_rates_gives_the_median_rate_and_the_per_round_ratio_to_the_base():
    configs = rates({"base": [2.0, 4.0, 2.0], "fast": [1.0, 1.0, 1.0]}, 100, "base", "per_round_x_base", unit="pairs")
    assert configs["fast"] == {"seconds": [1.0, 1.0, 1.0], "pairs_per_s": 100.0, "per_round_x_base": 2.0}
    assert configs["base"]["pairs_per_s"] == pytest.approx(50.0)
    assert configs["base"]["per_round_x_base"] == 1.0
