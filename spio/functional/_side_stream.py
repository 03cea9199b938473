"""A second stream for launches that may overlap those of PyTorch's current stream.

The conv backward runs the weight gradient on it while the input gradient runs on the current
stream (docs/ops/conv2d_gw8.md, "Thirty-sixth session"): `fork` makes the side stream wait for
the current stream's work so far and returns it, `join` makes the current stream wait for the
side stream's work so far. Between the two, tensors the side stream uses must stay referenced
(a tensor freed there goes back to the current stream's pool and could be handed out again
before the side stream is done with it); after the join every later use on the current stream
is ordered after the side stream's work, as if both had run on the current stream. Inside a CUDA
graph capture the fork and the join become the graph's branches.

One side stream (non-blocking, priority 0) and two events per thread and GPU, created at the
first fork of that thread on that GPU; never destroyed.
"""

from __future__ import annotations

import threading

import torch

_local = threading.local()


class SideStream:
    """The side stream of one thread on one GPU, with the events that order it."""

    __slots__ = ("stream", "_ready", "_done", "_wait")

    def __init__(self, index: int) -> None:
        from spio.cuda import driver

        with torch.cuda.device(index):  # the device's primary context current (PyTorch's)
            self.stream = driver.stream_create()
            self._ready = driver.event_create()
            self._done = driver.event_create()
        self._wait = driver.stream_wait

    def fork(self, stream: int) -> int:
        """The side stream's handle, after making it wait for `stream`'s work so far."""
        self._wait(self.stream, stream, self._ready)
        return self.stream

    def join(self, stream: int) -> None:
        """Makes `stream` wait for the side stream's work so far."""
        self._wait(stream, self.stream, self._done)


def side_stream(index: int) -> SideStream:
    """The calling thread's side stream on GPU `index`."""
    streams = _local.__dict__.setdefault("streams", {})
    side = streams.get(index)
    if side is None:
        side = streams[index] = SideStream(index)
    return side
