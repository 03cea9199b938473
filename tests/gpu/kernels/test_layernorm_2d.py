"""layernorm_2d kernels on the GPU: every config against an fp64 reference from the same inputs.

Inputs are fresh random x ~ 3 + N(0, 1) (a non-zero mean, so one-pass variance cancellation would
show), quantized to the data type before the fp64 reference is computed. Every output (y, mean,
rstd, dx, the per-CTA partials, dweight, dbias) starts NaN-poisoned inside a NaN guard band, so
unwritten or out-of-bounds stores fail. M = N·H·W is a runtime argument: each config compiles once
and is checked on ragged row counts (1, 7, 1031). Every config of each case runs (sampled to
SPIO_MAX_TEST_PARAMS when set).
"""

from __future__ import annotations

import pytest
import torch

from spio.kernels import layernorm_2d as k
from spio.kernels.layernorm_2d_params import LayerNorm2dParams
from spio.kernels.loader import FunctionCache
from spio.testing import assert_close, poison, sample, tolerance

pytestmark = pytest.mark.gpu

ROWS = (1, 7, 1031)
EPS = 1e-6
GUARD = 64  # NaN elements before and after each output (keeps 16-byte alignment for all dtypes)
# (C, dtype, weight dtype, has_weight, has_bias): C from 8 to 8192, non powers of two, every
# dtype, fp32 weights with 16-bit data, and the affine flags (none: no reduce is compiled).
CASES = [
    (8, "float16", "float16", True, True),
    (64, "bfloat16", "bfloat16", True, True),
    (96, "float16", "float32", True, True),
    (128, "float32", "float32", True, False),
    (768, "bfloat16", "float32", False, True),
    (768, "float16", "float16", True, True),
    (4096, "float16", "float16", True, True),
    (4096, "float32", "float32", False, False),
    (4096, "bfloat16", "bfloat16", True, True),
    # One row per CTA and 2 x C fp32 over 47 KiB: backward keeps dweight/dbias in registers.
    (8192, "float16", "float16", True, True),
]


def _device():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _params(case, m=0) -> LayerNorm2dParams:
    c, dtype, wdtype, hw, hb = case
    return LayerNorm2dParams(c=c, m=m, dtype=dtype, wdtype=wdtype, has_weight=hw, has_bias=hb)


def _guarded(shape, dtype):
    """A NaN-poisoned output view with NaN guard bands of GUARD elements on both sides."""
    n = 1
    for s in shape:
        n *= s
    buf = poison(torch.empty(n + 2 * GUARD, dtype=dtype, device="cuda"))
    return buf, buf[GUARD : GUARD + n].view(shape)


def _guard_intact(buf, where):
    assert torch.isnan(buf[:GUARD].float()).all() and torch.isnan(buf[-GUARD:].float()).all(), (
        f"{where}: a store landed outside the output (guard band overwritten)"
    )


def _inputs(p: LayerNorm2dParams, seed: int):
    g = torch.Generator("cuda").manual_seed(seed)
    dt, wdt = getattr(torch, p.dtype), getattr(torch, p.wdtype)
    x = (3 + torch.randn(p.m, p.c, generator=g, device="cuda", dtype=torch.float64)).to(dt)
    dy = torch.randn(p.m, p.c, generator=g, device="cuda").to(dt)
    w = torch.randn(p.c, generator=g, device="cuda").to(wdt) if p.has_weight else None
    b = torch.randn(p.c, generator=g, device="cuda").to(wdt) if p.has_bias else None
    return x, dy, w, b


def _as_nchw(t):
    """(M, C) rows -> (M, C, 1, 1) for the NCHW references."""
    return t.reshape(t.shape[0], t.shape[1], 1, 1)


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


@pytest.fixture(scope="module")
def cache():
    return FunctionCache()


def check_forward(p, cfg, cache, dev, seed):
    x, _, w, b = _inputs(p, seed)
    where = f"fwd {p} {cfg} seed={seed}"
    ref_y, ref_mean, ref_rstd = k.reference(_as_nchw(x), w, b, EPS)
    ybuf, y = _guarded((p.m, p.c), x.dtype)
    mbuf, mean = _guarded((p.m,), torch.float32)
    rbuf, rstd = _guarded((p.m,), torch.float32)
    loaded = cache.get(k.FWD, p.static(), cfg, dev)
    k.launch_forward(
        loaded,
        p,
        cfg,
        dev,
        x=x,
        weight=w,
        bias=b,
        y=y,
        mean=mean,
        rstd=rstd,
        eps=EPS,
        stream=_stream(),
    )
    torch.cuda.synchronize()
    for buf, name in ((ybuf, "y"), (mbuf, "mean"), (rbuf, "rstd")):
        _guard_intact(buf, f"{where} {name}")
    assert_close(_as_nchw(y), ref_y, tolerance(x.dtype, p.c), f"{where} y")
    assert_close(mean, ref_mean.flatten(), tolerance(torch.float32, p.c), f"{where} mean")
    assert_close(rstd, ref_rstd.flatten(), tolerance(torch.float32, p.c), f"{where} rstd")


def run_backward(p, cfg, cache, dev, x, dy, w, b):
    """Returns (dx, dweight, dbias, guard buffers) of one backward launch on NaN-poisoned outputs.
    The reduce runs in the variant launch_backward derives from the real parts count."""
    _, mean, rstd = k.reference(_as_nchw(x), None, None, EPS)
    mean, rstd = mean.flatten().float(), rstd.flatten().float()
    loaded = cache.get(k.BWD, p.static(), cfg, dev)
    # Without weight and bias there is nothing to reduce: no reduce is compiled or launched.
    reduce_loaded = True if k.needs_reduce(p) else None
    parts = k.parts(loaded, p, cfg, dev)
    dxbuf, dx = _guarded((p.m, p.c), x.dtype)
    wdt = getattr(torch, p.wdtype)
    dwbuf, dw = _guarded((p.c,), wdt)
    dbbuf, db = _guarded((p.c,), wdt)
    dwp = poison(torch.empty(parts, p.c, device="cuda")) if p.has_weight else None
    dbp = poison(torch.empty(parts, p.c, device="cuda")) if p.has_bias else None
    k.launch_backward(
        loaded,
        reduce_loaded,
        p,
        cfg,
        dev,
        x=x,
        dy=dy,
        mean=mean,
        rstd=rstd,
        weight=w,
        dx=dx,
        dweight=dw if p.has_weight else None,
        dbias=db if p.has_bias else None,
        dweight_part=dwp,
        dbias_part=dbp,
        stream=_stream(),
    )
    torch.cuda.synchronize()
    return dx, dw, db, (dxbuf, dwbuf, dbbuf)


def check_backward(p, cfg, cache, dev, seed):
    x, dy, w, b = _inputs(p, seed)
    where = f"bwd {p} {cfg} seed={seed}"
    dx, dw, db, (dxbuf, dwbuf, dbbuf) = run_backward(p, cfg, cache, dev, x, dy, w, b)
    _guard_intact(dxbuf, f"{where} dx")
    ref_dx, ref_dw, ref_db = k.reference_backward(_as_nchw(x), _as_nchw(dy), w, EPS)
    assert_close(_as_nchw(dx), ref_dx, tolerance(x.dtype, p.c, c=8.0), f"{where} dx")
    wdt = getattr(torch, p.wdtype)
    if p.has_weight:
        _guard_intact(dwbuf, f"{where} dweight")
        assert_close(dw, ref_dw, tolerance(wdt, p.m), f"{where} dweight")
    if p.has_bias:
        _guard_intact(dbbuf, f"{where} dbias")
        assert_close(db, ref_db, tolerance(wdt, p.m), f"{where} dbias")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_forward_every_config(case, cache, seed):
    dev = _device()
    cfgs = sample(k.FWD.configs(_params(case), dev))
    for cfg in cfgs:
        for m in ROWS:
            check_forward(_params(case, m), cfg, cache, dev, seed)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_backward_every_config(case, cache, seed):
    dev = _device()
    p0 = _params(case)
    cfgs = sample(k.BWD.configs(p0, dev))
    for cfg in cfgs:
        for m in ROWS:
            check_backward(_params(case, m), cfg, cache, dev, seed)


# Partial-row counts for the reduce alone: one row, fewer rows than threads, the H100's usual
# 264 (2 CTAs x 132 SMs), 4 per SM, and more rows than any config reads in one round.
REDUCE_PARTS = (1, 37, 264, 528, 5000)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[3] or c[4]], ids=lambda c: "-".join(map(str, c))
)
def test_reduce_every_config(case, cache, seed):
    """layernorm_2d_bwd_reduce alone, every config x REDUCE_PARTS: NaN-guarded outputs against
    fp64 column sums, and (fp32 weights) bitwise against the documented order (ordered_sum)."""
    dev = _device()
    p = _params(case)
    wdt = getattr(torch, p.wdtype)
    g = torch.Generator("cuda").manual_seed(seed)
    for rcfg in sample(k.BWD_REDUCE.configs(p, dev)):
        loaded = cache.get(k.BWD_REDUCE, p.static(), rcfg, dev)
        for parts in REDUCE_PARTS:
            where = f"reduce {p} {rcfg} parts={parts} seed={seed}"
            dwp = torch.randn(parts, p.c, generator=g, device="cuda") if p.has_weight else None
            dbp = torch.randn(parts, p.c, generator=g, device="cuda") if p.has_bias else None
            dwbuf, dw = _guarded((p.c,), wdt)
            dbbuf, db = _guarded((p.c,), wdt)
            k.launch_reduce(
                loaded,
                p,
                rcfg,
                dweight_part=dwp,
                dbias_part=dbp,
                dweight=dw if p.has_weight else None,
                dbias=db if p.has_bias else None,
                parts=parts,
                stream=_stream(),
            )
            torch.cuda.synchronize()
            for part, buf, out, name in ((dwp, dwbuf, dw, "dweight"), (dbp, dbbuf, db, "dbias")):
                if part is None:
                    assert torch.isnan(buf.float()).all(), f"{where}: {name} written without it"
                    continue
                _guard_intact(buf, f"{where} {name}")
                assert_close(out, part.double().sum(0), tolerance(wdt, parts), f"{where} {name}")
                if wdt == torch.float32:
                    want = torch.from_numpy(k.ordered_sum(part.cpu().numpy(), rcfg))
                    assert torch.equal(out.cpu(), want), f"{where} {name}: not the fixed order"


@pytest.mark.parametrize("case", [CASES[1], CASES[6]], ids=lambda c: "-".join(map(str, c)))
def test_backward_deterministic(case, cache, seed):
    """dweight and dbias are bitwise identical across runs (no atomics, fixed orders)."""
    dev = _device()
    p = _params(case, 40_000)
    cfg = k.BWD.heuristic(p, dev)
    x, dy, w, b = _inputs(p, seed)
    first = run_backward(p, cfg, cache, dev, x, dy, w, b)
    second = run_backward(p, cfg, cache, dev, x, dy, w, b)
    for name, a, e in zip(("dx", "dweight", "dbias"), first[:3], second[:3], strict=True):
        assert torch.equal(a, e), f"{name} differs between two identical runs ({p} {cfg})"


def test_large_rows_grid_stride(cache, seed):
    """More row groups than resident CTAs: the grid-stride loop covers every row."""
    dev = _device()
    p = LayerNorm2dParams(c=64, m=128 * 28 * 28 + 3, dtype="float16")
    check_forward(p, k.FWD.heuristic(p, dev), cache, dev, seed)
    check_backward(p, k.BWD.heuristic(p, dev), cache, dev, seed)
