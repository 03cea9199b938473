"""spio.timing.bench on a GPU: it times the GPU's work, not the host's time between launches.

No L2 flush here: the flush (~35-45 µs of GPU time before each timed call) would itself hide part
of a host gap and let the test pass without the hold. Each arm is the lowest of 3 medians, so a
busy GPU (the suite runs under xdist) cannot fail it by inflating one arm."""

from __future__ import annotations

import time

import pytest
import torch

from spio import timing

pytestmark = pytest.mark.gpu


def _host_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _us(fn) -> float:
    return min(timing.bench(fn, reps=30, flush_l2=False).median_ms * 1e3 for _ in range(3))


def test_host_gap_between_launches_is_not_timed(monkeypatch):
    """Two tiny kernels with 40 µs and 300 µs of Python between them (the second longer than
    the 100 µs minimum hold: the hold grows with the host time measured in the warm-up): the GPU
    work is a few µs and is all that is measured. Without the hold the gap shows (control)."""
    assert hasattr(torch.cuda, "_sleep"), "this torch build has no torch.cuda._sleep"
    a = torch.zeros(1024, device="cuda")

    def with_gap(us: float):
        def two_launches():
            a.add_(1)
            _host_wait(us * 1e-6)
            a.add_(1)

        return two_launches

    plain = _us(lambda: (a.add_(1), a.add_(1)))
    print(f"\nplain: {plain:.1f} us")
    assert plain < 30, (
        f"two tiny adds timed at {plain:.1f} us: the hold is inside the timed region?"
    )
    for gap in (40, 300):
        held = _us(with_gap(gap))
        print(f"{gap} us host gap: {held:.1f} us")
        assert held < plain + 15, (
            f"host time leaked: {held:.1f} us vs {plain:.1f} us ({gap} us gap)"
        )

    monkeypatch.setattr(timing, "_hold", lambda cycles: None)
    leaked = _us(with_gap(300))
    print(f"300 us host gap, no hold: {leaked:.1f} us")
    assert leaked > plain + 150, f"the control did not show the gap ({leaked:.1f} us)"
