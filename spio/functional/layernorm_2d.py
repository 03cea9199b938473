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

Call path: the first call with a signature (shapes, strides, dtypes, devices, eps) validates
it, selects the configs and binds the launches in a plan; later calls look it up and launch.
Eager calls that nothing traces run the plan directly: without autograd the statistics are not
written at all, with it a torch.autograd.Function saves them; traced calls (torch.compile,
dispatch modes, subclasses) go through `torch.ops.spio.layernorm_2d`, whose CUDA implementation
runs the same plans. The forward's and backward's configs are selected for the layer at its rows'
power-of-two bucket (`spio.kernels.layernorm_2d.select_rows`, at most SELECT_ROWS), so y's and
dweight/dbias's bits depend on the shape alone and a new batch size loads a new variant only in a
bucket the process has not run.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spio.errors import FallbackDisabledError
from spio.functional import _plans
from spio.functional._autograd import first_order
from spio.functional._dispatch import (
    PLAIN_TYPES,
    device_attributes,
    raw_stream,
    untraced,
    use_fallback,
)
from spio.kernels.layernorm_2d_params import (
    C_MULTIPLE,
    MAX_C,
    MAX_ELEMENTS,
    MIN_C,
    LayerNorm2dParams,
)
from spio.settings import settings

OP = "spio layernorm_2d"
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DTYPES = KERNEL_DTYPES + (torch.float64,)
_CL = torch.channels_last
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_empty = torch.empty
_empty_strided = torch.empty_strided


def _check(input: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float) -> None:
    """Raises TypeError/ValueError naming the argument, the rule and the fix."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{OP}: input must be a torch.Tensor, got {type(input).__name__}")
    if input.dim() != 4:
        raise ValueError(
            f"{OP}: input must be 4-D (N, C, H, W), got shape {tuple(input.shape)}; "
            "for (N, H, W, C) data use torch.nn.functional.layer_norm over the last dim"
        )
    if input.dtype not in DTYPES:
        raise TypeError(
            f"{OP}: input dtype must be float16, bfloat16, float32 or float64, got "
            f"{input.dtype}; cast the input"
        )
    c = input.shape[1]
    if c < 1:
        raise ValueError(f"{OP}: input must have at least one channel (C >= 1)")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{OP}: {name} must be a Tensor or None, got {type(t).__name__}")
        if t.dim() != 1 or t.shape[0] != c:
            raise ValueError(f"{OP}: {name} must have shape (C,) = ({c},), got {tuple(t.shape)}")
        if t.device != input.device:
            raise ValueError(
                f"{OP}: {name} is on {t.device} but input is on {input.device}; move "
                "them to one device"
            )
        if t.dtype not in (input.dtype, torch.float32):
            raise TypeError(
                f"{OP}: {name} dtype must be the input dtype ({input.dtype}) or "
                f"float32, got {t.dtype}; cast {name}"
            )
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise TypeError(
            f"{OP}: weight ({weight.dtype}) and bias ({bias.dtype}) must have one dtype"
        )
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"{OP}: eps must be a float, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{OP}: eps must be a finite float >= 0, got {eps!r}")


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
    if use_fallback("layernorm_2d", input, weight, bias):
        return True
    reason = _kernel_limit(input)
    if reason is None:
        return False
    if settings().disable_fallback:
        raise FallbackDisabledError("layernorm_2d", reason)
    return True


def _stats_dtype(input: Tensor) -> torch.dtype:
    return torch.float64 if input.dtype == torch.float64 else torch.float32


# ---- the PyTorch fallback ------------------------------------------------------------------


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


# ---- launch plans ----------------------------------------------------------------------------

_FORWARD = _plans.PlanCache("layernorm_2d")
_BACKWARD = _plans.PlanCache("layernorm_2d_backward")


def _key(input: Tensor, weight: Tensor | None, bias: Tensor | None, eps: Any) -> tuple:
    """A call's signature: what its plan depends on."""
    w, b = weight, bias
    return (
        input.shape, input.stride(), input.dtype, input.device,
        None if w is None else (w.shape, w.stride(), w.dtype, w.device),
        None if b is None else (b.shape, b.stride(), b.dtype, b.device),
        type(eps), eps,  # the type too: True == 1.0 would otherwise reuse eps=1.0's plan
    )  # fmt: skip


def _forward_plan(input: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float) -> Any:
    """The plan of a call signature, or DISPATCH when the op must decide (the fallback, M = 0).
    Raises on invalid arguments."""
    _check(input, weight, bias, eps)
    if _runs_fallback(input, weight, bias) or input.numel() == 0:
        return _plans.DISPATCH
    return _Plan(input, weight, bias, float(eps))


def _aligned(t: Tensor | None) -> Tensor | None:
    if t is not None and (not t.is_contiguous() or t.data_ptr() & 15):
        t = t.clone(memory_format=torch.contiguous_format)
    return t


class _Plan:
    """One call signature on one GPU: the bound forward launch (and the backward's, built at
    the first backward), the sizes of y, the statistics and the gradients."""

    __slots__ = (
        "p", "dev", "fwd", "_bwd", "size", "stride", "dtype", "wdtype", "device", "index",
        "x_cl", "m", "eps",
    )  # fmt: skip

    def __init__(self, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float) -> None:
        from spio.kernels import layernorm_2d as k

        self.p = LayerNorm2dParams.from_tensors(x, weight, bias)
        self.index = x.device.index
        self.dev = device_attributes(self.index)
        cfg, loaded = _selected(k.FWD, self.p, self.dev)
        with torch.cuda.device(self.index):  # the occupancy query runs on the plan's GPU
            self.fwd = k.ForwardLaunch(loaded, self.p, cfg, self.dev)
        self._bwd: Any = None
        self.size = tuple(x.shape)
        self.stride = tuple(torch.empty(self.size, device="meta", memory_format=_CL).stride())
        self.dtype = x.dtype
        affine = weight if weight is not None else bias
        self.wdtype = affine.dtype if affine is not None else x.dtype
        self.device = x.device
        self.x_cl = x.is_contiguous(memory_format=_CL)
        self.m = self.p.m
        self.eps = eps

    def rows(self, x: Tensor) -> Tensor:
        """x as the kernels read it: channels_last, 16-byte aligned."""
        if not self.x_cl or x.data_ptr() & 15:
            x = x.clone(memory_format=_CL)
        return x

    def forward(self, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
        """y alone (the statistics are not written: inference)."""
        x = self.rows(x)
        y = _empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        self.fwd(x, _aligned(weight), _aligned(bias), y, 0, 0, self.eps, raw_stream(self.index))
        return y

    def forward_saving(
        self, x: Tensor, weight: Tensor | None, bias: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """(y, stats): stats (2, M) fp32, the mean and rstd rows the backward reads."""
        y = _empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        stats = _empty((2, self.m), dtype=torch.float32, device=self.device)
        mean = stats.data_ptr()
        self.fwd(x, weight, bias, y, mean, mean + 4 * self.m, self.eps, raw_stream(self.index))
        return y, stats

    def backward(
        self, dy: Tensor, x: Tensor, mean: Any, rstd: Any, weight: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(dx, dweight or None, dbias or None); mean/rstd: tensors or device addresses."""
        bwd = self._bwd
        if bwd is None:
            bwd = self._bwd = _backward_plan(self.p, self.dev)
        if not dy.is_contiguous(memory_format=_CL) or dy.data_ptr() & 15:
            dy = dy.clone(memory_format=_CL)
        dx = _empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        p = self.p
        dweight = _empty(p.c, dtype=self.wdtype, device=self.device) if p.has_weight else None
        dbias = _empty(p.c, dtype=self.wdtype, device=self.device) if p.has_bias else None
        workspace = None
        if bwd.workspace_floats:
            workspace = _empty(bwd.workspace_floats, dtype=torch.float32, device=self.device)
        bwd(x, dy, mean, rstd, weight, dx, dweight, dbias, workspace, raw_stream(self.index))
        return dx, dweight, dbias


def _selected(kdef, p: LayerNorm2dParams, dev) -> tuple[Any, Any]:
    """(the config the op runs for p, its loaded kernel), loaded on dev."""
    from spio.kernels.loader import default_function_cache
    from spio.select import op_config

    with torch.cuda.device(dev.ordinal):  # an autotune measures on the plan's GPU
        cfg = op_config(kdef, p, dev)
        return cfg, default_function_cache().get(kdef, kdef.compiled(p), cfg, dev)


def _backward_plan(p: LayerNorm2dParams, dev) -> Any:
    """The bound backward of layer p (M included) on dev, shared by every caller: the config
    selected for the layer (`layernorm_2d.select_at_row_bucket`), the reduce derived from it."""
    from spio.kernels import layernorm_2d as k

    key = (p, dev.ordinal)
    plan = _BACKWARD.get(key)
    if plan is None:
        cfg, loaded = _selected(k.BWD, p, dev)
        with torch.cuda.device(dev.ordinal):
            plan = _BACKWARD[key] = k.BackwardLaunch(loaded, p, cfg, dev)
    return plan


class _LayerNorm2d(torch.autograd.Function):
    """The eager path's autograd: the plan's forward (saving the statistics) and backward."""

    @staticmethod
    def forward(ctx, input, weight, bias, plan):
        x = plan.rows(input)
        weight, bias = _aligned(weight), _aligned(bias)
        y, stats = plan.forward_saving(x, weight, bias)
        ctx.save_for_backward(x, weight, stats)
        ctx.plan = plan
        return y

    @staticmethod
    @first_order
    def backward(ctx, grad_y):
        x, weight, stats = ctx.saved_tensors
        plan = ctx.plan
        mean = stats.data_ptr()
        dx, dweight, dbias = plan.backward(grad_y, x, mean, mean + 4 * plan.m, weight)
        need = ctx.needs_input_grad
        return (
            dx if need[0] else None,
            dweight if need[1] else None,
            dbias if need[2] else None,
            None,
        )


# torch.autograd.Function.apply without its Python wrapper, which binds default arguments and
# unwraps dead functorch wrappers (2-3 µs): the eager path calls it only when no functorch
# transform is active (`untraced()`), with no defaults to bind.
_layernorm2d_apply = super(torch.autograd.Function, _LayerNorm2d).apply


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
    if _compiling():
        return _through_op(input, weight, bias, eps)
    if (
        type(input) is Tensor
        and (weight is None or type(weight) in PLAIN_TYPES)
        and (bias is None or type(bias) in PLAIN_TYPES)
        and input.is_cuda
        and untraced()
    ):
        key = _key(input, weight, bias, eps)
        try:
            plan = _FORWARD.get(key)
        except TypeError:  # an unhashable eps: the op path reports it
            return _through_op(input, weight, bias, eps)
        if plan is None:
            plan = _FORWARD[key] = _forward_plan(input, weight, bias, eps)
        if plan is not _plans.DISPATCH:
            if _grad_enabled() and (
                input.requires_grad
                or (weight is not None and weight.requires_grad)
                or (bias is not None and bias.requires_grad)
            ):
                return _layernorm2d_apply(input, weight, bias, plan)
            return plan.forward(input, weight, bias)
    return _through_op(input, weight, bias, eps)


def _through_op(input, weight, bias, eps) -> Tensor:
    """The call through the dispatcher (torch.compile, tensor subclasses, dispatch modes, the
    fallback)."""
    _check(input, weight, bias, eps)
    return torch.ops.spio.layernorm_2d(input, weight, bias, float(eps))[0]


# ---- the ops --------------------------------------------------------------------------------

# define + impl + register_fake + register_autograd: the dispatcher's cheapest registration that
# keeps opcheck, torch.compile and autograd (docs/ops/overhead.md has the measurements).
_LIB = torch.library.Library("spio", "FRAGMENT")
_LIB.define(
    "layernorm_2d(Tensor input, Tensor? weight, Tensor? bias, float eps) "
    "-> (Tensor, Tensor, Tensor)"
)
_LIB.define(
    "layernorm_2d_backward(Tensor grad, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
    "Tensor? bias) -> (Tensor, Tensor, Tensor)"
)


def _forward_op(input, weight, bias, eps):
    """(y, mean, rstd): y channels_last like input; mean, rstd (N, H, W) fp32 (fp64 for fp64)."""
    plan = _FORWARD.get(_key(input, weight, bias, eps))
    if plan is None or plan is _plans.DISPATCH:
        _check(input, weight, bias, eps)
        if _runs_fallback(input, weight, bias):
            return _forward_fallback(input, weight, bias, eps)
        if input.numel() == 0:
            n, _, h, w = input.shape
            y = torch.empty_like(input, memory_format=_CL)
            mean = input.new_empty((n, h, w), dtype=torch.float32)
            return y, mean, torch.empty_like(mean)
        plan = _plan_for(input, weight, bias, eps)
    x = plan.rows(input)
    weight, bias = _aligned(weight), _aligned(bias)
    y = _empty_strided(plan.size, plan.stride, dtype=plan.dtype, device=plan.device)
    n, _, h, w = plan.size
    mean = _empty((n, h, w), dtype=torch.float32, device=plan.device)
    rstd = _empty((n, h, w), dtype=torch.float32, device=plan.device)
    plan.fwd(x, weight, bias, y, mean, rstd, plan.eps, raw_stream(plan.index))
    return y, mean, rstd


def _plan_for(input, weight, bias, eps) -> _Plan:
    """The plan of the op's arguments (the cache the eager path uses, under the same key)."""
    key = _key(input, weight, bias, eps)
    plan = _FORWARD.get(key)
    if plan is None or plan is _plans.DISPATCH:
        plan = _FORWARD[key] = _Plan(input, weight, bias, float(eps))
    return plan


def _forward_fake(input, weight, bias, eps):
    _check(input, weight, bias, eps)
    n, _, h, w = input.shape
    y = torch.empty_like(input, memory_format=torch.channels_last)
    stats = _stats_dtype(input)
    return y, input.new_empty((n, h, w), dtype=stats), input.new_empty((n, h, w), dtype=stats)


def _backward_op(grad, input, mean, rstd, weight, bias):
    """(dx, dweight, dbias); dweight/dbias are empty (0,) tensors when weight/bias is None.

    bias is only read for its dtype (dbias = Σ grad does not depend on its value).
    """
    if grad.shape != input.shape or grad.dtype != input.dtype:
        raise ValueError(
            f"{OP}_backward: grad must match input (shape {tuple(input.shape)}, "
            f"{input.dtype}), got {tuple(grad.shape)}, {grad.dtype}"
        )
    plan = _FORWARD.get(_key(input, weight, bias, 0.0))
    if plan is None or plan is _plans.DISPATCH:
        _check(input, weight, bias, 0.0)
        if _runs_fallback(input, weight, bias):
            return _backward_fallback(grad, input, mean, rstd, weight, bias)
        if input.numel() == 0:
            c = input.shape[1]
            empty = input.new_empty((0,))
            return (
                torch.empty_like(input, memory_format=_CL),
                input.new_zeros((c,), dtype=weight.dtype) if weight is not None else empty,
                input.new_zeros((c,), dtype=bias.dtype) if bias is not None else empty,
            )
        plan = _plan_for(input, weight, bias, 0.0)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t.numel() != plan.m or t.dtype != torch.float32 or t.device != plan.device:
            raise ValueError(
                f"{OP}_backward: {name} must hold the forward's {plan.m} float32 statistics on "
                f"{plan.device}, got {t.numel()} {t.dtype} on {t.device}"
            )
    x = plan.rows(input)
    dx, dweight, dbias = plan.backward(
        grad, x, mean.contiguous(), rstd.contiguous(), _aligned(weight)
    )
    empty = input.new_empty((0,))
    return dx, dweight if dweight is not None else empty, dbias if dbias is not None else empty


def _backward_fake(grad, input, mean, rstd, weight, bias):
    c = input.shape[1]
    dx = torch.empty_like(input, memory_format=torch.channels_last)
    dweight = weight.new_empty((c,)) if weight is not None else input.new_empty((0,))
    dbias = bias.new_empty((c,)) if bias is not None else input.new_empty((0,))
    return dx, dweight, dbias


for _name, _impl, _fake in (
    ("layernorm_2d", _forward_op, _forward_fake),
    ("layernorm_2d_backward", _backward_op, _backward_fake),
):
    _LIB.impl(_name, _impl, "CPU")
    _LIB.impl(_name, _impl, "CUDA")
    torch.library.register_fake(f"spio::{_name}", _fake, lib=_LIB)


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


torch.library.register_autograd(
    "spio::layernorm_2d", _backward, setup_context=_setup_context, lib=_LIB
)
