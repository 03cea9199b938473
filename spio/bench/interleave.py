"""Timing two (or more) training loops fairly: interleaved rounds, alternating which goes first.

Clocks, temperature and the allocator drift during a run; timing all of torch's steps and then
all of spio's would put that drift into the ratio. Here each round times a block of steps of
every runner, the first runner of a round going last in the next, and the comparison pairs the
runners' times round by round (the spread of those per-round ratios is the ratio's noise).
A block is synchronized before it starts and after its last step only, so the steps inside it
run back to back as in training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from spio.bench.stats import Stats, summarize


def schedule(names: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """The order of the runners in each round: `names` in even rounds, reversed in odd ones."""
    if rounds < 1 or not names:
        raise ValueError(f"schedule: need at least one round ({rounds}) and a runner ({names})")
    return [tuple(names) if r % 2 == 0 else tuple(reversed(names)) for r in range(rounds)]


def time_rounds(
    runners: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    steps: int,
    sync: Callable[[], object],
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Milliseconds per step of each runner in each round (lists in round order)."""
    if steps < 1:
        raise ValueError(f"time_rounds: steps must be >= 1, got {steps}")
    times: dict[str, list[float]] = {name: [] for name in runners}
    for order in schedule(list(runners), rounds):
        for name in order:
            step = runners[name]
            sync()
            t0 = clock()
            for _ in range(steps):
                step()
            sync()
            times[name].append((clock() - t0) * 1e3 / steps)
    return times


@dataclass(frozen=True, slots=True)
class Comparison:
    """A baseline's and a candidate's ms per step, and baseline / candidate (> 1: the
    candidate is faster): the ratio of the medians, and the lowest and highest per-round ratio."""

    baseline: Stats
    candidate: Stats
    ratio: float
    ratio_low: float
    ratio_high: float


def compare(baseline: Sequence[float], candidate: Sequence[float]) -> Comparison:
    """Compares per-round times (same rounds, same order) of a baseline and a candidate."""
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError(
            f"compare: need the same nonzero number of rounds, got {len(baseline)} and "
            f"{len(candidate)}"
        )
    per_round = [b / c for b, c in zip(baseline, candidate, strict=True)]
    base, cand = summarize(baseline), summarize(candidate)
    return Comparison(base, cand, base.median / cand.median, min(per_round), max(per_round))
