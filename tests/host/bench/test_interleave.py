"""spio.bench.interleave: `spio bench e2e`'s round schedule, its timing loop (fake clock) and the
torch / spio comparison."""

from __future__ import annotations

import pytest

from spio.bench.interleave import compare, schedule, time_rounds


def test_schedule_alternates_which_runner_goes_first():
    assert schedule(["torch", "spio"], 4) == [
        ("torch", "spio"),
        ("spio", "torch"),
        ("torch", "spio"),
        ("spio", "torch"),
    ]
    assert schedule(["a"], 2) == [("a",), ("a",)]


@pytest.mark.parametrize("names, rounds", [(["a", "b"], 0), ([], 3)])
def test_schedule_needs_rounds_and_runners(names, rounds):
    with pytest.raises(ValueError, match="at least one round"):
        schedule(names, rounds)


class FakeClock:
    """A clock that each runner's step advances by a known number of seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_time_rounds_times_blocks_in_the_schedules_order():
    clock = FakeClock()
    log: list[str] = []

    def runner(name: str, seconds: float):
        def step():
            log.append(name)
            clock.now += seconds

        return step

    syncs = []
    times = time_rounds(
        {"torch": runner("torch", 0.004), "spio": runner("spio", 0.002)},
        rounds=3,
        steps=2,
        sync=lambda: syncs.append(clock.now),
        clock=clock,
    )
    assert times["torch"] == pytest.approx([4.0, 4.0, 4.0])  # ms per step
    assert times["spio"] == pytest.approx([2.0, 2.0, 2.0])
    order = ["torch"] * 2 + ["spio"] * 2 + ["spio"] * 2 + ["torch"] * 2 + ["torch"] * 2
    assert log == order + ["spio"] * 2
    assert len(syncs) == 2 * 2 * 3  # before and after each block, never between steps


def test_compare_pairs_rounds():
    c = compare([10.0, 12.0, 11.0], [5.0, 4.0, 5.5])
    assert c.baseline.median == 11.0 and c.candidate.median == 5.0
    assert c.ratio == pytest.approx(11.0 / 5.0)
    assert c.ratio_low == pytest.approx(2.0) and c.ratio_high == pytest.approx(3.0)


def test_compare_needs_matching_rounds():
    with pytest.raises(ValueError, match="same nonzero number of rounds"):
        compare([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="same nonzero number of rounds"):
        compare([], [])
