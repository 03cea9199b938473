"""The GPU time of some work as the sum of its GPU activities' durations (kernels, memsets and
copies), read from torch.profiler's CUDA trace (CUPTI).

It counts kernels whatever launched them (cuBLAS, cuDNN, Triton, spio's driver launches) and
leaves out host gaps and idle time; concurrent kernels on several streams are counted each, so
the sum can exceed the wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def device_time_us(events: Iterable[Any]) -> float:
    """Total µs of the GPU-side events among profiler `events` (FunctionEvent-like: device_type
    and time_range.elapsed_us())."""
    cuda = torch.autograd.DeviceType.CUDA
    return sum(float(e.time_range.elapsed_us()) for e in events if e.device_type == cuda)


def profiled_gpu_us(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    """GPU µs per fn() call over `calls` calls under torch.profiler (warm fn up first)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    return device_time_us(prof.events()) / calls
