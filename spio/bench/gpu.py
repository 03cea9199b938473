"""Whether this machine has a GPU the benchmarks can time spio's kernels on."""

from __future__ import annotations


def gpu_unavailable() -> str | None:
    """Why the benchmarks can't run spio's kernels here (no CUDA GPU, or one below sm_80, where
    the ops run PyTorch's fallback), or None when they can."""
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    cc = torch.cuda.get_device_capability()
    if cc < (8, 0):
        return f"needs a GPU of compute capability 8.0+ (this one is {cc[0]}.{cc[1]}: fallbacks)"
    return None
