"""`spio.functional.conv2d_gw8` and the ops `torch.ops.spio.conv2d_gw8{,_dgrad,_wgrad}`.

Grouped 2-D convolution with group width 8 (groups = C / 8, weight (C, 8, R, S)), stride 1, any
padding, optional bias, fp16/bf16 with fp32 accumulation, on spio's kernels (spio/src/
conv2d_gw8_*.cu) on CUDA GPUs of compute capability 8.0+.

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
- Autocast: `conv2d_gw8` casts float32 input, weight and bias to the autocast dtype when CUDA
  autocast is enabled (like F.conv2d, an fp16-listed op); the ops themselves see fp16/bf16 only.
- torch.compile: the ops have fake implementations, so they trace without graph breaks.
- CUDA graphs: launches go to PyTorch's current stream and every buffer (including the wgrad
  partials) comes from PyTorch's caching allocator. Run one eager call per shape before capture
  so the kernels are compiled and loaded outside the capture.
"""

from __future__ import annotations

import functools

import torch

from spio.functional._dispatch import stream_of, use_fallback
from spio.kernels import conv2d_gw8_reference as ref
from spio.kernels.conv2d_gw8_params import (
    GROUP_WIDTH,
    MAX_BATCH,
    MAX_KERNEL,
    Conv2dGw8Params,
    normalize_padding,
)

__all__ = ["conv2d_gw8"]

_KERNEL_DTYPES = (torch.float16, torch.bfloat16)
_FALLBACK_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_CL = torch.channels_last


def conv2d_gw8(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    padding: int | tuple[int, int] | None = None,
) -> torch.Tensor:
    """Grouped conv2d with 8 channels per group: y = conv2d(x, w, b, stride 1, padding, C / 8).

    Args:
        input: (N, C, H, W), C a multiple of 8; fp16 or bf16 (float32 only on the CPU fallback
            or under CUDA autocast). Any memory format; channels_last avoids a conversion.
        weight: (C, 8, R, S) with R, S in 1..7; input's dtype and device.
        bias: optional (C,), input's dtype and device.
        padding: int or (pad_h, pad_w) >= 0; None means (R // 2, S // 2).

    Returns:
        (N, C, P, Q) in channels_last memory, P = H + 2 pad_h - R + 1, Q = W + 2 pad_w - S + 1.
    """
    for name, t in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor) and not (name == "bias" and t is None):
            raise TypeError(
                f"spio conv2d_gw8: {name} must be a torch.Tensor"
                + (" or None" if name == "bias" else "")
                + f", got {type(t).__name__}"
            )
    if input.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
        input, weight = input.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    pads = _validate(input, weight, bias, padding)
    return torch.ops.spio.conv2d_gw8(input, weight, bias, list(pads))


def _validate(x, w, b, padding) -> tuple[int, int]:
    if w.dim() == 4:
        pads = normalize_padding(padding, int(w.shape[2]), int(w.shape[3]))
    else:
        pads = (0, 0)
    allowed = _FALLBACK_DTYPES if x.device.type == "cpu" else _KERNEL_DTYPES
    if x.dtype not in allowed:
        raise TypeError(
            f"spio conv2d_gw8: input dtype must be one of {sorted(str(d) for d in allowed)} "
            f"on {x.device.type}, got {x.dtype}; convert with .half() / .bfloat16() or run under "
            "torch.autocast"
        )
    for name, t in (("weight", w), ("bias", b)):
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise TypeError(
                f"spio conv2d_gw8: {name} must have input's dtype {x.dtype}, got {t.dtype}"
            )
        if t.device != x.device:
            raise ValueError(
                f"spio conv2d_gw8: {name} is on {t.device} but input is on {x.device}; move both "
                "to one device"
            )
    if w.dim() == 4 and (w.shape[2] > MAX_KERNEL or w.shape[3] > MAX_KERNEL):
        raise ValueError(
            f"spio conv2d_gw8: kernel size {tuple(w.shape[2:])} exceeds {MAX_KERNEL}x{MAX_KERNEL}; "
            "use torch.nn.functional.conv2d"
        )
    # Shapes, group width, kernel and output size (float32 is checked as if it were fp16). The
    # batch is checked where the op runs: the fallback takes any N, the GPU kernels N <= 65535.
    shape_dtype = "float16" if x.dtype == torch.float32 else None
    Conv2dGw8Params.from_tensors(x, w, b, pads, dtype=shape_dtype, batch=1)
    return pads


# ---- the ops ---------------------------------------------------------------------------------


@torch.library.custom_op("spio::conv2d_gw8", mutates_args=())
def _conv2d_gw8(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: list[int]
) -> torch.Tensor:
    pads = (int(padding[0]), int(padding[1]))
    if use_fallback("conv2d_gw8", input, weight, bias):
        return ref.fprop(input, weight, bias, pads).contiguous(memory_format=_CL)
    return _run_fprop(input, weight, bias, pads)


@_conv2d_gw8.register_fake
def _(input, weight, bias, padding):
    n, c, h, w = input.shape
    p = h + 2 * padding[0] - weight.shape[2] + 1
    q = w + 2 * padding[1] - weight.shape[3] + 1
    return torch.empty((n, c, p, q), dtype=input.dtype, device=input.device, memory_format=_CL)


@torch.library.custom_op("spio::conv2d_gw8_dgrad", mutates_args=())
def _conv2d_gw8_dgrad(
    grad_output: torch.Tensor, weight: torch.Tensor, input_hw: list[int], padding: list[int]
) -> torch.Tensor:
    pads = (int(padding[0]), int(padding[1]))
    hw = (int(input_hw[0]), int(input_hw[1]))
    if use_fallback("conv2d_gw8_dgrad", grad_output, weight):
        return ref.dgrad(grad_output, weight, hw, pads).contiguous(memory_format=_CL)
    return _run_dgrad(grad_output, weight, hw, pads)


@_conv2d_gw8_dgrad.register_fake
def _(grad_output, weight, input_hw, padding):
    n, c = grad_output.shape[:2]
    return torch.empty(
        (n, c, input_hw[0], input_hw[1]),
        dtype=grad_output.dtype,
        device=grad_output.device,
        memory_format=_CL,
    )


@torch.library.custom_op("spio::conv2d_gw8_wgrad", mutates_args=())
def _conv2d_gw8_wgrad(
    input: torch.Tensor,
    grad_output: torch.Tensor,
    kernel_rs: list[int],
    padding: list[int],
    with_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_weight (C, 8, R, S), grad_bias (C,) or an empty (0,) tensor when not with_bias)."""
    pads = (int(padding[0]), int(padding[1]))
    rs = (int(kernel_rs[0]), int(kernel_rs[1]))
    if use_fallback("conv2d_gw8_wgrad", input, grad_output):
        gw = ref.wgrad(input, grad_output, rs, pads).contiguous()
        gb = ref.bias_grad(grad_output) if with_bias else grad_output.new_empty((0,))
        return gw, gb
    return _run_wgrad(input, grad_output, rs, pads, with_bias)


@_conv2d_gw8_wgrad.register_fake
def _(input, grad_output, kernel_rs, padding, with_bias):
    c = input.shape[1]
    gw = input.new_empty((c, GROUP_WIDTH, kernel_rs[0], kernel_rs[1]))
    gb = input.new_empty((c,) if with_bias else (0,))
    return gw, gb


def _setup_context(ctx, inputs, output):
    input, weight, bias, padding = inputs
    ctx.save_for_backward(input, weight)
    ctx.padding = list(padding)
    ctx.with_bias = bias is not None


def _backward(ctx, grad_output):
    input, weight = ctx.saved_tensors
    grad_output = grad_output.contiguous(memory_format=_CL)
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    grad_input = grad_weight = grad_bias = None
    if need_x:
        grad_input = torch.ops.spio.conv2d_gw8_dgrad(
            grad_output, weight, [input.shape[2], input.shape[3]], ctx.padding
        )
    if need_w or (ctx.with_bias and need_b):
        gw, gb = torch.ops.spio.conv2d_gw8_wgrad(
            input,
            grad_output,
            [weight.shape[2], weight.shape[3]],
            ctx.padding,
            bool(ctx.with_bias and need_b),
        )
        grad_weight = gw if need_w else None
        grad_bias = gb if ctx.with_bias and need_b else None
    return grad_input, grad_weight, grad_bias, None


_conv2d_gw8.register_autograd(_backward, setup_context=_setup_context)


# ---- kernel paths (no tiling logic: selection and caching live in spio.kernels) ----------------


@functools.cache
def _device(index: int):
    from spio.cuda import device_attributes

    return device_attributes(index)


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    """channels_last and 16-byte aligned (the kernels move 16-byte pixel groups)."""
    t = t.contiguous(memory_format=_CL)
    return t if t.data_ptr() % 16 == 0 else t.clone(memory_format=_CL)


def config_for(kdef, p: Conv2dGw8Params, dev):
    """The config the op runs for layer p on dev (`spio.kernels.select.op_config`). fprop and
    dgrad reuse the config chosen for the layer's first batch size (the batch is a launch
    argument: a new batch size compiles nothing). wgrad selects for the exact shape: its config
    fixes how many partial sums there are and the order they are added in, so sharing would make
    the bits of dweight depend on which batch size this process happened to see first; per shape
    they depend on the inputs only (and the GPU and its performance model; with
    SPIO_AUTOTUNE=1, on the measured winner)."""
    from spio.select import op_config

    return op_config(kdef, p, dev)


def _kernel(kdef, p: Conv2dGw8Params, index: int):
    from spio.kernels.loader import default_function_cache

    dev = _device(index)
    cfg = config_for(kdef, p, dev)
    return dev, cfg, default_function_cache().get(kdef, p.variant(), cfg, dev)


def _index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


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


def _run_fprop(x, w, b, pads) -> torch.Tensor:
    from spio.kernels.conv2d_gw8_fprop import FPROP, launch

    if not _gpu_batch("conv2d_gw8", int(x.shape[0])):
        p = Conv2dGw8Params.from_tensors(x, w, b, pads, batch=1)  # shape checks, output size
        return torch.empty((0, p.c, p.p, p.q), dtype=x.dtype, device=x.device, memory_format=_CL)
    x = _nhwc(x)
    w = w.contiguous()
    b = b.contiguous() if b is not None else None
    p = Conv2dGw8Params.from_tensors(x, w, b, pads)
    out = torch.empty((p.n, p.c, p.p, p.q), dtype=x.dtype, device=x.device, memory_format=_CL)
    with torch.cuda.device(x.device):
        _, cfg, kernel = _kernel(FPROP, p, _index(x))
        launch(kernel, p, cfg, out, x, w, b, stream_of(x))
    return out


def _run_dgrad(dy, w, hw, pads) -> torch.Tensor:
    from spio.kernels.conv2d_gw8_fprop import DGRAD, dgrad_launch

    n, c = (int(v) for v in dy.shape[:2])
    if not _gpu_batch("conv2d_gw8_dgrad", n):
        return torch.empty(
            (0, c, hw[0], hw[1]), dtype=dy.dtype, device=dy.device, memory_format=_CL
        )
    dy = _nhwc(dy)
    p = Conv2dGw8Params(
        n=n,
        c=c,
        h=hw[0],
        w=hw[1],
        r=int(w.shape[2]),
        s=int(w.shape[3]),
        pad_h=pads[0],
        pad_w=pads[1],
        has_bias=False,
        dtype=str(dy.dtype).removeprefix("torch."),
    )
    w = w.contiguous()
    dx = torch.empty((n, c, hw[0], hw[1]), dtype=dy.dtype, device=dy.device, memory_format=_CL)
    with torch.cuda.device(dy.device):
        _, cfg, kernel = _kernel(DGRAD, p, _index(dy))
        dgrad_launch(kernel, p, cfg, dx, dy, w, stream_of(dy))
    return dx


def _run_wgrad(x, dy, rs, pads, with_bias) -> tuple[torch.Tensor, torch.Tensor]:
    from spio.kernels import conv2d_gw8_wgrad as wg
    from spio.kernels import conv2d_gw8_wgrad_reduce as rd
    from spio.kernels.loader import default_function_cache

    if not _gpu_batch("conv2d_gw8_wgrad", int(x.shape[0])):
        c = int(x.shape[1])  # the gradients of an empty batch are zero
        gw = x.new_zeros((c, GROUP_WIDTH, rs[0], rs[1]))
        return gw, x.new_zeros((c,) if with_bias else (0,))
    x, dy = _nhwc(x), _nhwc(dy)
    n, c, h, w = x.shape
    p = Conv2dGw8Params(
        n=n,
        c=c,
        h=h,
        w=w,
        r=rs[0],
        s=rs[1],
        pad_h=pads[0],
        pad_w=pads[1],
        has_bias=with_bias,
        dtype=str(x.dtype).removeprefix("torch."),
    )
    gw = torch.empty((c, GROUP_WIDTH, rs[0], rs[1]), dtype=x.dtype, device=x.device)
    gb = torch.empty((c,) if with_bias else (0,), dtype=x.dtype, device=x.device)
    with torch.cuda.device(x.device):
        dev, cfg, kernel = _kernel(wg.WGRAD, p, _index(x))
        slices = wg.num_slices(p, cfg, dev)
        partial = torch.empty(slices * gw.numel(), dtype=torch.float32, device=x.device)
        bias_partial = torch.empty(
            slices * c if with_bias else 1, dtype=torch.float32, device=x.device
        )
        stream = stream_of(x)
        wg.launch(kernel, p, cfg, dev, partial, bias_partial, x, dy, stream)
        rcfg = rd.config_for(slices)  # a function of the slices, not selected (see the module)
        reduce_kernel = default_function_cache().get(rd.WGRAD_REDUCE, p.variant(), rcfg, dev)
        rd.reduce_launch(
            reduce_kernel,
            p,
            rcfg,
            gw,
            gb if with_bias else None,
            partial,
            bias_partial,
            slices,
            stream,
        )
    return gw, gb
