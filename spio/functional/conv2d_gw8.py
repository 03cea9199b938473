"""`spio.functional.conv2d_gw8` and the ops `torch.ops.spio.conv2d_gw8{,_dgrad,_wgrad,_backward}`.

Grouped 2-D convolution with group width 8 (groups = C / 8, weight (C, 8, R, S)), stride 1 or 2
on each axis, any padding, optional bias, fp16/bf16 with fp32 accumulation, on spio's kernels
(spio/src/conv2d_gw8_*.cu) on CUDA GPUs of compute capability 8.0+.

- Batch: any N >= 0. N = 0 gives an empty output (and zero weight/bias gradients), as F.conv2d
  does. The GPU kernels run the batch on gridDim.y, so on a GPU N > 65535 is a ValueError (split
  the batch; the CPU fallback takes any N).
- Memory format: the kernels read and write channels_last (NHWC). An input in another format is
  converted first (one extra read + write of the activation); the output is channels_last.
- Fallback (documented): CPU tensors and GPUs below sm_80 run PyTorch's own convolution
  (`F.conv2d` and `torch.nn.grad.conv2d_{input,weight}`); there float32 is accepted too.
  SPIO_DISABLE_FALLBACK=1 makes the fallback an error.
- Autograd: the input gradient runs the fprop kernel's dgrad variant on dy, which reads the weights
  transposed within each 8x8 group and rotated 180 degrees (no separate weight op); the weight and
  bias gradients run the deterministic wgrad kernel (per-CTA partials + an ordered reduction pass).
  Where a backward needs dx and dw (or db) of a 3x3 (or smaller) layer of stride 1 or 2 that
  fuses (`spio.kernels.conv2d_gw8.wgrad.may_fuse` and `fuses`: row chunks, or whole-image
  tasks that fill the GPU), one kernel writes all of them, reading dy once (the wgrad kernel's
  FUSE_DGRAD variant; the dispatcher path's `conv2d_gw8_backward` op). Its dx and dw are
  deterministic, but not the bits of `conv2d_gw8_dgrad` and `conv2d_gw8_wgrad` called one by
  one: the sums run in another order.
- Autocast: under CUDA autocast, `conv2d_gw8` computes in the autocast dtype like F.conv2d (an
  fp16-listed op): a float32 input is cast; on the eager path a float32 weight and bias are read
  by the kernels as they are (rounded to the autocast dtype as they load, what autocast's cast
  would give), so no cast runs per call, and their gradients come out as the float32 sums; a
  traced call (torch.compile) casts them first, as autocast does, so there the weight gradient
  is rounded through the autocast dtype. Other half-type weights are cast; float64 is refused.
- torch.compile: the ops have fake implementations, so they trace without graph breaks.
- CUDA graphs: launches go to PyTorch's current stream and every buffer (including the wgrad
  partials) comes from PyTorch's caching allocator. Run one eager call per shape before capture
  so the kernels are compiled and loaded outside the capture.

Call path: the first call with a signature (shapes, strides, dtypes, devices, padding, autocast
dtype) validates it, selects the configs and loads the kernels into a launch plan; later calls
look the plan up and launch. An eager call that nothing traces (`_dispatch.untraced`) runs the
plan directly, through a torch.autograd.Function when an input requires grad; under
torch.compile, a dispatch mode or a functorch transform, or with tensor subclasses, the call goes
through the ops, whose CUDA implementations run the same plans.
"""

from __future__ import annotations

from typing import Any

import torch

from spio.functional import _plans
from spio.functional._autograd import first_order
from spio.functional._dispatch import (
    PLAIN_TYPES,
    autocast_dtype,
    device_attributes,
    fallback_reason,
    raw_stream,
    untraced,
    use_fallback,
)
from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    MAX_BATCH,
    MAX_KERNEL,
    Conv2dGw8Params,
    normalize_padding,
    normalize_stride,
)

__all__ = ["conv2d_gw8"]

OP = "spio conv2d_gw8"
_KERNEL_DTYPES = (torch.float16, torch.bfloat16)
_FALLBACK_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_CL = torch.channels_last
_Tensor = torch.Tensor
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_empty = torch.empty
_empty_strided = torch.empty_strided

# Launch plans: the forward by call signature (shared by the eager path and the op), the input
# and weight gradients by the ops' argument signature and by layer.
_FORWARD = _plans.PlanCache("conv2d_gw8")
_DGRAD = _plans.PlanCache("conv2d_gw8_dgrad")
_WGRAD = _plans.PlanCache("conv2d_gw8_wgrad")


def conv2d_gw8(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    padding: int | tuple[int, int] | None = None,
    stride: int | tuple[int, int] = 1,
) -> torch.Tensor:
    """Grouped conv2d with 8 channels per group: y = conv2d(x, w, b, stride, padding, C / 8).

    Args:
        input: (N, C, H, W), C a multiple of 8; fp16 or bf16 (float32 only on the CPU fallback
            or under CUDA autocast). Any memory format; channels_last avoids a conversion.
        weight: (C, 8, R, S) with R, S in 1..7; input's dtype and device (under CUDA autocast
            any of fp16, bf16, float32).
        bias: optional (C,), weight's dtype and input's device.
        padding: int or (pad_h, pad_w) >= 0; None means (R // 2, S // 2).
        stride: int or (stride_h, stride_w), each 1 or 2.

    Returns:
        (N, C, P, Q) in channels_last memory, P = (H + 2 pad_h - R) // stride_h + 1, Q likewise,
        as F.conv2d.
    """
    if _compiling():
        return _through_op(input, weight, bias, padding, stride)
    if (
        type(input) is _Tensor
        and type(weight) in PLAIN_TYPES
        and (bias is None or type(bias) in PLAIN_TYPES)
        and input.is_cuda
        and untraced()
    ):
        amp = autocast_dtype()
        key = _key(input, weight, bias, padding, amp, stride)
        try:
            plan = _FORWARD.get(key)
        except TypeError:  # an unhashable padding or stride: the op path reports it
            return _through_op(input, weight, bias, padding, stride)
        if plan is None:
            plan = _FORWARD[key] = _forward_plan(input, weight, bias, padding, amp, stride)
        if plan is not _plans.DISPATCH:
            if _grad_enabled() and (
                input.requires_grad
                or weight.requires_grad
                or (bias is not None and bias.requires_grad)
            ):
                return _conv2dgw8_apply(input, weight, bias, plan)
            return plan.forward(input, weight, bias)
    return _through_op(input, weight, bias, padding, stride)


def _key(input, weight, bias, padding, amp, stride) -> tuple:
    """A forward call's signature: what its plan depends on."""
    b = bias
    return (
        input.shape, input.stride(), input.dtype, input.device,
        weight.shape, weight.stride(), weight.dtype, weight.device,
        None if b is None else (b.shape, b.stride(), b.dtype, b.device),
        type(padding), tuple(padding) if type(padding) is list else padding,
        amp,
        type(stride), tuple(stride) if type(stride) is list else stride,
    )  # fmt: skip


def _through_op(input, weight, bias, padding, stride=1) -> torch.Tensor:
    """The call through the dispatcher: `torch.ops.spio.conv2d_gw8` after the checks, with
    autocast's casts (under torch.compile, tensor subclasses, dispatch modes, the fallback)."""
    _check_types(input, weight, bias)
    if input.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        # autocast's rule: floating tensors other than float64 go to the autocast dtype (a
        # float64 one stays and is then refused, as on the eager path)
        dtype = torch.get_autocast_dtype("cuda")
        input, weight, bias = (
            t.to(dtype) if t is not None and t.dtype not in (dtype, torch.float64) else t
            for t in (input, weight, bias)
        )
    pads = _validate(input, weight, bias, padding, stride=stride)
    strides = list(normalize_stride(stride))
    return torch.ops.spio.conv2d_gw8(input, weight, bias, list(pads), strides)


def _check_types(input, weight, bias) -> None:
    for name, t in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor) and not (name == "bias" and t is None):
            raise TypeError(
                f"{OP}: {name} must be a torch.Tensor"
                + (" or None" if name == "bias" else "")
                + f", got {type(t).__name__}"
            )


def _validate(x, w, b, padding, amp: torch.dtype | None = None, stride=1) -> tuple[int, int]:
    """The padding as (pad_h, pad_w) after checking every argument; raises TypeError/ValueError
    naming the argument, the rule and the fix. `amp`: the CUDA autocast dtype the call computes
    in (then float32 and the other half type are accepted for input, weight and bias)."""
    if w.dim() == 4:
        pads = normalize_padding(padding, int(w.shape[2]), int(w.shape[3]))
    else:
        pads = (0, 0)
    allowed: tuple[torch.dtype, ...]
    if amp is not None:
        allowed = _FALLBACK_DTYPES
    else:
        allowed = _FALLBACK_DTYPES if x.device.type == "cpu" else _KERNEL_DTYPES
    if x.dtype not in allowed:
        raise TypeError(
            f"{OP}: input dtype must be one of {sorted(str(d) for d in allowed)} "
            f"on {x.device.type}, got {x.dtype}; convert with .half() / .bfloat16() or run under "
            "torch.autocast"
        )
    for name, t in (("weight", w), ("bias", b)):
        if t is None:
            continue
        if amp is not None and t.dtype not in _FALLBACK_DTYPES:
            raise TypeError(
                f"{OP}: under autocast {name} must be float16, bfloat16 or float32, got {t.dtype}"
            )
        if amp is None and t.dtype != x.dtype:
            raise TypeError(f"{OP}: {name} must have input's dtype {x.dtype}, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(
                f"{OP}: {name} is on {t.device} but input is on {x.device}; move both to one device"
            )
    if w.dim() == 4 and (w.shape[2] > MAX_KERNEL or w.shape[3] > MAX_KERNEL):
        raise ValueError(
            f"{OP}: kernel size {tuple(w.shape[2:])} exceeds {MAX_KERNEL}x{MAX_KERNEL}; "
            "use torch.nn.functional.conv2d"
        )
    # Shapes, group width, kernel and output size (float32 is checked as if it were fp16). The
    # batch is checked where the op runs: the fallback takes any N, the GPU kernels N <= 65535.
    Conv2dGw8Params.from_tensors(x, w, b, pads, dtype="float16", batch=1, stride=stride)
    return pads


def _gpu_batch(op: str, n: int) -> bool:
    """Whether the GPU path has work for a batch of n (False: n = 0, an empty result); raises
    ValueError above MAX_BATCH (the kernels' gridDim.y limit)."""
    if n > MAX_BATCH:
        raise ValueError(
            f"spio {op}: batch N = {n} exceeds {MAX_BATCH} on the GPU (the kernels run the batch "
            f"on gridDim.y, whose limit is {MAX_BATCH}); split the batch, e.g. torch.cat("
            f"[conv2d_gw8(x, weight, bias, padding) for x in input.split({MAX_BATCH})])"
        )
    return n > 0


# ---- launch plans ---------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cl_stride(
    size: tuple[int, int, int, int], memory_format: torch.memory_format = _CL
) -> tuple[int, ...]:
    """The strides torch gives a tensor of `size` in `memory_format` (channels_last unless told)."""
    return tuple(torch.empty(size, device="meta", memory_format=memory_format).stride())


def _weight_cl(w) -> bool | None:
    """The kernels' weight layout for w: False contiguous, True channels_last (as
    `module.to(memory_format=torch.channels_last)` leaves conv weights), None neither (a copy)."""
    if w.is_contiguous():
        return False
    return True if w.is_contiguous(memory_format=_CL) else None


def _forward_plan(x, w, b, padding, amp: torch.dtype | None, stride=1) -> Any:
    """The plan of a forward call signature, or DISPATCH when the op must decide (fallback,
    empty batch, a batch above the kernels' limit). Raises on invalid arguments."""
    pads = _validate(x, w, b, padding, amp, stride)
    if fallback_reason(x, w, b) is not None or not 0 < int(x.shape[0]) <= MAX_BATCH:
        return _plans.DISPATCH
    return _ForwardPlan(x, w, b, pads, amp, normalize_stride(stride))


class _ForwardPlan:
    """One forward call signature on one GPU: the casts and layout fixes its tensors need, the
    bound fprop launch and the output's size; the gradients' plans once a backward needs them."""

    __slots__ = (
        "launch", "size", "stride", "dtype", "device", "index", "wdtype", "cast_x", "x_cl",
        "cast_w", "w_layout_ok", "cast_b", "b_contig", "p", "dev", "_dgrad", "_wgrad",
    )  # fmt: skip

    def __init__(
        self, x, w, b, pads: tuple[int, int], amp: torch.dtype | None, stride: tuple[int, int]
    ) -> None:
        from spio.kernels.conv2d_gw8.fprop import FPROP, FpropLaunch

        self.dtype = amp if amp is not None else x.dtype
        self.wdtype = torch.float32 if amp is not None and w.dtype == torch.float32 else self.dtype
        self.cast_x = x.dtype != self.dtype
        self.x_cl = x.is_contiguous(memory_format=_CL)
        self.cast_w = w.dtype != self.wdtype  # a cast keeps the layout (preserve_format)
        weight_cl = _weight_cl(w)
        self.w_layout_ok = weight_cl is not None
        self.cast_b = b is not None and b.dtype != self.wdtype
        self.b_contig = b is None or b.is_contiguous()
        self.p = Conv2dGw8Params.from_tensors(
            x, w, b, pads, dtype=_dtype_name(self.dtype), wdtype=_dtype_name(self.wdtype),
            weight_cl=bool(weight_cl), stride=stride,
        )  # fmt: skip
        self.device = x.device
        self.index = x.device.index
        self.dev = device_attributes(self.index)
        cfg, kernel = _selected(FPROP, self.p, self.dev)
        self.launch = FpropLaunch(kernel, self.p, cfg)
        p = self.p
        self.size = (p.n, p.c, p.p, p.q)
        self.stride = _cl_stride(self.size)
        self._dgrad: _DgradPlan | None = None
        self._wgrad: dict[bool, _WgradPlan] = {}

    def prepare(self, x, w, b) -> tuple[Any, Any, Any]:
        """The tensors as the kernels read them: compute dtype, channels_last, 16-byte aligned x;
        weight and bias of the weight dtype, the weight contiguous or channels_last (as the plan
        saw it), the bias contiguous."""
        if self.cast_x:
            x = x.to(self.dtype, memory_format=_CL)
        elif not self.x_cl:
            x = x.contiguous(memory_format=_CL)
        elif x.data_ptr() & 15:
            x = x.clone(memory_format=_CL)
        if self.cast_w:
            w = w.to(self.wdtype)
        if not self.w_layout_ok:
            w = w.contiguous()
        if b is not None:
            if self.cast_b:
                b = b.to(self.wdtype)
            if not self.b_contig:
                b = b.contiguous()
        return x, w, b

    def run(self, x, w, b) -> torch.Tensor:
        """y for prepared tensors."""
        out = _empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        self.launch(out, x, w, b, raw_stream(self.index))
        return out

    def forward(self, x, w, b) -> torch.Tensor:
        return self.run(*self.prepare(x, w, b))

    def backward(self, dy, x, w, need_x: bool, need_w: bool, need_b: bool) -> tuple:
        """(dx, dw, db) for the prepared x and w the forward ran on (None where not needed)."""
        if not dy.is_contiguous(memory_format=_CL) or dy.data_ptr() & 15:
            dy = dy.clone(memory_format=_CL)
        if dy.dtype != self.dtype:
            dy = dy.to(self.dtype)
        stream = raw_stream(self.index)
        dx = dw = db = None
        with_bias = self.p.has_bias and need_b
        if need_w or with_bias:
            wplan = self._wgrad.get(with_bias)
            if wplan is None:
                wplan = self._wgrad[with_bias] = _wgrad_plan(self.p, with_bias, self.dev)
            if need_x:
                dx, dw, db = _both_gradients(self.dgrad_plan, wplan, x, dy, w, stream)
            else:
                dw, db = wplan.run(x, dy, stream)
            if not need_w:
                dw = None
        elif need_x:
            dx = self.dgrad_plan().run(dy, w, stream)
        return dx, dw, db

    def dgrad_plan(self) -> _DgradPlan:
        """The input gradient's plan, made at the first backward that needs it."""
        plan = self._dgrad
        if plan is None:
            plan = self._dgrad = _dgrad_plan(self.p, self.dev)
        return plan


def _both_gradients(dgrad_plan, wplan, x, dy, w, stream: int) -> tuple:
    """(dx, dw, db or None) of prepared operands: one kernel for all of them where the layer
    fuses them (`_WgradPlan.run_fused`: dy read once), else the dgrad plan (`dgrad_plan()`,
    made only then) and the wgrad plan one after the other. Which runs is fixed by the layer
    (its batch included) and the weight's dtype and layout, so the bits repeat from call to call;
    a backward that needs only dx (a frozen weight) runs dgrad alone, whose bits differ."""
    fused = wplan.run_fused(x, dy, w, stream)
    if fused is not None:
        return fused
    dx = dgrad_plan().run(dy, w, stream)
    dw, db = wplan.run(x, dy, stream)
    return dx, dw, db


def _selected(kdef, p: Conv2dGw8Params, dev) -> tuple[Any, Any]:
    """(the config the op runs for p, its loaded kernel), loaded on p's device."""
    from spio.kernels.loader import default_function_cache
    from spio.select import op_config

    with torch.cuda.device(dev.ordinal):  # an autotune measures on the plan's GPU
        cfg = op_config(kdef, p, dev)
        return cfg, default_function_cache().get(kdef, kdef.compiled(p), cfg, dev)


class _DgradPlan:
    """The input gradient of one layer (batch included) on one GPU."""

    __slots__ = ("launch", "size", "stride", "dtype", "device", "weight_cl")

    def __init__(self, p: Conv2dGw8Params, dev) -> None:
        from spio.kernels.conv2d_gw8.fprop import DGRAD, DgradLaunch

        self.weight_cl = p.weight_cl
        cfg, kernel = _selected(DGRAD, p, dev)
        self.launch = DgradLaunch(kernel, p, cfg)
        self.size = (p.n, p.c, p.h, p.w)
        self.stride = _cl_stride(self.size)
        self.dtype = getattr(torch, p.dtype)
        self.device = torch.device("cuda", dev.ordinal)

    def run(self, dy, w, stream: int) -> torch.Tensor:
        """dx for a channels_last, 16-byte aligned dy and w in the plan's layout (`weight_cl`)."""
        dx = _empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        self.launch(dx, dy, w, stream)
        return dx


class _WgradPlan:
    """The weight (and bias) gradient of one layer (batch included) on one GPU: both passes."""

    __slots__ = ("launch", "w_size", "w_stride", "c", "wdtype", "device", "with_bias", "workspace",
                 "p", "dev", "_fused")  # fmt: skip

    def __init__(self, p: Conv2dGw8Params, dev) -> None:
        from spio.kernels.conv2d_gw8 import wgrad as wg

        cfg, kernel = _selected(wg.WGRAD, p, dev)
        self.launch = wg.WgradLaunch(kernel, _reduce_kernel(p, cfg, dev), p, cfg, dev)
        self.p, self.dev = p, dev
        self._fused: Any = False  # the fused launch, made at the first run_fused
        self.w_size = (p.c, GROUP_WIDTH, p.r, p.s)
        # dw in the weight's layout, so autograd accumulates it without a copy
        self.w_stride = _cl_stride(self.w_size, _CL if p.weight_cl else torch.contiguous_format)
        self.c = p.c
        self.wdtype = getattr(torch, p.weight_dtype)
        self.device = torch.device("cuda", dev.ordinal)
        self.with_bias = p.has_bias
        self.workspace = self.launch.workspace_floats

    def run(self, x, dy, stream: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(dw, db or None) for channels_last, 16-byte aligned x and dy."""
        dw = _empty_strided(self.w_size, self.w_stride, dtype=self.wdtype, device=self.device)
        db = _empty(self.c, dtype=self.wdtype, device=self.device) if self.with_bias else None
        workspace = _empty(self.workspace, dtype=torch.float32, device=self.device)
        self.launch(dw, db, workspace, x, dy, stream)
        return dw, db

    def run_fused(self, x, dy, w, stream: int) -> tuple | None:
        """(dx, dw, db or None) from the kernel that writes all of them (`wgrad.may_fuse`,
        `wgrad.fuses`: at most 3x3, row chunks or whole images that fill the GPU), for
        channels_last, 16-byte aligned x and dy and the weight `w`; None where the layer does
        not fuse, or w is not of the plan's weight dtype and layout (the kernel reads it as
        compiled)."""
        fused = self._fused
        if fused is False:
            fused = self._fused = self._fused_launch()
        if fused is None or w.dtype != self.wdtype:
            return None
        layout = _weight_cl(w)  # None: neither layout; at 1x1 both are one memory order
        if layout is None or (self.p.r * self.p.s > 1 and layout != self.p.weight_cl):
            return None
        launch, dx_size, dx_stride, dx_dtype = fused
        dx = _empty_strided(dx_size, dx_stride, dtype=dx_dtype, device=self.device)
        dw = _empty_strided(self.w_size, self.w_stride, dtype=self.wdtype, device=self.device)
        db = _empty(self.c, dtype=self.wdtype, device=self.device) if self.with_bias else None
        workspace = _empty(launch.workspace_floats, dtype=torch.float32, device=self.device)
        launch(dw, db, workspace, x, dy, stream, dx, w)
        return dx, dw, db

    def _fused_launch(self) -> tuple | None:
        """(the fused launch, dx's size, strides and dtype), or None where the layer does not
        fuse."""
        from spio.kernels.conv2d_gw8 import wgrad as wg
        from spio.kernels.loader import default_function_cache
        from spio.select import op_config

        p, dev = self.p, self.dev
        if not wg.may_fuse(p, dev):
            return None
        with torch.cuda.device(dev.ordinal):  # an autotune measures on the plan's GPU
            cfg = op_config(wg.WGRAD_DGRAD, p, dev)
            if not wg.fuses(p, cfg, dev):
                return None
            kernel = default_function_cache().get(
                wg.WGRAD_DGRAD, wg.WGRAD_DGRAD.compiled(p), cfg, dev
            )
        launch = wg.WgradLaunch(kernel, _reduce_kernel(p, cfg, dev), p, cfg, dev)
        size = (p.n, p.c, p.h, p.w)
        return launch, size, _cl_stride(size), getattr(torch, p.dtype)


def _reduce_kernel(p: Conv2dGw8Params, cfg, dev) -> Any:
    """The loaded reduction of the wgrad config `cfg` (fused or not) of layer p."""
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
    from spio.kernels.loader import default_function_cache

    with torch.cuda.device(dev.ordinal):
        return default_function_cache().get(
            rd.WGRAD_REDUCE, rd.WGRAD_REDUCE.compiled(p), rd.reduce_config(p, cfg, dev), dev
        )


def _dgrad_plan(p: Conv2dGw8Params, dev) -> _DgradPlan:
    """The dgrad plan of layer p (any has_bias) on dev, shared by every caller."""
    from dataclasses import replace

    key = (replace(p, has_bias=False), dev.ordinal)
    plan = _DGRAD.get(key)
    if plan is None:
        plan = _DGRAD[key] = _DgradPlan(key[0], dev)
    return plan


def _wgrad_plan(p: Conv2dGw8Params, with_bias: bool, dev) -> _WgradPlan:
    """The wgrad plan of layer p with or without the bias gradient on dev."""
    from dataclasses import replace

    key = (replace(p, has_bias=with_bias), dev.ordinal)
    plan = _WGRAD.get(key)
    if plan is None:
        plan = _WGRAD[key] = _WgradPlan(key[0], dev)
    return plan


class _Conv2dGw8(torch.autograd.Function):
    """The eager path's autograd: the forward plan's launch, and its gradient plans."""

    @staticmethod
    def forward(ctx, input, weight, bias, plan):
        x, w, b = plan.prepare(input, weight, bias)
        ctx.save_for_backward(x, w)
        ctx.plan = plan
        return plan.run(x, w, b)

    @staticmethod
    @first_order
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        dx, dw, db = ctx.plan.backward(grad_output, x, w, need[0], need[1], need[2])
        return dx, dw, db, None


# torch.autograd.Function.apply without its Python wrapper, which binds default arguments and
# unwraps dead functorch wrappers (2-3 µs): the eager path calls it only when no functorch
# transform is active (`untraced()`), with no defaults to bind.
_conv2dgw8_apply = super(torch.autograd.Function, _Conv2dGw8).apply


# ---- the ops --------------------------------------------------------------------------------

# define + impl + register_fake + register_autograd: the dispatcher's cheapest registration that
# keeps opcheck, torch.compile and autocast (docs/ops/overhead.md has the measurements).
_LIB = torch.library.Library("spio", "FRAGMENT")
_LIB.define(
    "conv2d_gw8(Tensor input, Tensor weight, Tensor? bias, int[] padding, int[] stride=[1, 1]) "
    "-> Tensor"
)
_LIB.define(
    "conv2d_gw8_dgrad(Tensor grad_output, Tensor weight, int[] input_hw, int[] padding, "
    "int[] stride=[1, 1]) -> Tensor"
)
_LIB.define(
    "conv2d_gw8_wgrad(Tensor input, Tensor grad_output, int[] kernel_rs, int[] padding, "
    "bool with_bias, bool weight_cl=False, int[] stride=[1, 1]) -> (Tensor, Tensor)"
)
_LIB.define(
    "conv2d_gw8_backward(Tensor grad_output, Tensor input, Tensor weight, int[] padding, "
    "bool with_bias, bool weight_cl=False, int[] stride=[1, 1]) -> (Tensor, Tensor, Tensor)"
)


def _conv2d_gw8_op(input, weight, bias, padding, stride=(1, 1)):
    key = _key(input, weight, bias, padding, None, stride)  # lists, as the dispatcher passes
    plan = _FORWARD.get(key)
    if plan is not None and plan is not _plans.DISPATCH:  # a signature seen before: launch
        return plan.forward(input, weight, bias)
    pads = (int(padding[0]), int(padding[1]))
    strides = normalize_stride([int(v) for v in stride])
    if use_fallback("conv2d_gw8", input, weight, bias):
        return ref.fprop(input, weight, bias, pads, strides).contiguous(memory_format=_CL)
    if not _gpu_batch("conv2d_gw8", int(input.shape[0])):
        p = Conv2dGw8Params.from_tensors(input, weight, bias, pads, batch=1, stride=strides)
        return torch.empty(
            (0, p.c, p.p, p.q), dtype=input.dtype, device=input.device, memory_format=_CL
        )
    plan = _FORWARD[key] = _forward_plan(input, weight, bias, pads, None, strides)
    return plan.forward(input, weight, bias)


def _conv2d_gw8_fake(input, weight, bias, padding, stride=(1, 1)):
    n, c, h, w = input.shape
    p = (h + 2 * padding[0] - weight.shape[2]) // stride[0] + 1
    q = (w + 2 * padding[1] - weight.shape[3]) // stride[1] + 1
    return torch.empty((n, c, p, q), dtype=input.dtype, device=input.device, memory_format=_CL)


def _layer(
    t, rs, hw, pads, has_bias: bool, wdtype: torch.dtype | None = None, weight_cl: bool = False,
    stride: tuple[int, int] = (1, 1),
) -> Conv2dGw8Params:  # fmt: skip
    """The layer of a gradient op's arguments: batch and channels from t (dy or x)."""
    n, c = (int(v) for v in t.shape[:2])
    name = _dtype_name(t.dtype)
    return Conv2dGw8Params(
        n=n, c=c, h=hw[0], w=hw[1], r=int(rs[0]), s=int(rs[1]), pad_h=pads[0], pad_w=pads[1],
        has_bias=has_bias, dtype=name,
        wdtype="float32" if wdtype == torch.float32 else name, weight_cl=weight_cl,
        stride_h=stride[0], stride_w=stride[1],
    )  # fmt: skip


def _check_gradient_op(op: str, first, name: str, other) -> None:
    """The first tensor of a gradient op is 4-D fp16/bf16 and `other` is on its device."""
    if first.dim() != 4 or first.dtype not in _KERNEL_DTYPES:
        raise TypeError(
            f"spio {op}: expected a 4-D float16 or bfloat16 tensor, got shape "
            f"{tuple(first.shape)} {first.dtype}"
        )
    if other.device != first.device:
        raise ValueError(
            f"spio {op}: {name} is on {other.device} but the activations are on {first.device}; "
            "move both to one device"
        )


def _expect(op: str, what: str, t, shape: tuple[int, ...], dtype) -> None:
    """Raises ValueError unless t has `shape` and `dtype` (a gradient op's consistency rule)."""
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError(
            f"spio {op}: {what} must have shape {shape} and dtype {dtype} for this layer, got "
            f"{tuple(t.shape)} and {t.dtype}"
        )


def _dgrad_op(grad_output, weight, input_hw, padding, stride=(1, 1)):
    plan = _dgrad_op_plan(grad_output, weight, input_hw, padding, stride)
    if type(plan) is not _DgradPlan:
        return plan  # the fallback's or an empty batch's dx
    dy, w = _dgrad_operands(plan, grad_output, weight)
    return plan.run(dy, w, raw_stream(grad_output.device.index))


def _dgrad_op_plan(grad_output, weight, input_hw, padding, stride) -> Any:
    """The dgrad op's plan for its arguments, or its result where no kernel runs (the
    fallback, an empty batch). Raises on invalid arguments."""
    key = (grad_output.shape, grad_output.dtype, grad_output.device, weight.shape,
           weight.stride(), weight.dtype, tuple(input_hw), tuple(padding),
           tuple(stride))  # fmt: skip
    plan = _DGRAD.get(key)
    if plan is None:
        pads = (int(padding[0]), int(padding[1]))
        strides = normalize_stride([int(v) for v in stride])
        hw = (int(input_hw[0]), int(input_hw[1]))
        if use_fallback("conv2d_gw8_dgrad", grad_output, weight):
            dx = ref.dgrad(grad_output, weight, hw, pads, strides)
            return dx.contiguous(memory_format=_CL)
        _check_gradient_op("conv2d_gw8_dgrad", grad_output, "weight", weight)
        n, c = (int(v) for v in grad_output.shape[:2])
        if not _gpu_batch("conv2d_gw8_dgrad", n):
            return torch.empty(
                (0, c, hw[0], hw[1]), dtype=grad_output.dtype, device=grad_output.device,
                memory_format=_CL,
            )  # fmt: skip
        if weight.dtype not in (grad_output.dtype, torch.float32):
            raise TypeError(
                f"spio conv2d_gw8_dgrad: weight must be {grad_output.dtype} (grad_output's "
                f"dtype) or float32, got {weight.dtype}"
            )
        weight_cl = _weight_cl(weight) if weight.dim() == 4 else None
        p = _layer(
            grad_output, weight.shape[2:], hw, pads, False, weight.dtype, bool(weight_cl), strides
        )
        _expect("conv2d_gw8_dgrad", "grad_output", grad_output, (n, c, p.p, p.q), grad_output.dtype)
        _expect("conv2d_gw8_dgrad", "weight", weight, (c, GROUP_WIDTH, p.r, p.s), weight.dtype)
        index = grad_output.device.index
        plan = _DGRAD[key] = _dgrad_plan(p, device_attributes(index))
    return plan


def _dgrad_operands(plan: _DgradPlan, grad_output, weight) -> tuple[Any, Any]:
    """dy channels_last and 16-byte aligned, the weight in the plan's layout."""
    w = weight if plan.weight_cl == _weight_cl(weight) else weight.contiguous()
    return _aligned_cl(grad_output), w


def _aligned_cl(t):
    """t, or a channels_last copy where it is not channels_last or not 16-byte aligned."""
    if not t.is_contiguous(memory_format=_CL) or t.data_ptr() & 15:
        t = t.clone(memory_format=_CL)
    return t


def _dgrad_fake(grad_output, weight, input_hw, padding, stride=(1, 1)):
    n, c = grad_output.shape[:2]
    return torch.empty(
        (n, c, input_hw[0], input_hw[1]),
        dtype=grad_output.dtype,
        device=grad_output.device,
        memory_format=_CL,
    )


def _wgrad_op(input, grad_output, kernel_rs, padding, with_bias, weight_cl=False, stride=(1, 1)):
    """(grad_weight (C, 8, R, S), contiguous or channels_last (`weight_cl`: the weight's layout),
    grad_bias (C,) or an empty (0,) tensor when not with_bias)."""
    plan = _wgrad_op_plan(input, grad_output, kernel_rs, padding, with_bias, weight_cl, stride)
    if type(plan) is not _WgradPlan:
        return plan  # the fallback's or an empty batch's (grad_weight, grad_bias)
    dw, db = plan.run(_aligned_cl(input), _aligned_cl(grad_output), raw_stream(input.device.index))
    return dw, db if db is not None else input.new_empty((0,))


def _wgrad_op_plan(input, grad_output, kernel_rs, padding, with_bias, weight_cl, stride) -> Any:
    """The wgrad op's plan for its arguments, or its result where no kernel runs (the
    fallback, an empty batch). Raises on invalid arguments."""
    key = (input.shape, input.dtype, input.device, grad_output.shape, grad_output.dtype,
           tuple(kernel_rs), tuple(padding), bool(with_bias), bool(weight_cl),
           tuple(stride))  # fmt: skip
    plan = _WGRAD.get(key)
    if plan is None:
        pads = (int(padding[0]), int(padding[1]))
        strides = normalize_stride([int(v) for v in stride])
        rs = (int(kernel_rs[0]), int(kernel_rs[1]))
        if use_fallback("conv2d_gw8_wgrad", input, grad_output):
            gw = ref.wgrad(input, grad_output, rs, pads, strides)
            gw = gw.contiguous(memory_format=_CL if weight_cl else torch.contiguous_format)
            gb = ref.bias_grad(grad_output) if with_bias else grad_output.new_empty((0,))
            return gw, gb
        _check_gradient_op("conv2d_gw8_wgrad", input, "grad_output", grad_output)
        if not _gpu_batch("conv2d_gw8_wgrad", int(input.shape[0])):
            c = int(input.shape[1])  # the gradients of an empty batch are zero
            gw = input.new_zeros((c, GROUP_WIDTH, rs[0], rs[1]))
            gw = gw.contiguous(memory_format=_CL if weight_cl else torch.contiguous_format)
            return gw, input.new_zeros((c,) if with_bias else (0,))
        hw = (int(input.shape[2]), int(input.shape[3]))
        p = _layer(input, rs, hw, pads, bool(with_bias), weight_cl=bool(weight_cl), stride=strides)
        _expect("conv2d_gw8_wgrad", "grad_output", grad_output, (p.n, p.c, p.p, p.q), input.dtype)
        plan = _WGRAD[key] = _wgrad_plan(p, bool(with_bias), device_attributes(input.device.index))
    return plan


def _wgrad_fake(input, grad_output, kernel_rs, padding, with_bias, weight_cl=False, stride=(1, 1)):
    c = input.shape[1]
    gw = input.new_empty((c, GROUP_WIDTH, kernel_rs[0], kernel_rs[1]))
    gw = gw.contiguous(memory_format=_CL if weight_cl else torch.contiguous_format)
    gb = input.new_empty((c,) if with_bias else (0,))
    return gw, gb


def _backward_op(grad_output, input, weight, padding, with_bias, weight_cl=False, stride=(1, 1)):
    """(grad_input, grad_weight, grad_bias or an empty (0,) tensor): what conv2d_gw8_dgrad and
    conv2d_gw8_wgrad return, in one call, by one kernel where the layer fuses them
    (`_both_gradients`)."""
    hw, rs = [input.shape[2], input.shape[3]], [weight.shape[2], weight.shape[3]]
    dplan = _dgrad_op_plan(grad_output, weight, hw, padding, stride)
    wplan = _wgrad_op_plan(input, grad_output, rs, padding, with_bias, weight_cl, stride)
    if type(dplan) is _DgradPlan and type(wplan) is _WgradPlan:
        dy, w = _dgrad_operands(dplan, grad_output, weight)
        stream = raw_stream(input.device.index)
        dx, dw, db = _both_gradients(lambda: dplan, wplan, _aligned_cl(input), dy, w, stream)
        return dx, dw, db if db is not None else input.new_empty((0,))
    # where no kernel runs (the fallback, an empty batch) a "plan" is already its op's result;
    # the other gradient runs as its op would alone
    dx = (
        dplan
        if type(dplan) is not _DgradPlan
        else _dgrad_op(grad_output, weight, hw, padding, stride)
    )
    grads = (
        wplan
        if type(wplan) is not _WgradPlan
        else _wgrad_op(input, grad_output, rs, padding, with_bias, weight_cl, stride)
    )
    return dx, *grads


def _backward_fake(grad_output, input, weight, padding, with_bias, weight_cl=False, stride=(1, 1)):
    hw, rs = [input.shape[2], input.shape[3]], [weight.shape[2], weight.shape[3]]
    gw, gb = _wgrad_fake(input, grad_output, rs, padding, with_bias, weight_cl, stride)
    return _dgrad_fake(grad_output, weight, hw, padding, stride), gw, gb


for _name, _impl, _fake in (
    ("conv2d_gw8", _conv2d_gw8_op, _conv2d_gw8_fake),
    ("conv2d_gw8_dgrad", _dgrad_op, _dgrad_fake),
    ("conv2d_gw8_wgrad", _wgrad_op, _wgrad_fake),
    ("conv2d_gw8_backward", _backward_op, _backward_fake),
):
    _LIB.impl(_name, _impl, "CPU")
    _LIB.impl(_name, _impl, "CUDA")
    torch.library.register_fake(f"spio::{_name}", _fake, lib=_LIB)


def _setup_context(ctx, inputs, output):
    input, weight, bias, padding, *rest = inputs
    ctx.save_for_backward(input, weight)
    ctx.padding = list(padding)
    ctx.stride = list(rest[0]) if rest else [1, 1]
    ctx.with_bias = bias is not None
    ctx.weight_cl = _weight_cl(weight) is True  # dw in the weight's layout


def _backward(ctx, grad_output):
    input, weight = ctx.saved_tensors
    grad_output = grad_output.contiguous(memory_format=_CL)
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    with_bias = bool(ctx.with_bias and need_b)
    hw, rs = [input.shape[2], input.shape[3]], [weight.shape[2], weight.shape[3]]
    grad_input = grad_weight = grad_bias = None
    if need_x and (need_w or with_bias):  # both: one kernel where the layer fuses them
        grad_input, gw, gb = torch.ops.spio.conv2d_gw8_backward(
            grad_output, input, weight, ctx.padding, with_bias, ctx.weight_cl, ctx.stride
        )
    elif need_x:
        grad_input = torch.ops.spio.conv2d_gw8_dgrad(
            grad_output, weight, hw, ctx.padding, ctx.stride
        )
    elif need_w or with_bias:
        gw, gb = torch.ops.spio.conv2d_gw8_wgrad(
            input, grad_output, rs, ctx.padding, with_bias, ctx.weight_cl, ctx.stride
        )
    if need_w or with_bias:
        grad_weight = gw if need_w else None
        grad_bias = gb if with_bias else None
    return grad_input, grad_weight, grad_bias, None, None


torch.library.register_autograd(
    "spio::conv2d_gw8", _backward, setup_context=_setup_context, lib=_LIB
)
