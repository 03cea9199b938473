"""conv2d_gw8 weight gradient on a GPU: the dead-work skips and the narrow column tile.

The kernel skips column chunks at or past Q, dy rows past P and x rows that are padding (their dy
row still feeds the bias), and does not copy the rows it skips; block_q 8 is a one-chunk tile.
These shapes exercise each: 7x7 k7 (6 of 13 task rows padding), Q < 8, ragged Q and P, padding
beyond R - 1, and Q = 14 in two 8-column tiles. Every sampled config (all under `slow`), the
heuristic's, block_q 8 ones and 8-warp ones (WIDE_WARP_CHOICES: supported, not yet in the default
space) run against an fp64 reference from the same fp16/bf16 inputs, with NaN-poisoned partials,
a NaN guard band around dw and db, and a second run that must give the same bits.
"""

from __future__ import annotations

import functools

import pytest
import torch

from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.kernels.loader import FunctionCache
from spio.settings import settings
from spio.testing import assert_close, sample, tolerance

pytestmark = pytest.mark.gpu

GUARD = 64  # NaN elements on each side of dw and db
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}

SHAPES = [
    Conv2dGw8Params(n=3, c=64, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, has_bias=True),  # padding rows
    Conv2dGw8Params(
        n=4, c=16, h=5, w=5, r=3, s=3, pad_h=1, pad_w=1, dtype="bfloat16", has_bias=True
    ),
    Conv2dGw8Params(n=2, c=24, h=10, w=19, r=3, s=5, pad_h=1, pad_w=2, has_bias=True),  # ragged Q
    Conv2dGw8Params(n=2, c=8, h=5, w=12, r=3, s=2, pad_h=3, pad_w=1, has_bias=True),  # pad > R-1
    Conv2dGw8Params(n=2, c=32, h=56, w=57, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),  # 57 in 64
    Conv2dGw8Params(n=3, c=64, h=14, w=14, r=5, s=5, pad_h=2, pad_w=2, dtype="bfloat16"),
    Conv2dGw8Params(n=5, c=16, h=9, w=3, r=1, s=1, pad_h=0, pad_w=0, has_bias=True),  # Q = 3
    Conv2dGw8Params(n=1, c=64, h=11, w=6, r=5, s=7, pad_h=0, pad_w=3, has_bias=True),  # pad 0 rows
]


@functools.cache
def _dev():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _limit(default: int = 8) -> int | None:
    return settings().max_test_params or default


def _cases(p: Conv2dGw8Params, seed: int, every: bool = False) -> list:
    """Sampled default-space configs, the heuristic's, and sampled block_q 8 and 8-warp ones."""
    dev = _dev()
    wide = wg.configs(p, dev, warp_choices=wg.WIDE_WARP_CHOICES)
    if every:
        return wide
    cfgs = wg.configs(p, dev)
    narrow = [c for c in cfgs if c.block_q == 8]
    eight = [c for c in wide if c.warps == 8]
    picked = [wg.heuristic(p, dev)] + sample(cfgs, _limit(), seed=seed)
    picked += sample(narrow, 3, seed=seed) + sample(eight, 2, seed=seed)
    return list(dict.fromkeys(picked))


def _precompile(p, cfgs) -> None:
    from spio.kernels.loader import compile_specs

    compile_specs([wg.spec(p, cfg, _dev()) for cfg in cfgs], _dev().arch, progress=None)


def _guarded(shape, dtype):
    numel = 1
    for d in shape:
        numel *= d
    buf = torch.full((numel + 2 * GUARD,), float("nan"), dtype=dtype, device="cuda")
    return buf[GUARD : GUARD + numel].view(shape), buf


def _run(p, cfg, cache, x, dy):
    """(dw, db) through the wgrad kernel and the ordered reduction; partials and outputs start as
    NaN, and the guard bands around dw and db must stay NaN."""
    dt, dev = DTYPES[p.dtype], _dev()
    slices = wg.num_slices(p, cfg, dev)
    partial = torch.full((slices * p.c * 8 * p.r * p.s,), float("nan"), device="cuda")
    bias_partial = torch.full((slices * p.c if p.has_bias else 1,), float("nan"), device="cuda")
    dw, dw_buf = _guarded((p.c, 8, p.r, p.s), dt)
    db, db_buf = _guarded((p.c,), dt) if p.has_bias else (None, None)
    stream = torch.cuda.current_stream().cuda_stream
    kernel = cache.get(wg.WGRAD, p.variant(), cfg, dev)
    wg.launch(kernel, p, cfg, dev, partial, bias_partial, x, dy, stream)
    rcfg = rd.reduce_config(p, cfg, dev)  # as the op
    reduce = cache.get(rd.WGRAD_REDUCE, p.variant(), rcfg, dev)
    rd.reduce_launch(reduce, p, rcfg, dw, db, partial, bias_partial, slices, stream)
    torch.cuda.synchronize()
    for buf in (dw_buf, db_buf):
        if buf is not None:
            edges = torch.cat([buf[:GUARD], buf[-GUARD:]])
            assert torch.isnan(edges).all(), f"{p} {cfg}: wrote outside dw/db"
    return dw, db


def check(p: Conv2dGw8Params, cfgs, seed: int) -> None:
    dt = DTYPES[p.dtype]
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(p.n, p.c, p.h, p.w, generator=g, device="cuda").to(dt)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=g, device="cuda").to(dt)
    x = x.contiguous(memory_format=torch.channels_last)
    dy = dy.contiguous(memory_format=torch.channels_last)
    want_w = ref.wgrad(x.double(), dy.double(), (p.r, p.s), p.padding, p.stride)
    want_b = ref.bias_grad(dy.double())
    tol = tolerance(dt, depth=p.n * p.p * p.q)
    cache = FunctionCache()
    _precompile(p, cfgs)
    for cfg in cfgs:
        where = f"wgrad {p} {cfg} seed={seed}"
        dw, db = _run(p, cfg, cache, x, dy)
        assert_close(dw, want_w, tol, where)
        if p.has_bias:
            assert_close(db, want_b, tol, where + " (bias)")
        dw2, db2 = _run(p, cfg, cache, x, dy)
        assert torch.equal(dw, dw2), f"{where}: dw differs between two runs (not deterministic)"
        if p.has_bias:
            assert torch.equal(db, db2), f"{where}: db differs between two runs"


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_wgrad_skips(p, seed):
    check(p, _cases(p, seed), seed)


@pytest.mark.slow
@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_wgrad_skips_every_config(p, seed):
    check(p, _cases(p, seed, every=True), seed)


# TMA rows (sm_90+: 2+-warp CTAs, 3x3 and smaller): every swizzle (2, 4 and 8 warps: 32, 64 and
# 128 bytes), splits of several tasks (the row stream crosses tasks and the barriers' phases
# wrap mid-task), ragged row chunks and column tiles (boxes past W and Q read zeros), padding
# rows (not copied: their barrier completes on the arrival alone), stride 2, idle warps (a box
# past C reads zeros).
TMA_SHAPES = [
    Conv2dGw8Params(n=40, c=64, h=13, w=21, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(
        n=96,
        c=32,
        h=15,
        w=9,
        r=3,
        s=3,
        pad_h=1,
        pad_w=1,
        stride_h=2,
        stride_w=2,
        dtype="bfloat16",
        has_bias=True,
    ),  # fmt: skip
    Conv2dGw8Params(n=16, c=56, h=10, w=17, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=8, c=64, h=5, w=70, r=1, s=3, pad_h=0, pad_w=1, dtype="bfloat16"),
]


@pytest.mark.parametrize("p", TMA_SHAPES, ids=str)
def test_wgrad_tma_rows(p, seed):
    dev = _dev()
    if tuple(dev.compute_capability) < (9, 0):
        pytest.skip("TMA rows need sm_90")
    space = wg.configs(p, dev, warp_choices=wg.WIDE_WARP_CHOICES, with_idle_warps=True)
    tma = [c for c in space if wg.tma_rows(p, c, dev)]
    assert {c.warps for c in tma} >= {2, 4}, f"{p}: TMA configs of {sorted({c.warps for c in tma})}"
    several = [c for c in tma if wg.split_plan(p, c, dev)[1] > 1]  # tasks per split
    cfgs = [next(c for c in tma if c.warps == w) for w in sorted({c.warps for c in tma})]
    cfgs += sample(several, 3, seed=seed) + sample(tma, _limit(), seed=seed)
    check(p, list(dict.fromkeys(cfgs)), seed)
