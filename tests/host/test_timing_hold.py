"""spio.timing's hold: the spin before each timed call outlasts the call's host time
(hold_cycles), and bench() queues it outside the timed region, as its only spin (a fake
torch.cuda logs what bench does)."""

import pytest
import torch

from spio import timing
from spio.timing import HOLD_MAX_US, HOLD_MIN_US, hold_cycles


def test_hold_is_at_least_the_minimum():
    assert hold_cycles(0.0, 2_000_000) == int(HOLD_MIN_US * 2000)
    assert hold_cycles(20.0, 1_000_000) == int(HOLD_MIN_US * 1000)


def test_hold_outlasts_a_long_host_enqueue():
    # 300 µs of host time at 1.98 GHz: twice that plus the margin, in cycles.
    cycles = hold_cycles(300.0, 1_980_000)
    assert cycles / 1980 > 2 * 300
    assert cycles == int((2 * 300 + 50) * 1980)


def test_hold_is_capped():
    assert hold_cycles(1e6, 2_000_000) == int(HOLD_MAX_US * 2000)


class _FakeCuda:
    """torch.cuda's calls that bench() makes, logging them instead of touching a GPU."""

    def __init__(self, log: list[str]):
        class Event:
            def __init__(self, enable_timing: bool = False):
                pass

            def record(self) -> None:
                log.append("record")

            def elapsed_time(self, end) -> float:
                return 1.0

        class Flush:
            def zero_(self) -> None:
                log.append("flush")

        self.Event = Event
        self.flush = Flush()
        self.log = log

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.log.append("sync"))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(
            torch.cuda, "_sleep", lambda cycles: self.log.append("hold"), raising=False
        )
        monkeypatch.setattr(timing, "_clock_khz", lambda device: 1_000_000)
        monkeypatch.setattr(timing, "_flush_buffer", lambda device: self.flush)


def _bench_log(monkeypatch: pytest.MonkeyPatch, reps: int) -> list[str]:
    log: list[str] = []
    _FakeCuda(log).install(monkeypatch)
    timing.bench(lambda: log.append("fn"), reps=reps)
    return log


def test_bench_holds_each_timed_call_outside_its_timed_region(monkeypatch):
    # Each timed call: the L2 flush, then the hold, then start event, fn, end event; the warm-up
    # has no hold. So the hold is never timed, and it is the only spin bench queues.
    reps = 4
    log = _bench_log(monkeypatch, reps)
    timed = log[-1 - 5 * reps :]
    assert timed == ["flush", "hold", "record", "fn", "record"] * reps + ["sync"], log
    assert "hold" not in log[: -1 - 5 * reps], log


def test_bench_without_its_hold_queues_no_spin(monkeypatch):
    # tests/gpu/test_timing.py's control replaces _hold; nothing else may hold the GPU then.
    holds: list[int] = []
    monkeypatch.setattr(timing, "_hold", holds.append)
    log = _bench_log(monkeypatch, reps=4)
    assert "hold" not in log, log
    assert len(holds) == 4 and min(holds) >= hold_cycles(0.0, 1_000_000), holds
