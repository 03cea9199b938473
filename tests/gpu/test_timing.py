"""spio.timing.bench on a GPU: it times the GPU's work, not the host's time between launches."""

from __future__ import annotations

import time

import pytest
import torch

from spio.timing import bench

pytestmark = pytest.mark.gpu


def _host_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_host_gap_between_launches_is_not_timed():
    """Two tiny kernels with 40 µs of Python between them: the GPU work is a few µs, and the
    hold queued before each timed call keeps the host's 40 µs out of the measurement."""
    a = torch.zeros(1024, device="cuda")

    def two_launches_with_a_host_gap():
        a.add_(1)
        _host_wait(40e-6)
        a.add_(1)

    gap = bench(two_launches_with_a_host_gap, reps=30).median_ms * 1e3
    plain = bench(lambda: (a.add_(1), a.add_(1)), reps=30).median_ms * 1e3
    print(f"\nwith a 40 us host gap: {gap:.1f} us; without: {plain:.1f} us")
    assert gap < plain + 20, f"host time leaked into the timing: {gap:.1f} us vs {plain:.1f} us"
