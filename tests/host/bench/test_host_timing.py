"""spio.bench.host_timing on the CPU: the batches, the warm-up and the two clocks (host and as
called) of `spio bench overhead`, with a fake GPU (a sync that takes known time)."""

from __future__ import annotations

import time

import pytest

from spio.bench.host_timing import WARMUP_BATCHES, time_calls


def test_every_call_is_made_and_synced_per_batch():
    log: list[str] = []
    t = time_calls(lambda: log.append("call"), lambda: log.append("sync"), calls=4, batches=3)
    # warm-up batches: 4 calls + a sync each; timed batches: a sync before and after each.
    warm = (["call"] * 4 + ["sync"]) * WARMUP_BATCHES
    timed = (["sync"] + ["call"] * 4 + ["sync"]) * 3
    assert log == warm + timed
    assert t.host.n == t.as_called.n == 3


def test_host_time_excludes_the_final_sync_and_as_called_includes_it():
    # A host-cheap call and a slow "GPU" drain: as called = host + drain / calls.
    def sync():
        time.sleep(0.004)

    t = time_calls(lambda: None, sync, calls=10, batches=3, warmup_batches=0)
    assert t.host.median < 50  # µs per call: a no-op, far below the drain
    assert t.as_called.median >= 400  # 4 ms / 10 calls
    assert t.as_called.median > t.host.median


def test_host_time_measures_the_calls():
    def call():
        time.sleep(0.0005)

    t = time_calls(call, lambda: None, calls=5, batches=3, warmup_batches=1)
    assert 500 <= t.host.median <= t.as_called.median


@pytest.mark.parametrize("calls, batches, warmup", [(0, 1, 1), (1, 0, 1), (1, 1, -1)])
def test_bad_counts_are_errors(calls, batches, warmup):
    with pytest.raises(ValueError, match="must be"):
        time_calls(lambda: None, lambda: None, calls=calls, batches=batches, warmup_batches=warmup)
