"""Where an op runs: spio's kernel on a supported GPU, PyTorch's implementation otherwise; and
whether a call may take the eager path (a launch plan called directly, no dispatcher)."""

from __future__ import annotations

import functools

import torch
import torch.autograd.forward_ad as _forward_ad

from spio.errors import FallbackDisabledError
from spio.settings import settings

MIN_COMPUTE_CAPABILITY = (8, 0)

# Tensor types the eager path takes as they are: anything else (FakeTensor, FunctionalTensor,
# DTensor and other subclasses) goes through the dispatcher, which knows how to handle them.
PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})

_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_transforms = torch._C._functorch.peek_interpreter_stack
_jit_tracing = torch._C._get_tracing_state
_function_modes = torch._C._len_torch_function_stack
_function_mode_at = torch._C._get_function_stack_at
_any_autocast = torch._C._is_any_autocast_enabled


def untraced() -> bool:
    """Whether nothing records or intercepts this call, so an op may launch its plan directly:
    not under torch.compile (dynamo), no TorchDispatchMode (make_fx / export tracing, fake
    tensor mode, FlopCounterMode, ...), no TorchFunctionMode but `with torch.device(...)`'s (a
    user's mode sees `torch.ops.spio.*` calls), no functorch transform (vmap, grad, jvp), no
    forward-mode AD level and no torch.jit trace. Otherwise the op goes through the dispatcher,
    where its fake, autograd and fallback registrations serve those tools. About 0.3 µs.

    The ops check `torch.compiler.is_compiling()` first and on their own line (dynamo folds it
    to a constant and never traces the rest, which it could not)."""
    return (
        _forward_ad._current_level < 0
        and not _dispatch_modes()
        and (not _function_modes() or _only_device_modes())
        and _functorch_transforms() is None
        and _jit_tracing() is None
    )


def _only_device_modes() -> bool:
    """Whether every active TorchFunctionMode is a `with torch.device(...)` context (they set
    factory functions' default device; spio's ops pass their devices explicitly)."""
    from torch.utils._device import DeviceContext

    return all(type(_function_mode_at(i)) is DeviceContext for i in range(_function_modes()))


def autocast_dtype() -> torch.dtype | None:
    """The CUDA autocast dtype when autocast is enabled for CUDA, else None."""
    if _any_autocast() and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return None


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


def raw_stream(index: int) -> int:
    """The raw handle of PyTorch's current stream on device `index`.

    `torch.cuda.current_stream()` builds a Stream object (about 5 µs of host time on an H100
    machine, more than spio's whole launch); the raw getter returns the handle directly."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


@functools.cache
def device_attributes(index: int):
    """spio.cuda.DeviceAttributes of CUDA device `index`, read once per process."""
    from spio.cuda import device_attributes as read

    return read(index)
