"""The backward's fused kernel (the wgrad kernel's FUSE_DGRAD variant) on a GPU: dx, dw and db
against fp64 from the same quantized inputs, sampled fused configs (stride 1 and 2, 'same' and
'valid' padding, fp16/bf16, float32 and channels_last weights, idle warps, 1x1, 3x1, 5x5, N = 1,
C = 8, odd sizes; whole-image tasks and row chunks), dx NaN-poisoned (every element written),
partials NaN-poisoned, two runs bitwise equal."""

from __future__ import annotations

import pytest
import torch

from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.kernels.loader import compile_specs, default_function_cache
from spio.settings import settings
from spio.testing import assert_close, sample, tolerance

pytestmark = pytest.mark.gpu

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
CL = torch.channels_last


def _p(n, c, h, w, r=3, s=3, pad_h=1, pad_w=1, **kw):
    return Conv2dGw8Params(n=n, c=c, h=h, w=w, r=r, s=s, pad_h=pad_h, pad_w=pad_w, **kw)


SHAPES = [
    _p(3, 64, 56, 56),
    _p(2, 64, 56, 56, dtype="bfloat16", wdtype="float32", weight_cl=True),
    _p(3, 104, 28, 28, has_bias=True),  # 13 groups: idle warps
    _p(2, 440, 7, 7, has_bias=True),
    _p(1, 8, 9, 9),
    _p(2, 16, 13, 13, 5, 5, 2, 2, dtype="bfloat16"),
    _p(3, 24, 5, 7, wdtype="float32"),
    _p(2, 16, 6, 6, 1, 1, 0, 0, has_bias=True),
    _p(2, 32, 11, 10, 3, 1, 1, 0),
    _p(17, 48, 14, 14),  # several images per split
    _p(2, 56, 28, 28, weight_cl=True),
    _p(2, 32, 12, 12, pad_h=0, pad_w=0),  # 'valid': dx rows and columns the dy edge reaches
    _p(3, 24, 15, 17, stride_h=2, stride_w=2),  # stride 2, odd sizes: two column phases
    _p(2, 64, 28, 28, stride_h=2, stride_w=2, has_bias=True, wdtype="float32"),
    _p(2, 104, 14, 14, stride_h=2, stride_w=2, dtype="bfloat16"),
    _p(2, 16, 9, 11, 1, 1, 0, 0, stride_h=2, stride_w=2),  # 1x1 stride 2: odd columns get zeros
    _p(2, 32, 10, 13, 3, 3, 1, 1, stride_h=1, stride_w=2),
]


def _dev():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _inputs(p, seed):
    g = torch.Generator("cuda").manual_seed(seed)
    dt = DTYPES[p.dtype]
    x = torch.randn(p.n, p.c, p.h, p.w, generator=g, device="cuda").to(dt)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=g, device="cuda").to(dt)
    w = torch.randn(p.c, 8, p.r, p.s, generator=g, device="cuda").to(DTYPES[p.weight_dtype])
    w = w.contiguous(memory_format=CL if p.weight_cl else torch.contiguous_format)
    return x.contiguous(memory_format=CL), dy.contiguous(memory_format=CL), w


def _run(p, cfg, kernel, x, dy, w):
    dev, dt, wdt = _dev(), DTYPES[p.dtype], DTYPES[p.weight_dtype]
    rcfg = rd.reduce_config(p, cfg, dev)
    reduce = default_function_cache().get(rd.WGRAD_REDUCE, rd.WGRAD_REDUCE.compiled(p), rcfg, dev)
    launch = wg.WgradLaunch(kernel, reduce, p, cfg, dev)
    dx = torch.full((p.n, p.c, p.h, p.w), float("nan"), dtype=dt, device="cuda")
    dx = dx.contiguous(memory_format=CL)
    dw = torch.empty(p.c, 8, p.r, p.s, dtype=wdt, device="cuda")
    dw = dw.contiguous(memory_format=CL if p.weight_cl else torch.contiguous_format)
    db = torch.empty(p.c, dtype=wdt, device="cuda") if p.has_bias else None
    ws = torch.full((launch.workspace_floats,), float("nan"), device="cuda")
    launch(dw, db, ws, x, dy, torch.cuda.current_stream().cuda_stream, dx, w)
    torch.cuda.synchronize()
    return dx, dw, db


# Row chunks (block_p < P): each task also holds the dy rows past its chunk that its last dx rows
# read, and writes only the dx rows it owns.
CHUNKED_SHAPES = [
    _p(2, 64, 56, 56),
    _p(2, 64, 30, 30, dtype="bfloat16", wdtype="float32", weight_cl=True, has_bias=True),
    _p(3, 24, 29, 27, stride_h=2, stride_w=2),  # stride 2, odd sizes: chunks overlap one row
    _p(2, 104, 28, 28, stride_h=2, stride_w=2, has_bias=True),  # 13 groups: idle warps
    _p(2, 32, 12, 12, pad_h=0, pad_w=0),  # 'valid'
    _p(2, 16, 20, 20, 5, 5, 2, 2),  # a halo of 4 dy rows
    _p(2, 16, 14, 14, 1, 1, 0, 0, has_bias=True),  # 1x1: chunks meet, no halo
    _p(2, 48, 30, 30, 3, 1, 1, 0),
    _p(1, 8, 17, 9),  # N = 1, C = 8, a ragged last chunk
    _p(2, 32, 10, 13, stride_h=1, stride_w=2),
    _p(2, 32, 13, 10, stride_h=2, stride_w=1),
]


@pytest.mark.parametrize(
    "p, chunked",
    [(p, False) for p in SHAPES] + [(p, True) for p in CHUNKED_SHAPES],
    ids=lambda v: str(v) if not isinstance(v, bool) else ("chunks" if v else "whole"),
)
def test_fused_kernel_every_sampled_config(p, chunked, seed):
    dev = _dev()
    cfgs = wg.fused_configs(p, dev, chunked=chunked)
    if chunked:
        cfgs = [c for c in cfgs if c.block_p < p.p]
    cfgs = sample(cfgs, settings().max_test_params or 8, seed=seed)
    assert cfgs
    compile_specs([wg.fused_spec(wg.fused_variant(p), c, dev) for c in cfgs], dev.arch)
    x, dy, w = _inputs(p, seed)
    dt = DTYPES[p.dtype]
    want_dx = ref.dgrad(dy.double(), w.to(dt).double(), (p.h, p.w), p.padding, p.stride)
    want_dw = ref.wgrad(x.double(), dy.double(), (p.r, p.s), p.padding, p.stride)
    want_db = ref.bias_grad(dy.double())
    tol_x = tolerance(dt, depth=8 * p.r * p.s)
    out = DTYPES[p.weight_dtype] if p.weight_dtype != "float32" else dt
    tol_w = tolerance(out, depth=p.n * p.p * p.q)
    for cfg in cfgs:
        where = f"fused {p} {cfg} seed={seed}"
        kernel = default_function_cache().get(wg.WGRAD_DGRAD, wg.WGRAD_DGRAD.compiled(p), cfg, dev)
        dx, dw, db = _run(p, cfg, kernel, x, dy, w)
        assert not torch.isnan(dx).any(), where + ": dx not written everywhere"
        assert_close(dx, want_dx, tol_x, where + " dx")
        assert_close(dw, want_dw, tol_w, where + " dw")
        if p.has_bias:
            assert_close(db, want_db, tol_w, where + " db")
        dx2, dw2, db2 = _run(p, cfg, kernel, x, dy, w)
        assert torch.equal(dx, dx2) and torch.equal(dw, dw2), where + ": not deterministic"
        if p.has_bias:
            assert torch.equal(db, db2), where + ": db not deterministic"
