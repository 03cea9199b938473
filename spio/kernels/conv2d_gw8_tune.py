"""conv2d_gw8 hooks for performance-model data collection: sampled params and runners.

`sample_params(rng)` draws layer shapes from the 81 real networks' layers shipped in
`spio/kernels/data/conv2d_gw8_layer_shapes.csv` (with a random batch and dtype) or random ones;
`make_*_runner(p, cfg)` returns a zero-argument launch of one variant on fresh random tensors on
the current GPU (the kernel is compiled and loaded when the runner is made).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path
from typing import Any

from spio.kernels.conv2d_gw8_params import Conv2dGw8Params

SHAPES_CSV = Path(__file__).resolve().parent / "data" / "conv2d_gw8_layer_shapes.csv"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@functools.cache
def layer_shapes() -> tuple[Conv2dGw8Params, ...]:
    """The real layer shapes (batch as listed in the file)."""
    with SHAPES_CSV.open() as f:
        return tuple(
            Conv2dGw8Params(
                n=int(r["n"]), c=int(r["c"]), h=int(r["h"]), w=int(r["w"]), r=int(r["r"]),
                s=int(r["s"]), pad_h=int(r["pad_h"]), pad_w=int(r["pad_w"]),
                has_bias=r["bias"] == "1",
            )
            for r in csv.DictReader(f)
        )  # fmt: skip


def sample_params(rng: Any) -> Conv2dGw8Params:
    """One layer: 80% a real layer shape with a random batch, 20% random within the limits."""
    dtype = rng.choice(("float16", "bfloat16"))
    n = rng.choice(BATCHES)
    if rng.random() < 0.8:
        base = rng.choice(layer_shapes())
        return Conv2dGw8Params(n=n, c=base.c, h=base.h, w=base.w, r=base.r, s=base.s,
                               pad_h=base.pad_h, pad_w=base.pad_w, has_bias=base.has_bias,
                               dtype=dtype)  # fmt: skip
    r, s = rng.randint(1, 7), rng.randint(1, 7)
    hw = rng.choice((7, 8, 9, 14, 16, 28, 32, 56, 64, 112))
    return Conv2dGw8Params(n=n, c=8 * rng.randint(1, 128), h=hw, w=hw, r=r, s=s, pad_h=r // 2,
                           pad_w=s // 2, has_bias=rng.random() < 0.5, dtype=dtype)  # fmt: skip


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
    from spio.kernels import conv2d_gw8_fprop as fp

    x, dy, w, b, stream = _tensors(p)
    _, kernel = _loaded(fp.FPROP, p, cfg)
    y = dy.clone()
    run = fp.FpropLaunch(kernel, p, cfg)  # what the op launches
    bias = b if p.has_bias else None
    return lambda: run(y, x, w, bias, stream)


def make_dgrad_runner(p: Conv2dGw8Params, cfg: Any):
    from spio.kernels import conv2d_gw8_fprop as fp

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

    from spio.kernels import conv2d_gw8_wgrad as wg
    from spio.kernels import conv2d_gw8_wgrad_reduce as rd

    x, dy, w, b, stream = _tensors(p)
    dev, kernel = _loaded(wg.WGRAD, p, cfg)
    _, reduce_kernel = _loaded(rd.WGRAD_REDUCE, p, rd.reduce_config(p, cfg, dev))
    run = wg.WgradLaunch(kernel, reduce_kernel, p, cfg, dev)
    workspace = torch.empty(run.workspace_floats, device=x.device)
    db = b if p.has_bias else None
    return lambda: run(w, db, workspace, x, dy, stream)
