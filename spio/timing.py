"""GPU timing the way the references do it: CUDA events, time-based warm-up, L2 flushed, median.

Everything in spio that times GPU work goes through `bench()`: the benchmarks (`spio.bench`),
the samples the performance models are trained on (`spio.tune.collect`) and autotuning
(`spio.tune.rank.measure`), so reported numbers, training data and autotune winners share one
method. It sits below both users (`spio.bench` re-exports it as `spio.bench.timing`); `spio.tune`
never imports `spio.bench`. Imports torch (CUDA events), unlike the layers below `kernels`.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Timing:
    """Milliseconds per call: median and the 20th/80th percentiles over `reps` timed calls."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int

    def gbps(self, bytes_moved: int) -> float:
        return bytes_moved / (self.median_ms * 1e-3) / 1e9

    def tflops(self, flops: int) -> float:
        return flops / (self.median_ms * 1e-3) / 1e12


# A spin kernel is queued before each timed call, so the GPU is busy while the host enqueues the
# start event, fn and the end event: host time (Python between two launches, a slow launch path)
# cannot leak into the timed region as GPU idle time. It lasts HOLD_MIN_US or, for an fn whose
# host enqueue time (measured in the warm-up) is longer, twice that plus HOLD_MARGIN_US, at most
# HOLD_MAX_US; converted to cycles at the peak SM clock (a lower clock only lengthens it).
HOLD_MIN_US = 100.0
HOLD_MARGIN_US = 50.0
HOLD_MAX_US = 10_000.0
_warned_no_sleep = False


def hold_cycles(host_us: float, clock_khz: int) -> int:
    """GPU cycles of the spin before each timed call of an fn that takes `host_us` of host time
    to enqueue, on a GPU whose peak SM clock is `clock_khz`."""
    us = min(HOLD_MAX_US, max(HOLD_MIN_US, 2.0 * host_us + HOLD_MARGIN_US))
    return int(us * clock_khz / 1e3)


def _hold(cycles: int) -> None:
    """Queues a spin of `cycles` GPU clock cycles on the current stream (torch.cuda._sleep). A
    torch build without it gets a warning once: its timings may then include host time."""
    global _warned_no_sleep
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)
    elif not _warned_no_sleep:
        _warned_no_sleep = True
        warnings.warn(
            "spio.timing: torch.cuda._sleep is missing in this torch build, so timed calls are "
            "not held behind a GPU spin and host time between launches may be measured",
            RuntimeWarning,
            stacklevel=3,
        )


def hold_for(host_us: float, device: torch.device) -> None:
    """Queues a GPU spin on the current stream long enough (`hold_cycles`) for the host to enqueue
    `host_us` of work behind it, so that work then runs back to back, without host gaps."""
    _hold(hold_cycles(host_us, _clock_khz(device)))


def _host_us(fn: Callable[[], object], calls: int = 5) -> float:
    """The longest host time of `calls` calls of fn (enqueue only, no synchronisation), in µs."""
    longest = 0.0
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        longest = max(longest, time.perf_counter() - t0)
    return longest * 1e6


def _clock_khz(device: torch.device) -> int:
    """Peak SM clock in kHz, from the driver (CUDA 13's runtime properties no longer carry it)."""
    from spio.cuda import device_attributes

    index = device.index if device.index is not None else torch.cuda.current_device()
    return device_attributes(index).clock_khz


def _flush_buffer(device: torch.device) -> torch.Tensor:
    # Twice the L2 (50 MB on the H100) so no operand of the previous call survives in cache.
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20
    return torch.empty(2 * l2 // 4 + 1024, dtype=torch.int32, device=device)


def bench(
    fn: Callable[[], object],
    *,
    warmup_ms: float = 25.0,
    reps: int = 50,
    flush_l2: bool = True,
    device: torch.device | None = None,
) -> Timing:
    """Times fn() on the current stream; fn must only enqueue GPU work.

    Warms up with `warmup_ms` / (one call's event time) calls: that time, taken right after a
    sync, includes the host's enqueue gaps when the host is slower than the GPU, so the warm-up
    lasts about `warmup_ms` either way. Then times `reps` calls, each
    preceded (outside its timed region) by zeroing a buffer of twice the L2 size when `flush_l2`
    (which leaves the L2 full of dirty lines, as a training step's previous kernels do: their
    write-back lands inside the timed call, about 1 to 9 µs at 10-40 µs calls on an H100, unevenly
    across configs; docs/ops/conv2d_gw8.md, "Twenty-eighth session"),
    and by a GPU spin longer than fn's host enqueue time (`hold_cycles`, from the longest of 5
    warm-up calls; 100 µs at least, 10 ms at most) so that the host has enqueued the whole call
    before the GPU reaches it: the time is the GPU's, not the host's launch overhead (a CUDA graph
    replay measures the same), unless a single call's host time exceeds ~5 ms or varies far beyond
    the warm-up's.
    """
    device = device or torch.device("cuda", torch.cuda.current_device())
    flush = _flush_buffer(device) if flush_l2 else None
    fn()
    torch.cuda.synchronize(device)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize(device)
    once = max(start.elapsed_time(end), 1e-3)
    for _ in range(max(1, int(warmup_ms / once))):
        fn()
    torch.cuda.synchronize(device)  # an empty queue: fn() cannot block, _host_us times the host
    cycles = hold_cycles(_host_us(fn), _clock_khz(device))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush.zero_()
        _hold(cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return Timing(median_ms=statistics.median(times), p20_ms=q[1], p80_ms=q[7], reps=reps)


def copy_bandwidth_gbps(nbytes: int = 2**31, device: torch.device | None = None) -> float:
    """Measured device-to-device copy bandwidth, counting bytes read plus bytes written."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), flush_l2=False, reps=20, device=device)
    return t.gbps(2 * src.numel())
