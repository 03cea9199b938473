"""Where an op runs: spio's kernel on a supported GPU, PyTorch's implementation otherwise."""

from __future__ import annotations

import functools

import torch

from spio.errors import FallbackDisabledError
from spio.settings import settings

MIN_COMPUTE_CAPABILITY = (8, 0)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def fallback_reason(*tensors: torch.Tensor | None) -> str | None:
    """Why spio's kernel can't run on these tensors (None entries skipped), or None when it can."""
    for t in tensors:
        if t is None:
            continue
        if t.device.type != "cuda":
            return f"the tensors are on {t.device.type}, not a CUDA GPU"
        cc = _capability(t.device.index if t.device.index is not None else 0)
        if cc < MIN_COMPUTE_CAPABILITY:
            return f"the GPU has compute capability {cc[0]}.{cc[1]}, below 8.0"
    return None


def use_fallback(op: str, *tensors: torch.Tensor | None) -> bool:
    """True when `op` must run PyTorch's implementation; raises when SPIO_DISABLE_FALLBACK=1."""
    reason = fallback_reason(*tensors)
    if reason is None:
        return False
    if settings().disable_fallback:
        raise FallbackDisabledError(op, reason)
    return True


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(t: torch.Tensor) -> int:
    """The raw handle of PyTorch's current stream on t's device.

    `torch.cuda.current_stream()` builds a Stream object (about 5 µs of host time on an H100
    machine, more than spio's whole launch); the raw getter returns the handle directly.
    """
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(t.device).cuda_stream
