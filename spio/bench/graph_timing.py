"""The GPU time of eager calls without their host time: the calls captured into a CUDA graph,
the graph replayed back to back, timed with CUDA events.

`fn` is captured `calls` times into one graph (its allocations come from the graph's private
pool, so every replay reuses them); after PyTorch's recipe of warm-up calls on a side stream
(autograd's backward and the caching allocator then capture cleanly), the graph is replayed
`replays` times per sample behind a GPU spin longer than the host's enqueue time
(`spio.timing.hold_for`), so that the interval between the events is kernels and the graph's own
inter-kernel gaps, never host time. The inputs are the same tensors every call, so operands that
fit in L2 (50 MB on an H100) stay there, as they do for back-to-back eager calls.

Capture fails for code that synchronizes or allocates outside PyTorch's allocator; the error
propagates (the caller reports the row without a graph time).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from spio.bench.stats import Stats, summarize
from spio.timing import hold_for

WARMUP_CALLS = 3


def graph_time_us(
    fn: Callable[[], object],
    *,
    calls: int = 10,
    replays: int = 20,
    samples: int = 5,
    device: torch.device | None = None,
) -> Stats:
    """µs of GPU time per fn() call: median and p20/p80 over `samples` timed runs of `replays`
    replays of a graph holding `calls` fn() calls."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    current.wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    finally:
        torch.cuda.synchronize(device)
    graph.replay()
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    host_us = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize(device)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    per_call: list[float] = []
    for _ in range(samples):
        hold_for(host_us, device)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize(device)
        per_call.append(start.elapsed_time(end) * 1e3 / (calls * replays))
    del graph
    return summarize(per_call)
