"""The GPU time of some work from torch.profiler's CUDA trace (CUPTI): the time the GPU was busy
with its activities (kernels, memsets and copies), in total, and each activity name's summed
durations.

It counts kernels whatever launched them (cuBLAS, cuDNN, Triton, spio's driver launches) and
leaves out host gaps and idle time. The total is the union of the activities' intervals, not the
sum of their durations: a kernel launched with programmatic dependent launch (spio's wgrad
reduction) starts while its producer runs and waits in griddepcontrol.wait, so its duration
covers the producer's, and a sum counted that stretch twice (the layer profile once showed the
reduction as long as the wgrad kernel itself). Per-name durations still include such waits.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class GpuTime:
    """µs of GPU activity per call: the total and each activity name's share."""

    total_us: float
    by_name: dict[str, float]

    def top(self, k: int = 6, width: int = 60) -> str:
        """The k longest activities as "name µs; ...", names cut to `width` characters."""
        longest = sorted(self.by_name.items(), key=lambda kv: -kv[1])[:k]
        return "; ".join(f"{name[:width]} {us:.1f}" for name, us in longest)

    def only_in(self, other: GpuTime) -> GpuTime:
        """The activities `other` has none of (e.g. the kernels of a step with spio that the
        same step without it lacks: spio's own), their total the sum of their durations."""
        mine = {name: us for name, us in self.by_name.items() if name not in other.by_name}
        return GpuTime(sum(mine.values()), mine)


def device_times(events: Iterable[Any], calls: int = 1) -> GpuTime:
    """GpuTime per call of the GPU-side events among profiler `events` (FunctionEvent-like:
    name, device_type, time_range with start, end in µs) recorded over `calls` calls: the total
    is the busy time (overlapping activities counted once), by_name the summed durations."""
    cuda = torch.autograd.DeviceType.CUDA
    by_name: dict[str, float] = {}
    spans = []
    for e in events:
        if e.device_type == cuda:
            start, end = float(e.time_range.start), float(e.time_range.end)
            by_name[e.name] = by_name.get(e.name, 0.0) + (end - start) / calls
            spans.append((start, end))
    return GpuTime(busy_us(spans) / calls, by_name)


def busy_us(spans: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (µs)."""
    total = 0.0
    ordered = sorted(spans)
    if not ordered:
        return total
    run_start, run_end = ordered[0]
    for start, end in ordered[1:]:
        if start > run_end:  # a gap: the run so far is done
            total += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    return total + run_end - run_start


def profiled_gpu_time(fn: Callable[[], object], calls: int, device: torch.device) -> GpuTime:
    """GPU time per fn() call over `calls` calls under torch.profiler (warm fn up first)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with warnings.catch_warnings():
        # One profiling cycle here: its "clears events at the end of each cycle" is no news.
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize(device)
    return device_times(prof.events(), calls)
