"""What one op call costs as users call it: back-to-back eager calls timed by the host clock.

Each batch starts with an idle GPU (synchronized before the batch, outside the timed region),
then makes `calls` calls back to back with nothing in between (no synchronize, no GPU spin that
would hide host time) and reads the clock twice:

- host: the time to make the calls (the host's cost: Python, dispatch, allocation, launches),
  per call. The calls are enqueued faster than a GPU-bound op runs them, so the GPU's queue
  grows; `calls` times the launches per call stays well under the driver's queue of pending
  launches (about a thousand) so that the host is never blocked by it inside the timed region.
- as called: the same interval up to the end of a `sync()` after the last call, per call: what a
  loop of such calls takes when the GPU is the bound (about max(host, GPU) per call, plus the
  first call's host time and the last call's GPU time spread over `calls`).

Medians and p20/p80 over the batches (`spio.bench.stats`). Python's garbage collector stays on,
as in a user's loop. Host code only: `sync` is a parameter (torch.cuda.synchronize on a GPU), so
the method is checked on the CPU too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from spio.bench.stats import Stats, summarize

WARMUP_BATCHES = 3


@dataclass(frozen=True, slots=True)
class CallTiming:
    """µs per call: `host` to make the calls, `as_called` until the GPU has run them too."""

    host: Stats
    as_called: Stats


def time_calls(
    fn: Callable[[], object],
    sync: Callable[[], object],
    *,
    calls: int,
    batches: int,
    warmup_batches: int = WARMUP_BATCHES,
) -> CallTiming:
    """Times `batches` batches of `calls` back-to-back fn() calls after `warmup_batches`
    untimed ones (compiles, config selection, module loads and allocator growth happen there)."""
    if calls < 1 or batches < 1 or warmup_batches < 0:
        raise ValueError(
            f"time_calls: calls ({calls}) and batches ({batches}) must be >= 1, "
            f"warmup_batches ({warmup_batches}) >= 0"
        )
    for _ in range(warmup_batches):
        for _ in range(calls):
            fn()
        sync()
    host: list[float] = []
    as_called: list[float] = []
    clock = time.perf_counter_ns
    for _ in range(batches):
        sync()
        t0 = clock()
        for _ in range(calls):
            fn()
        t1 = clock()
        sync()
        t2 = clock()
        host.append((t1 - t0) / calls / 1e3)
        as_called.append((t2 - t0) / calls / 1e3)
    return CallTiming(host=summarize(host), as_called=summarize(as_called))
