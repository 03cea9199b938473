"""conv2d_gw8 kernels on a GPU: every (sampled) config of fprop, dgrad and wgrad against an fp64
reference computed from the same fp16/bf16 inputs, NaN-poisoned outputs with guard bands, and
bitwise determinism of the weight gradient.

Configs per shape are sampled to SPIO_MAX_TEST_PARAMS (default 12 here); the `slow` variant runs
every config. Variants are compiled up front in parallel (spio.compiler.compile_many).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch

from spio.kernels.conv2d_gw8 import fprop as fp
from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.kernels.loader import FunctionCache
from spio.settings import settings
from spio.testing import assert_close, sample, tolerance

pytestmark = pytest.mark.gpu

GUARD = 64  # elements of NaN on each side of every output (catches out-of-bounds writes)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}

SHAPES = [
    Conv2dGw8Params(n=2, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=3, c=24, h=13, w=19, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),  # ragged
    Conv2dGw8Params(n=1, c=8, h=9, w=7, r=5, s=5, pad_h=2, pad_w=2, dtype="bfloat16"),  # C=8, N=1
    Conv2dGw8Params(n=2, c=32, h=11, w=29, r=3, s=7, pad_h=1, pad_w=3),  # rectangular
    Conv2dGw8Params(n=2, c=16, h=10, w=21, r=5, s=2, pad_h=0, pad_w=0, has_bias=True),  # pad 0
    Conv2dGw8Params(n=2, c=128, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, dtype="bfloat16"),
    Conv2dGw8Params(n=1, c=16, h=250, w=330, r=3, s=3, pad_h=1, pad_w=1),  # large spatial
    Conv2dGw8Params(n=2, c=16, h=6, w=6, r=3, s=3, pad_h=4, pad_w=2, has_bias=True),  # pad > R-1
    Conv2dGw8Params(n=5, c=40, h=15, w=17, r=1, s=1, pad_h=0, pad_w=0, has_bias=True),
]


@functools.cache
def _dev():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _limit(default: int = 12) -> int | None:
    return settings().max_test_params or default


def _precompile(kdef, p, cfgs) -> None:
    from spio.kernels.loader import compile_specs

    compile_specs([kdef.spec(p, cfg, _dev()) for cfg in cfgs], _dev().arch, progress=None)


def _guarded(shape_nchw, dtype):
    """A NaN-filled channels_last (N, C, P, Q) view inside a NaN buffer with guard bands."""
    n, c, p, q = shape_nchw
    buf = torch.full((n * c * p * q + 2 * GUARD,), float("nan"), dtype=dtype, device="cuda")
    y = buf[GUARD : GUARD + n * c * p * q].view(n, p, q, c).permute(0, 3, 1, 2)
    return y, buf


def _check_guards(buf, where):
    lo, hi = buf[:GUARD], buf[-GUARD:]
    assert torch.isnan(lo).all() and torch.isnan(hi).all(), f"{where}: wrote outside the output"


def _rand(shape, dtype, g, channels_last=True):
    t = torch.randn(*shape, generator=g, device="cuda").to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def check_fprop(p: Conv2dGw8Params, cfgs, seed: int, cache: FunctionCache | None = None) -> None:
    dt = DTYPES[p.dtype]
    g = torch.Generator("cuda").manual_seed(seed)
    x = _rand((p.n, p.c, p.h, p.w), dt, g)
    w = torch.randn(p.c, 8, p.r, p.s, generator=g, device="cuda").to(dt)
    b = torch.randn(p.c, generator=g, device="cuda").to(dt) if p.has_bias else None
    want = ref.fprop(x.double(), w.double(), None if b is None else b.double(), p.padding, p.stride)
    tol = tolerance(dt, depth=8 * p.r * p.s)
    if cache is None:
        cache = FunctionCache()
        _precompile(fp.FPROP, p, cfgs)
    for cfg in cfgs:
        y, buf = _guarded((p.n, p.c, p.p, p.q), dt)
        fp.launch(cache.get(fp.FPROP, p.variant(), cfg, _dev()), p, cfg, y, x, w, b, _stream())
        torch.cuda.synchronize()
        where = f"fprop {p} {cfg} seed={seed}"
        _check_guards(buf, where)
        assert_close(y, want, tol, where)


def check_dgrad(p: Conv2dGw8Params, cfgs, seed: int) -> None:
    dt = DTYPES[p.dtype]
    g = torch.Generator("cuda").manual_seed(seed + 1)
    dy = _rand((p.n, p.c, p.p, p.q), dt, g)
    w = torch.randn(p.c, 8, p.r, p.s, generator=g, device="cuda").to(dt)
    want = ref.dgrad(dy.double(), w.double(), (p.h, p.w), p.padding, p.stride)
    tol = tolerance(dt, depth=8 * p.r * p.s)
    cache = FunctionCache()
    _precompile(fp.DGRAD, p, cfgs)
    for cfg in cfgs:
        dx, buf = _guarded((p.n, p.c, p.h, p.w), dt)
        fp.dgrad_launch(cache.get(fp.DGRAD, p.variant(), cfg, _dev()), p, cfg, dx, dy, w, _stream())
        torch.cuda.synchronize()
        where = f"dgrad {p} {cfg} seed={seed}"
        _check_guards(buf, where)
        assert_close(dx, want, tol, where)


def run_wgrad(p, cfg, cache, x, dy):
    """(dw, db) through the wgrad kernel and the ordered reduction, partials poisoned."""
    dt = DTYPES[p.dtype]
    dev = _dev()
    slices = wg.num_slices(p, cfg, dev)
    partial = torch.full((slices * p.c * 8 * p.r * p.s,), float("nan"), device="cuda")
    bias_partial = torch.full((slices * p.c if p.has_bias else 1,), float("nan"), device="cuda")
    dw = torch.full((p.c, 8, p.r, p.s), float("nan"), dtype=dt, device="cuda")
    db = torch.full((p.c,), float("nan"), dtype=dt, device="cuda") if p.has_bias else None
    wg.launch(
        cache.get(wg.WGRAD, p.variant(), cfg, dev),
        p,
        cfg,
        dev,
        partial,
        bias_partial,
        x,
        dy,
        _stream(),
    )
    rcfg = rd.reduce_config(p, cfg, dev)  # as the op
    rd.reduce_launch(
        cache.get(rd.WGRAD_REDUCE, p.variant(), rcfg, dev),
        p,
        rcfg,
        dw,
        db,
        partial,
        bias_partial,
        slices,
        _stream(),
    )
    torch.cuda.synchronize()
    return dw, db


def check_wgrad(p: Conv2dGw8Params, cfgs, seed: int) -> None:
    dt = DTYPES[p.dtype]
    g = torch.Generator("cuda").manual_seed(seed + 2)
    x = _rand((p.n, p.c, p.h, p.w), dt, g)
    dy = _rand((p.n, p.c, p.p, p.q), dt, g)
    want_w = ref.wgrad(x.double(), dy.double(), (p.r, p.s), p.padding, p.stride)
    want_b = ref.bias_grad(dy.double())
    depth = p.n * p.p * p.q
    cache = FunctionCache()
    _precompile(wg.WGRAD, p, cfgs)
    for cfg in cfgs:
        where = f"wgrad {p} {cfg} seed={seed}"
        dw, db = run_wgrad(p, cfg, cache, x, dy)
        assert_close(dw, want_w, tolerance(dt, depth=depth), where)
        if p.has_bias:
            assert_close(db, want_b, tolerance(dt, depth=depth), where + " (bias)")
        dw2, db2 = run_wgrad(p, cfg, cache, x, dy)
        assert torch.equal(dw, dw2), f"{where}: dw differs between two runs (not deterministic)"
        if p.has_bias:
            assert torch.equal(db, db2), f"{where}: db differs between two runs"


# Stride 2 (both axes or one; odd and even sizes; C = 8, N = 1; 7x7; 1x1; the real layers' 14²).
STRIDED_SHAPES = [
    Conv2dGw8Params(n=3, c=24, h=15, w=17, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=2, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=10, w=9, r=5, s=5, pad_h=2, pad_w=2, stride_h=2, stride_w=2,
                    dtype="bfloat16"),
    Conv2dGw8Params(n=2, c=32, h=14, w=14, r=7, s=7, pad_h=3, pad_w=3, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=2, c=16, h=12, w=13, r=3, s=5, pad_h=1, pad_w=2, stride_h=2, stride_w=1),
    Conv2dGw8Params(n=2, c=16, h=11, w=20, r=1, s=3, pad_h=0, pad_w=1, stride_h=1, stride_w=2),
    Conv2dGw8Params(n=4, c=368, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
]  # fmt: skip


# dgrad of stride 2 in W on tiles of an even number of 16-column M tiles runs PHASED (the tiles
# pair up by column parity and skip the dilation's zero columns): the dgrad padding S - 1 - pad
# even, odd and negative (2, 0, 1, 1, 1, 1, -1), ragged last tiles, stride (1, 2).
PHASED_SHAPES = [
    Conv2dGw8Params(n=2, c=16, h=9, w=47, r=3, s=5, pad_h=1, pad_w=2, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=1, c=24, h=7, w=37, r=3, s=3, pad_h=2, pad_w=2, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=6, w=40, r=2, s=2, pad_h=0, pad_w=0, stride_h=2, stride_w=2,
                    dtype="bfloat16"),
    Conv2dGw8Params(n=3, c=24, h=15, w=17, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=2, c=16, h=11, w=20, r=1, s=3, pad_h=0, pad_w=1, stride_h=1, stride_w=2),
    Conv2dGw8Params(n=2, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=5, w=40, r=3, s=3, pad_h=1, pad_w=3, stride_h=2, stride_w=2,
                    has_bias=True),  # pad > S - 1: the dgrad crops (padding -1)
]  # fmt: skip


# Odd channel-group counts (7, 13, 19, 55; 3 and 6) on CTAs whose warps do not divide them
# (RAGGED_GROUPS: the last group block has idle warps), stride 1 and 2, with and without bias.
RAGGED_SHAPES = [
    Conv2dGw8Params(n=2, c=56, h=12, w=13, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=3, c=152, h=9, w=9, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=2, c=440, h=7, w=7, r=3, s=3, pad_h=1, pad_w=1, dtype="bfloat16"),
    Conv2dGw8Params(n=1, c=104, h=15, w=34, r=5, s=5, pad_h=2, pad_w=2, stride_h=2, stride_w=2),
    # 3 and 6 groups: CTAs of more warps than groups (one group block, its last warps idle)
    Conv2dGw8Params(n=3, c=24, h=19, w=21, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=2, c=48, h=14, w=30, r=3, s=3, pad_h=1, pad_w=1, dtype="bfloat16"),
]  # fmt: skip


@pytest.mark.parametrize("p", RAGGED_SHAPES, ids=str)
def test_ragged_group_blocks(p, seed):
    for kdef, configs, check in ((fp.FPROP, fp.configs, check_fprop),
                                 (fp.DGRAD, fp.dgrad_configs, check_dgrad)):  # fmt: skip
        cfgs = [c for c in configs(p, _dev()) if p.groups % c.warps]
        assert cfgs, f"{kdef.name} {p}: no config with idle warps"
        check(p, sample(cfgs, _limit(16), seed=seed), seed)
    cfgs = [c for c in wg.configs(p, _dev()) if p.groups % c.warps]
    assert cfgs, f"wgrad {p}: no config with idle warps"
    check_wgrad(p, sample(cfgs, _limit(16), seed=seed), seed)


@pytest.mark.parametrize("p", PHASED_SHAPES, ids=str)
def test_dgrad_phased(p, seed):
    cfgs = [c for c in fp.dgrad_configs(p, _dev()) if fp.phased(p.dgrad_as_fprop(), c)]
    assert cfgs, f"{p}: no PHASED dgrad config"
    check_dgrad(p, sample(cfgs, _limit(24), seed=seed), seed)


@pytest.mark.parametrize("p", STRIDED_SHAPES, ids=str)
def test_strided_fprop_dgrad_wgrad(p, seed):
    check_fprop(p, sample(fp.configs(p, _dev()), _limit(), seed=seed), seed)
    check_dgrad(p, sample(fp.dgrad_configs(p, _dev()), _limit(), seed=seed), seed)
    check_wgrad(p, sample(wg.configs(p, _dev()), _limit(8), seed=seed), seed)


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_fprop(p, seed):
    check_fprop(p, sample(fp.configs(p, _dev()), _limit(), seed=seed), seed)


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_dgrad(p, seed):
    check_dgrad(p, sample(fp.dgrad_configs(p, _dev()), _limit(), seed=seed), seed)


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_wgrad(p, seed):
    check_wgrad(p, sample(wg.configs(p, _dev()), _limit(8), seed=seed), seed)


@pytest.mark.parametrize("p", SHAPES[:3], ids=str)
def test_wgrad_reduce_every_thread_count(p, seed):
    dt = DTYPES[p.dtype]
    g = torch.Generator("cuda").manual_seed(seed)
    x, dy = _rand((p.n, p.c, p.h, p.w), dt, g), _rand((p.n, p.c, p.p, p.q), dt, g)
    cfg = wg.heuristic(p, _dev())
    want = ref.wgrad(x.double(), dy.double(), (p.r, p.s), p.padding)
    cache = FunctionCache()
    for rcfg in rd.reduce_configs(p, _dev()):
        slices = wg.num_slices(p, cfg, _dev())
        partial = torch.full((slices * p.c * 8 * p.r * p.s,), float("nan"), device="cuda")
        bias_partial = torch.full((slices * p.c,), float("nan"), device="cuda")
        wg.launch(
            cache.get(wg.WGRAD, p.variant(), cfg, _dev()),
            p,
            cfg,
            _dev(),
            partial,
            bias_partial,
            x,
            dy,
            _stream(),
        )
        dw = torch.full((p.c, 8, p.r, p.s), float("nan"), dtype=dt, device="cuda")
        db = torch.full((p.c,), float("nan"), dtype=dt, device="cuda") if p.has_bias else None
        rd.reduce_launch(
            cache.get(rd.WGRAD_REDUCE, p.variant(), rcfg, _dev()),
            p,
            rcfg,
            dw,
            db,
            partial,
            bias_partial,
            slices,
            _stream(),
        )
        torch.cuda.synchronize()
        assert_close(dw, want, tolerance(dt, depth=p.n * p.p * p.q), f"reduce {rcfg} {p}")


@pytest.mark.parametrize("n", [1, 7, 64])
def test_batch_is_a_runtime_argument(n, seed):
    """One loaded variant serves every batch size (no compile, no load), and stays correct."""
    from spio.settings import override

    p = Conv2dGw8Params(n=2, c=32, h=14, w=14, has_bias=True)
    cfg = fp.heuristic(p, _dev())
    cache = FunctionCache()
    check_fprop(p, [cfg], seed, cache)  # compiles (or loads from the disk cache)
    with override(assert_no_compile=True):
        check_fprop(p.with_batch(n), [cfg], seed, cache)
    assert len(cache) == 1


# Q <= 8: two images per CTA (block_q 8); odd batches mask the last CTA's second image, and the
# 7x7 kernel on a 7x7 map skips the products of padding rows and of rows outside the tile.
PACKED_SHAPES = [
    Conv2dGw8Params(n=3, c=64, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, has_bias=True),
    Conv2dGw8Params(n=5, c=24, h=6, w=8, r=3, s=5, pad_h=1, pad_w=2, dtype="bfloat16"),
    Conv2dGw8Params(n=1, c=16, h=9, w=3, r=5, s=3, pad_h=2, pad_w=1, has_bias=True),
]


@pytest.mark.parametrize("p", PACKED_SHAPES, ids=str)
def test_two_images_per_cta(p, seed):
    packed = [c for c in fp.configs(p, _dev()) if fp.images(c) == 2]
    assert packed, f"{p}: Q <= 8 must offer block_q 8"
    check_fprop(p, sample(packed, _limit(), seed=seed), seed)
    dpacked = [c for c in fp.dgrad_configs(p, _dev()) if fp.images(c) == 2]
    check_dgrad(p, sample(dpacked, _limit(), seed=seed), seed)


# Benchmark-like layers at moderate batch: the heuristic picks deep pipelines (up to 8 stages)
# and whole-image fprop blocks; at C256 the wgrad heuristic's config is also run at 1 split per
# SM, whose splits stream several tasks. Sampled configs may miss them.
HEURISTIC_SHAPES = [
    Conv2dGw8Params(n=8, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=64, c=256, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=4, c=128, h=28, w=28, r=5, s=5, pad_h=2, pad_w=2, dtype="bfloat16"),
]


@pytest.mark.parametrize("p", HEURISTIC_SHAPES, ids=str)
def test_heuristic_configs(p, seed):
    dev = _dev()
    best = fp.heuristic(p, dev)
    whole = replace(best, block_p=p.p)  # one block per image column strip (block_p 64 capped)
    check_fprop(
        p, [best] + ([whole] if whole != best and whole in fp.configs(p, dev) else []), seed
    )
    check_dgrad(p, [fp.dgrad_heuristic(p, dev)], seed)
    cfg = wg.heuristic(p, dev)
    cfgs = [cfg]
    if p.c == 256:  # 64 tasks over fewer splits: the rows of several tasks form one stream
        streamed = replace(cfg, splits_per_sm=1)
        assert wg.split_plan(p, streamed, dev)[1] > 1, f"{p} {streamed}: expected several tasks"
        cfgs.append(streamed)
    check_wgrad(p, cfgs, seed)


@pytest.mark.slow
@pytest.mark.parametrize(
    "p", SHAPES + STRIDED_SHAPES + PHASED_SHAPES[:3] + RAGGED_SHAPES[:2], ids=str
)
def test_every_config(p, seed):
    check_fprop(p, fp.configs(p, _dev()), seed)
    check_dgrad(p, fp.dgrad_configs(p, _dev()), seed)
    check_wgrad(p, wg.configs(p, _dev()), seed)
