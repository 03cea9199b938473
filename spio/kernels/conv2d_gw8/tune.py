"""conv2d_gw8 hooks for performance-model data collection: sampled params and runners.

`sample_params(rng)` draws layer shapes from the 81 real networks' layers shipped in
`spio/kernels/data/conv2d_gw8_layer_shapes.csv` (with a random batch and dtype) or random ones,
stride 1 or 2 (`STRIDE2_PROB`);
`sample_fused_params(rng)` those of them the backward may fuse (the fused kernel's family);
`make_*_runner(p, cfg)` returns a zero-argument launch of one variant on fresh random tensors on
the current GPU (the kernel is compiled and loaded when the runner is made).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path
from typing import Any

from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

SHAPES_CSV = Path(__file__).resolve().parents[1] / "data" / "conv2d_gw8_layer_shapes.csv"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REAL_PROB = 0.8  # a real layer's shape, else a random one
# Stride-2 layers drawn: RegNets (regnetx_*, regnety_*) open each stage with a stride-2 3x3
# group conv whose input is twice the stage's (listed) resolution.
STRIDE2_PROB = 0.3
MAX_STRIDED_INPUT = 224  # a real layer's input is doubled only up to this (else kept)
RANDOM_HW = (7, 8, 9, 14, 16, 28, 32, 56, 64, 112)
# Inputs of random stride-2 layers: odd sizes too (P = ceil(H / 2) at "same" padding; dgrad's
# end padding then differs from its front padding).
RANDOM_STRIDED_HW = (7, 8, 9, 14, 15, 16, 27, 28, 32, 56, 57, 64, 112, 113)


@functools.cache
def layer_shapes() -> tuple[Conv2dGw8Params, ...]:
    """The real layer shapes (batch as listed in the file; h and w are the layer's input). An
    optional `stride` column (1 or 2, both axes; 1 when absent or empty) gives strided rows."""
    with SHAPES_CSV.open() as f:
        return tuple(
            Conv2dGw8Params(
                n=int(r["n"]), c=int(r["c"]), h=int(r["h"]), w=int(r["w"]), r=int(r["r"]),
                s=int(r["s"]), pad_h=int(r["pad_h"]), pad_w=int(r["pad_w"]),
                has_bias=r["bias"] == "1", stride_h=int(r.get("stride") or 1),
                stride_w=int(r.get("stride") or 1),
            )
            for r in csv.DictReader(f)
        )  # fmt: skip


def _doubled(size: int) -> int:
    """A stride-2 layer's input for a stage of resolution `size`: twice it, or `size` itself
    when that would exceed MAX_STRIDED_INPUT."""
    return 2 * size if 2 * size <= MAX_STRIDED_INPUT else size


def sample_params(rng: Any) -> Conv2dGw8Params:
    """One layer: 80% a real layer shape with a random batch, 20% random within the limits;
    either is stride (2, 2) with probability STRIDE2_PROB (a real stride-1 layer then reads an
    input twice its size, see `_doubled`, with its padding unchanged; a random one draws its
    input from RANDOM_STRIDED_HW), else as listed (real) or stride 1 (random)."""
    dtype = rng.choice(("float16", "bfloat16"))
    n = rng.choice(BATCHES)
    strided = rng.random() < STRIDE2_PROB
    if rng.random() < REAL_PROB:
        base = rng.choice(layer_shapes())
        h, w, stride = base.h, base.w, base.stride
        if strided and stride == (1, 1):
            h, w, stride = _doubled(h), _doubled(w), (2, 2)
        return Conv2dGw8Params(n=n, c=base.c, h=h, w=w, r=base.r, s=base.s, pad_h=base.pad_h,
                               pad_w=base.pad_w, has_bias=base.has_bias, dtype=dtype,
                               stride_h=stride[0], stride_w=stride[1])  # fmt: skip
    r, s = rng.randint(1, 7), rng.randint(1, 7)
    hw = rng.choice(RANDOM_STRIDED_HW if strided else RANDOM_HW)
    st = 2 if strided else 1
    return Conv2dGw8Params(n=n, c=8 * rng.randint(1, 128), h=hw, w=hw, r=r, s=s, pad_h=r // 2,
                           pad_w=s // 2, has_bias=rng.random() < 0.5, dtype=dtype, stride_h=st,
                           stride_w=st)  # fmt: skip


def sample_fused_params(rng: Any) -> Conv2dGw8Params:
    """One layer the backward may fuse, drawn as `sample_params` draws (stride 1 or 2): a kernel
    of at most `wgrad.FUSE_MAX_KERNEL` rows and columns, and a column tile of the wgrad space
    (the widest, `wgrad.configs`) that can fuse (`wgrad.fusable`: a Q that is a power of two
    leaves no zero column at 'same' padding) with whole images (`wgrad.may_fuse` asks for one;
    the family's space then has its row chunks too)."""
    from spio.kernels.conv2d_gw8.params import Conv2dGw8WgradConfig
    from spio.kernels.conv2d_gw8.wgrad import BLOCK_Q_CHOICES, FUSE_MAX_KERNEL, fusable

    while True:
        p = sample_params(rng)
        if max(p.r, p.s) > FUSE_MAX_KERNEL:
            continue
        widest = next((bq for bq in BLOCK_Q_CHOICES if bq >= p.q), BLOCK_Q_CHOICES[-1])
        if fusable(p, Conv2dGw8WgradConfig(p.p, widest, 1, 3, 4)):
            return p


def _tensors(p: Conv2dGw8Params):
    import torch

    dev = torch.device("cuda", torch.cuda.current_device())
    dt = getattr(torch, p.dtype)
    cl = torch.channels_last
    x = torch.randn(p.n, p.c, p.h, p.w, device=dev).to(dt).contiguous(memory_format=cl)
    dy = torch.randn(p.n, p.c, p.p, p.q, device=dev).to(dt).contiguous(memory_format=cl)
    wdt = getattr(torch, p.weight_dtype)  # float32 under autocast: the kernels read it so
    w = torch.randn(p.c, 8, p.r, p.s, device=dev).to(wdt)
    b = torch.randn(p.c, device=dev).to(wdt)
    return x, dy, w, b, torch.cuda.current_stream(dev).cuda_stream


def _loaded(kdef, p: Conv2dGw8Params, cfg: Any):
    import torch

    from spio.cuda import device_attributes
    from spio.kernels.loader import default_function_cache

    dev = device_attributes(torch.cuda.current_device())
    return dev, default_function_cache().get(kdef, p.variant(), cfg, dev)


def make_fprop_runner(p: Conv2dGw8Params, cfg: Any):
    from spio.kernels.conv2d_gw8 import fprop as fp

    x, dy, w, b, stream = _tensors(p)
    _, kernel = _loaded(fp.FPROP, p, cfg)
    y = dy.clone()
    run = fp.FpropLaunch(kernel, p, cfg)  # what the op launches
    bias = b if p.has_bias else None
    return lambda: run(y, x, w, bias, stream)


def make_dgrad_runner(p: Conv2dGw8Params, cfg: Any):
    from spio.kernels.conv2d_gw8 import fprop as fp

    x, dy, w, _, stream = _tensors(p)
    _, kernel = _loaded(fp.DGRAD, p, cfg)
    dx = x.clone()
    run = fp.DgradLaunch(kernel, p, cfg)
    return lambda: run(dx, dy, w, stream)


def make_wgrad_runner(p: Conv2dGw8Params, cfg: Any):
    """Times what the op runs for the weight gradient (`WgradLaunch`): the wgrad kernel and the
    ordered reduction of its partials, so the model sees the cost of the partials a config
    writes (more splits: more parallel wgrad, more partial traffic and reduction work)."""
    import torch

    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd

    x, dy, w, b, stream = _tensors(p)
    dev, kernel = _loaded(wg.WGRAD, p, cfg)
    _, reduce_kernel = _loaded(rd.WGRAD_REDUCE, p, rd.reduce_config(p, cfg, dev))
    run = wg.WgradLaunch(kernel, reduce_kernel, p, cfg, dev)
    workspace = torch.empty(run.workspace_floats, device=x.device)
    db = b if p.has_bias else None
    return lambda: run(w, db, workspace, x, dy, stream)


def make_fused_runner(p: Conv2dGw8Params, cfg: Any):
    """Times what the op runs for a fused backward (`_WgradPlan.run_fused`): the kernel that
    writes dx and the fp32 partials of dw (and db), and their ordered reduction."""
    import torch

    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd

    x, dy, w, b, stream = _tensors(p)
    dev, kernel = _loaded(wg.WGRAD_DGRAD, p, cfg)
    _, reduce_kernel = _loaded(rd.WGRAD_REDUCE, p, rd.reduce_config(p, cfg, dev))
    run = wg.WgradLaunch(kernel, reduce_kernel, p, cfg, dev)
    workspace = torch.empty(run.workspace_floats, device=x.device)
    dw = w.clone()
    dx = x.clone()
    db = b if p.has_bias else None
    return lambda: run(dw, db, workspace, x, dy, stream, dx, w)
