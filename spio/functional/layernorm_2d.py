"""`spio.functional.layernorm_2d`: LayerNorm over the channels of (N, C, H, W) activations.

    y[n, c, h, w] = (x[n, c, h, w] - mean) / sqrt(var + eps) * weight[c] + bias[c]

with the mean and biased variance over C of each pixel (n, h, w): timm's LayerNorm2d
(permute -> F.layer_norm -> permute) as one op, `torch.ops.spio.layernorm_2d`, with a fake
implementation and autograd through `torch.ops.spio.layernorm_2d_backward`.

Where it runs:
- spio's kernels (spio/src/layernorm_2d_*.cu) for CUDA tensors on sm_80+ with fp16, bf16 or fp32
  data, C a multiple of 8 in [8, 16384], and weight/bias of the data type or fp32.
- PyTorch otherwise (the fallback): CPU tensors, older GPUs, fp64 data, or C outside that
  range (C % 8 != 0 cannot use the 16-byte vector path), or 2**32 elements or more. The
  fallback computes y with F.layer_norm on the permuted view, exactly as timm does.
  SPIO_DISABLE_FALLBACK=1 turns every fallback into FallbackDisabledError.

Layout: the kernels read rows of C contiguous channels, i.e. channels_last. Other inputs (and
output gradients) are first copied to channels_last, one extra read and write of the tensor.
The output is always channels_last. Statistics (mean, rstd, saved for backward) are fp32 (fp64
for fp64 data).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spio.errors import FallbackDisabledError
from spio.functional._dispatch import stream_of, use_fallback
from spio.kernels.layernorm_2d_params import (
    C_MULTIPLE,
    MAX_C,
    MAX_ELEMENTS,
    MIN_C,
    LayerNorm2dParams,
)
from spio.settings import settings

OP = "spio::layernorm_2d"
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DTYPES = KERNEL_DTYPES + (torch.float64,)


def _check(input: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float) -> None:
    """Raises TypeError/ValueError naming the argument, the rule and the fix."""
    if not isinstance(input, Tensor):
        raise TypeError(f"layernorm_2d: input must be a torch.Tensor, got {type(input).__name__}")
    if input.dim() != 4:
        raise ValueError(
            f"layernorm_2d: input must be 4-D (N, C, H, W), got shape {tuple(input.shape)}; "
            "for (N, H, W, C) data use torch.nn.functional.layer_norm over the last dim"
        )
    if input.dtype not in DTYPES:
        raise TypeError(
            f"layernorm_2d: input dtype must be float16, bfloat16, float32 or float64, got "
            f"{input.dtype}; cast the input"
        )
    c = input.shape[1]
    if c < 1:
        raise ValueError("layernorm_2d: input must have at least one channel (C >= 1)")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(
                f"layernorm_2d: {name} must be a Tensor or None, got {type(t).__name__}"
            )
        if t.dim() != 1 or t.shape[0] != c:
            raise ValueError(
                f"layernorm_2d: {name} must have shape (C,) = ({c},), got {tuple(t.shape)}"
            )
        if t.device != input.device:
            raise ValueError(
                f"layernorm_2d: {name} is on {t.device} but input is on {input.device}; move "
                "them to one device"
            )
        if t.dtype not in (input.dtype, torch.float32):
            raise TypeError(
                f"layernorm_2d: {name} dtype must be the input dtype ({input.dtype}) or "
                f"float32, got {t.dtype}; cast {name}"
            )
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise TypeError(
            f"layernorm_2d: weight ({weight.dtype}) and bias ({bias.dtype}) must have one dtype"
        )
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"layernorm_2d: eps must be a float, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"layernorm_2d: eps must be a finite float >= 0, got {eps!r}")


def _kernel_limit(input: Tensor) -> str | None:
    """Why the kernel can't take this (CUDA, sm_80+) input, or None."""
    if input.dtype not in KERNEL_DTYPES:
        return f"the input is {input.dtype} (spio's kernels take float16, bfloat16, float32)"
    c = input.shape[1]
    if c % C_MULTIPLE or not MIN_C <= c <= MAX_C:
        return (
            f"C = {c} is not a multiple of {C_MULTIPLE} in [{MIN_C}, {MAX_C}] (the kernel "
            "moves whole 16-byte vectors of a row held in registers)"
        )
    if input.numel() >= MAX_ELEMENTS:
        return f"the input has {input.numel()} >= 2**32 elements (the kernels use 32-bit offsets)"
    return None


def _runs_fallback(input: Tensor, weight: Tensor | None, bias: Tensor | None) -> bool:
    if use_fallback(OP, input, weight, bias):
        return True
    reason = _kernel_limit(input)
    if reason is None:
        return False
    if settings().disable_fallback:
        raise FallbackDisabledError(OP, reason)
    return True


def _stats_dtype(input: Tensor) -> torch.dtype:
    return torch.float64 if input.dtype == torch.float64 else torch.float32


def _rows(t: Tensor) -> Tensor:
    """t as channels_last with 16-byte aligned storage (a copy only when needed)."""
    if not t.is_contiguous(memory_format=torch.channels_last) or t.data_ptr() % 16:
        t = t.clone(memory_format=torch.channels_last)
    return t


def _aligned(t: Tensor | None) -> Tensor | None:
    if t is None:
        return None
    if not t.is_contiguous() or t.data_ptr() % 16:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


@functools.cache
def _device(index: int):
    from spio.cuda import device_attributes

    return device_attributes(index)


def backward_config(p: LayerNorm2dParams, dev: Any) -> Any:
    """The backward's config for rows p.m, selected for the exact row count, not shared across
    M as the forward's is: it fixes how many dweight/dbias partial sums there are and their order,
    so sharing would make their bits depend on which M this process saw first."""
    from spio.kernels import layernorm_2d as k
    from spio.select import op_config

    return op_config(k.BWD, p, dev)


def _launch_setup(x: Tensor, weight: Tensor | None, bias: Tensor | None):
    p = LayerNorm2dParams.from_tensors(x, weight, bias)
    dev = _device(x.device.index if x.device.index is not None else torch.cuda.current_device())
    return p, dev


# ---- forward -------------------------------------------------------------------------------


def _forward_fallback(input, weight, bias, eps):
    c = input.shape[1]
    xp = input.permute(0, 2, 3, 1)
    mixed = any(t is not None and t.dtype != input.dtype for t in (weight, bias))
    if mixed:
        w = weight.float() if weight is not None else None
        b = bias.float() if bias is not None else None
        yp = F.layer_norm(xp.float(), (c,), w, b, eps).to(input.dtype)
    else:
        yp = F.layer_norm(xp, (c,), weight, bias, eps)
    y = torch.empty_like(input, memory_format=torch.channels_last)
    y.copy_(yp.permute(0, 3, 1, 2))
    xs = xp.to(_stats_dtype(input))
    mean = xs.mean(dim=-1)
    rstd = torch.rsqrt((xs - mean[..., None]).square().mean(dim=-1) + eps)
    return y, mean, rstd


def _forward_spio(input, weight, bias, eps):
    from spio.kernels import layernorm_2d as k
    from spio.kernels.loader import default_function_cache
    from spio.select import op_config

    x = _rows(input)
    weight, bias = _aligned(weight), _aligned(bias)
    n, _, h, w = x.shape
    y = torch.empty_like(x, memory_format=torch.channels_last)
    mean = x.new_empty((n, h, w), dtype=torch.float32)
    rstd = x.new_empty((n, h, w), dtype=torch.float32)
    with torch.cuda.device(x.device):
        p, dev = _launch_setup(x, weight, bias)
        if p.m == 0:
            return y, mean, rstd
        cfg = op_config(k.FWD, p, dev)  # one config per layer, whatever its row count
        loaded = default_function_cache().get(k.FWD, p.static(), cfg, dev)
        k.launch_forward(
            loaded,
            p,
            cfg,
            dev,
            x=x,
            weight=weight,
            bias=bias,
            y=y,
            mean=mean,
            rstd=rstd,
            eps=eps,
            stream=stream_of(x),
        )
    return y, mean, rstd


@torch.library.custom_op(OP, mutates_args=())
def layernorm_2d_op(
    input: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd): y channels_last like input; mean, rstd (N, H, W) fp32 (fp64 for fp64)."""
    _check(input, weight, bias, eps)
    if _runs_fallback(input, weight, bias):
        return _forward_fallback(input, weight, bias, eps)
    return _forward_spio(input, weight, bias, eps)


@layernorm_2d_op.register_fake
def _(input, weight, bias, eps):
    _check(input, weight, bias, eps)
    n, _, h, w = input.shape
    y = torch.empty_like(input, memory_format=torch.channels_last)
    stats = _stats_dtype(input)
    return y, input.new_empty((n, h, w), dtype=stats), input.new_empty((n, h, w), dtype=stats)


# ---- backward ------------------------------------------------------------------------------


def _backward_fallback(grad, input, mean, rstd, weight, bias):
    acc = _stats_dtype(input)
    xp = input.permute(0, 2, 3, 1).to(acc)
    g = grad.permute(0, 2, 3, 1).to(acc)
    mu, rs = mean.to(acc)[..., None], rstd.to(acc)[..., None]
    xhat = (xp - mu) * rs
    gw = g * weight.to(acc) if weight is not None else g
    c1 = gw.mean(dim=-1, keepdim=True)
    c2 = (gw * xhat).mean(dim=-1, keepdim=True)
    dx = torch.empty_like(input, memory_format=torch.channels_last)
    dx.copy_((rs * (gw - c1 - xhat * c2)).permute(0, 3, 1, 2))
    if weight is not None:
        dweight = (g * xhat).sum(dim=(0, 1, 2)).to(weight.dtype)
    else:
        dweight = input.new_empty((0,))
    dbias = g.sum(dim=(0, 1, 2)).to(bias.dtype) if bias is not None else input.new_empty((0,))
    return dx, dweight, dbias


def _backward_spio(grad, input, mean, rstd, weight, bias):
    from spio.kernels import layernorm_2d as k
    from spio.kernels.loader import default_function_cache

    x, g = _rows(input), _rows(grad)
    weight = _aligned(weight)
    mean, rstd = mean.contiguous(), rstd.contiguous()
    c = x.shape[1]
    dx = torch.empty_like(x, memory_format=torch.channels_last)
    dweight = x.new_empty((c,), dtype=weight.dtype) if weight is not None else x.new_empty((0,))
    dbias = x.new_empty((c,), dtype=bias.dtype) if bias is not None else x.new_empty((0,))
    with torch.cuda.device(x.device):
        p, dev = _launch_setup(x, weight, bias)
        if p.m == 0:
            dweight.zero_()
            dbias.zero_()
            return dx, dweight, dbias
        cache = default_function_cache()
        cfg = backward_config(p, dev)
        loaded = cache.get(k.BWD, p.static(), cfg, dev)
        # The reduce variant is derived inside launch_backward from the real parts count (not
        # selected); None: without weight and bias there is nothing to reduce.
        reduce_loaded = True if k.needs_reduce(p) else None
        parts = k.parts(loaded, p, cfg, dev)
        dw_part = x.new_empty((parts, c), dtype=torch.float32) if p.has_weight else None
        db_part = x.new_empty((parts, c), dtype=torch.float32) if p.has_bias else None
        k.launch_backward(
            loaded,
            reduce_loaded,
            p,
            cfg,
            dev,
            x=x,
            dy=g,
            mean=mean,
            rstd=rstd,
            weight=weight,
            dx=dx,
            dweight=dweight if p.has_weight else None,
            dbias=dbias if p.has_bias else None,
            dweight_part=dw_part,
            dbias_part=db_part,
            stream=stream_of(x),
        )
    return dx, dweight, dbias


@torch.library.custom_op("spio::layernorm_2d_backward", mutates_args=())
def layernorm_2d_backward_op(
    grad: Tensor,
    input: Tensor,
    mean: Tensor,
    rstd: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); dweight/dbias are empty (0,) tensors when weight/bias is None.

    bias is only read for its dtype (dbias = Σ grad does not depend on its value).
    """
    _check(input, weight, bias, 0.0)
    if grad.shape != input.shape or grad.dtype != input.dtype:
        raise ValueError(
            f"layernorm_2d_backward: grad must match input (shape {tuple(input.shape)}, "
            f"{input.dtype}), got {tuple(grad.shape)}, {grad.dtype}"
        )
    if _runs_fallback(input, weight, bias):
        return _backward_fallback(grad, input, mean, rstd, weight, bias)
    return _backward_spio(grad, input, mean, rstd, weight, bias)


@layernorm_2d_backward_op.register_fake
def _(grad, input, mean, rstd, weight, bias):
    c = input.shape[1]
    dx = torch.empty_like(input, memory_format=torch.channels_last)
    dweight = weight.new_empty((c,)) if weight is not None else input.new_empty((0,))
    dbias = bias.new_empty((c,)) if bias is not None else input.new_empty((0,))
    return dx, dweight, dbias


def _setup_context(ctx, inputs, output):
    input, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)  # statistics for backward, not for users
    ctx.save_for_backward(input, weight, bias, mean, rstd)


def _backward(ctx, grad_y, grad_mean, grad_rstd):
    input, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.spio.layernorm_2d_backward(
        grad_y, input, mean, rstd, weight, bias
    )
    return (
        dx if ctx.needs_input_grad[0] else None,
        dweight if weight is not None and ctx.needs_input_grad[1] else None,
        dbias if bias is not None and ctx.needs_input_grad[2] else None,
        None,
    )


layernorm_2d_op.register_autograd(_backward, setup_context=_setup_context)


def layernorm_2d(
    input: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-6
) -> Tensor:
    """LayerNorm over the C channels of a (N, C, H, W) tensor; returns y (channels_last).

    Args:
        input: (N, C, H, W) float16, bfloat16, float32 (kernel) or float64 (fallback) tensor;
            channels_last avoids a copy.
        weight: optional (C,) scale, of input's dtype or float32.
        bias: optional (C,) shift, of weight's dtype (input's dtype or float32).
        eps: added to the variance, >= 0.

    Numerically a drop-in for timm's LayerNorm2d. See the module docstring for where it runs.
    """
    _check(input, weight, bias, eps)
    return torch.ops.spio.layernorm_2d(input, weight, bias, float(eps))[0]
