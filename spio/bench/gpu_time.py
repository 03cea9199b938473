"""The GPU time of some work as the sum of its GPU activities' durations (kernels, memsets and
copies), read from torch.profiler's CUDA trace (CUPTI), in total and per kernel name.

It counts kernels whatever launched them (cuBLAS, cuDNN, Triton, spio's driver launches) and
leaves out host gaps and idle time; concurrent kernels on several streams are counted each, so
the sum can exceed the wall time.
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


def device_times(events: Iterable[Any], calls: int = 1) -> GpuTime:
    """GpuTime per call of the GPU-side events among profiler `events` (FunctionEvent-like:
    name, device_type, time_range.elapsed_us()) recorded over `calls` calls."""
    cuda = torch.autograd.DeviceType.CUDA
    by_name: dict[str, float] = {}
    for e in events:
        if e.device_type == cuda:
            by_name[e.name] = by_name.get(e.name, 0.0) + float(e.time_range.elapsed_us()) / calls
    return GpuTime(sum(by_name.values()), by_name)


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
