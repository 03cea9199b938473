"""The conv2d_gw8 wgrad kernel's dead-work skips, emulated lane by lane on the host.

Replays spio/src/conv2d_gw8_wgrad.cu in numpy the way
tests/host/kernels/test_conv2d_gw8_emulation.py does (m16n8k16, m16n8k8 and ldmatrix.trans
fragment tables of the PTX ISA: 16 columns per mma, the last 8 of an odd chunk count by k8),
including what the kernel now leaves out: column chunks at or past OUT_Q, dy rows
past OUT_P, x rows that are padding (whose dy row still feeds the bias), and the copies of rows
nobody reads. Shared memory starts as NaN and a skipped copy leaves the slot as it was, so reading
a row the kernel no longer loads shows up as NaN in the result. Every mma is counted and checked
against the number of (x row, dy row, column chunk) products that are not identically zero,
counted independently from the dy side.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from spio.cuda import known_device
from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_tiling as wt
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params, Conv2dGw8WgradConfig
from spio.testing import sample

LANES = np.arange(32)
G, T = LANES // 4, LANES % 4  # fragment group (row of A/C, column of B) and pair index


def mma_m16n8k8(acc, a, b):
    """acc[32, 4] += A @ B with A from a[32, 2 regs, 2 halves], B from b[32, 2 halves]."""
    A = np.zeros((16, 8))
    B = np.zeros((8, 8))
    for reg in range(2):
        for h in range(2):
            A[G + 8 * reg, 2 * T + h] = a[:, reg, h]
    for h in range(2):
        B[2 * T + h, G] = b[:, h]
    D = A @ B
    for e in range(4):
        acc[:, e] += D[G + 8 * (e // 2), 2 * T + e % 2]


def mma_m16n8k16(acc, a, b):
    """acc[32, 4] += A @ B with A from a[32, 4 regs, 2 halves] (reg: rows + 8 (reg % 2), columns
    + 8 (reg // 2)), B from b[32, 2 regs, 2 halves] (reg: rows + 8 reg)."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for reg in range(4):
        for h in range(2):
            A[G + 8 * (reg % 2), 2 * T + h + 8 * (reg // 2)] = a[:, reg, h]
    for reg in range(2):
        for h in range(2):
            B[2 * T + h + 8 * reg, G] = b[:, reg, h]
    D = A @ B
    for e in range(4):
        acc[:, e] += D[G + 8 * (e // 2), 2 * T + e % 2]


def ldmatrix_trans(rows):
    """One 8x8 matrix from 8 row vectors (rows[8, 8]), transposed: lane gets (M[2t][g],
    M[2t + 1][g])."""
    return np.stack([rows[2 * T, G], rows[2 * T + 1, G]], axis=1)


STEP_ROWS = 8  # the kernel's chunk of unrolled rows in a task longer than MAX_TASK_ROWS


def row_walk(tile_h: int, stages: int, max_task_rows: int) -> list[tuple[int, int, bool]]:
    """The kernel's walk over one task's rows: (i, u, chunked) per pipeline step, in order. A
    task of at most max_task_rows rows is one unrolled tail (u = i); a longer one runs its first
    CHUNKED_ROWS rows in chunks of STEP_ROWS (u = i mod STEP_ROWS), the rest as the tail."""
    chunked = 0 if tile_h <= max_task_rows else (tile_h - (stages - 1)) // STEP_ROWS * STEP_ROWS
    return [(i, i % STEP_ROWS, True) for i in range(chunked)] + [
        (i, i, False) for i in range(chunked, tile_h)
    ]


def emulate_wgrad(x, dy, p: Conv2dGw8Params, cfg, dev, max_task_rows: int = wg.MAX_TASK_ROWS):
    """x (N, H, W, C), dy (N, P, Q, C) -> (dw, db, mmas): the summed partials (in slice order; the
    reduction's grouping is covered by the other emulation) and the count of dw and bias mmas
    one warp issues, summed over warps and CTAs.

    The row walk is the kernel's: a loop over the split's tasks, each task's rows in `row_walk`
    order; a step multiplies row i of task t while it copies row ia = i + STAGES - 1 of task
    t + ia // TILE_H (in a chunked row, always task t: asserted); the x ring and the dy ring are
    walked as the kernel walks them (the stage being multiplied and the one refilled, a window
    of the dy slots of positions k .. k - R), and every slot is checked against k mod STAGES /
    k mod DY_ROWS of the stream position. Tap parities are taken from u, as the kernel does."""
    tasks, tps, splits = wt.split_plan(p, cfg, dev)
    n_q, n_g = wt.q_tiles(p, cfg), p.groups // cfg.warps
    sp, tile_w, dyr = wt.s_pairs(p), wt.tile_w(p, cfg), wt.dy_rows(p, cfg)
    tile_h, chunks = wt.task_rows(p, cfg), wt.p_chunks(p, cfg)  # rows streamed per task
    sh, sw = p.stride_h, p.stride_w
    walk = row_walk(tile_h, cfg.stages, max_task_rows)
    dw, db = np.zeros((p.c, 8, p.r, p.s)), np.zeros(p.c)
    mmas = {"dw": 0, "bias": 0}
    for split in range(splits):
        for blk in range(n_q * n_g):
            qb, gb = blk // n_g, blk % n_g
            q0, group0 = qb * cfg.block_q, gb * cfg.warps
            acc = np.zeros((cfg.warps, p.r, sp, 32, 4))
            acc_b = np.zeros((cfg.warps, 32, 4))
            sx = np.full((cfg.stages, cfg.warps, tile_w, 8), np.nan)
            sdy = np.full((dyr, cfg.warps, cfg.block_q, 8), np.nan)
            first, last = split * tps, min(split * tps + tps, tasks)

            def task_at(t):
                return t // chunks, (t % chunks) * cfg.block_p  # image, p0

            def load(t, i, xs, ds, q0=q0, group0=group0, sx=sx, sdy=sdy):
                n, p0 = task_at(t)
                h = p0 * sh - p.pad_h + i
                if 0 <= h < p.h:
                    for tt in range(cfg.warps * tile_w):
                        g, j = tt % cfg.warps, tt // cfg.warps
                        wc, c0 = q0 * sw - p.pad_w + j, (group0 + g) * 8
                        ok = 0 <= wc < p.w
                        sx[xs, g, j] = x[n, h, wc, c0 : c0 + 8] if ok else 0.0
                o = i // sh
                if i % sh == 0 and o < cfg.block_p and p0 + o < p.p:
                    for tt in range(cfg.warps * cfg.block_q):
                        g, j = tt % cfg.warps, tt // cfg.warps
                        c0 = (group0 + g) * 8
                        ok = q0 + j < p.q
                        sdy[ds, g, j] = dy[n, p0 + o, q0 + j, c0 : c0 + 8] if ok else 0.0

            def dy_frag(slot, qc, wp, width, sdy=sdy):
                """B of a k8 (width 1: one register) or k16 (width 2) mma from chunk qc on."""
                mats = [
                    ldmatrix_trans(sdy[slot, wp, 8 * (qc + m) + np.arange(8)]) for m in range(width)
                ]
                return mats[0] if width == 1 else np.stack(mats, axis=1)

            # Prologue: stream positions 0 .. STAGES - 2 into stage k and dy slot k.
            for k in range(cfg.stages - 1):
                if first + k // tile_h < last:
                    load(first + k // tile_h, k % tile_h, k, k)
            xs, xs_free = 0, cfg.stages - 1  # stage of position k, and of k - 1 (refilled)
            ds = [(dyr - r) % dyr for r in range(p.r + 1)]  # slots of positions k .. k - R
            k = 0
            for t in range(first, last):
                _, p0 = task_at(t)
                h0 = p0 * sh - p.pad_h
                dy_inside = min(cfg.block_p, p.p - p0)
                q_chunks = min(cfg.block_q // 8, (p.q - q0 + 7) // 8)
                for i, u, chunked in walk:
                    assert (xs, xs_free) == (k % cfg.stages, (k - 1) % cfg.stages)
                    assert ds == [(k - r) % dyr for r in range(p.r + 1)]
                    ia = i + cfg.stages - 1
                    dt = ia // tile_h
                    assert not (chunked and dt), "a chunked row's copy ahead leaves its task"
                    if t + dt < last:
                        load(t + dt, ia - dt * tile_h, xs_free, ds[p.r])
                    assert (i - u) % sh == 0
                    h = h0 + i
                    # (first 8-column chunk, chunks): pairs by k16, an odd last one by k8
                    steps = [(2 * m, 2) for m in range(q_chunks // 2)]
                    steps += [(q_chunks - 1, 1)] * (q_chunks % 2)
                    for wp in range(cfg.warps):
                        for qc, width in steps:
                            mma = mma_m16n8k16 if width == 2 else mma_m16n8k8
                            if not 0 <= h < p.h:  # padding row: its dy row's bias only
                                if p.has_bias and u % sh == 0 and i // sh < dy_inside:
                                    b = dy_frag(ds[0], qc, wp, width)
                                    mma(acc_b[wp], np.ones((32, 2 * width, 2)), b)
                                    mmas["bias"] += 1
                                continue
                            a = np.zeros((sp, 32, 2 * width, 2))
                            for jj in range(sp):
                                # lanes 8 mi .. 8 mi + 7 address matrix mi: filter column
                                # 2 jj + mi % 2, columns 8 (mi // 2) on
                                for mi in range(2 * width):
                                    q = 8 * (qc + mi // 2) + np.arange(8)
                                    cols = sw * q + 2 * jj + mi % 2
                                    a[jj, :, mi] = ldmatrix_trans(sx[xs, wp, cols])
                            for r in range(p.r):
                                if (u - r) % sh == 0 and i >= r and (i - r) // sh < dy_inside:
                                    b = dy_frag(ds[r], qc, wp, width)
                                    for jj in range(sp):
                                        mma(acc[wp, r, jj], a[jj], b)
                                    mmas["dw"] += sp
                                    if p.has_bias and r == 0:
                                        mma(acc_b[wp], np.ones((32, 2 * width, 2)), b)
                                        mmas["bias"] += 1
                    xs_free, xs = xs, (xs + 1) % cfg.stages
                    ds = [(ds[0] + 1) % dyr, *ds[:-1]]
                    k += 1
            for wp in range(cfg.warps):
                grp = group0 + wp
                for r in range(p.r):
                    for jj in range(sp):
                        for e in range(4):
                            s = 2 * jj + e // 2
                            if s < p.s:
                                dw[grp * 8 + 2 * T + e % 2, G, r, s] += acc[wp, r, jj, :, e]
                for lane in range(4):
                    for e in range(2):
                        db[grp * 8 + 2 * lane + e] += acc_b[wp, lane, e]
    return dw, db, mmas


def useful_mmas(p: Conv2dGw8Params, cfg, dev) -> dict[str, int]:
    """mmas over every warp of every CTA, counted from the dy side: each output row p of a column
    tile times each filter row r whose input row p + r - pad_h is inside the image, per 16-column
    step of the tile's 8-column chunks that start inside Q (a pair, or an odd last one: S_PAIRS
    dw mmas), plus one bias mma per (dy row, step)."""
    chunks = sum(
        math.ceil(min(cfg.block_q // 8, math.ceil((p.q - q0) / 8)) / 2)
        for q0 in range(0, p.q, cfg.block_q)
    )
    taps = sum(
        1 for pp in range(p.p) for r in range(p.r) if 0 <= p.stride_h * pp + r - p.pad_h < p.h
    )
    per_image = {"dw": taps * chunks * wt.s_pairs(p), "bias": p.p * chunks if p.has_bias else 0}
    return {k: v * p.n * p.groups for k, v in per_image.items()}


SHAPES = [
    # 7x7, k7, pad 3: 12 of the 49 (x row, filter row) products multiply padding rows.
    Conv2dGw8Params(n=2, c=16, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, has_bias=True),
    Conv2dGw8Params(n=3, c=8, h=4, w=5, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),  # Q < 8
    Conv2dGw8Params(n=1, c=16, h=10, w=19, r=3, s=5, pad_h=1, pad_w=2, has_bias=True),  # ragged
    Conv2dGw8Params(n=2, c=8, h=5, w=12, r=3, s=2, pad_h=3, pad_w=1, has_bias=True),  # pad > R-1
    Conv2dGw8Params(n=1, c=16, h=9, w=3, r=1, s=1, pad_h=0, pad_w=0),  # Q = 3, no halo, no bias
    Conv2dGw8Params(n=2, c=8, h=11, w=9, r=5, s=3, pad_h=0, pad_w=1, has_bias=True),  # pad 0
    # stride 2: dy row o loads with x row 2o; odd and even sizes, one axis or both
    Conv2dGw8Params(n=2, c=16, h=9, w=19, r=3, s=3, pad_h=1, pad_w=1, has_bias=True, stride_h=2,
                    stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=14, w=10, r=7, s=7, pad_h=3, pad_w=3, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=2, c=8, h=12, w=11, r=5, s=1, pad_h=2, pad_w=0, stride_h=2, has_bias=True),
    Conv2dGw8Params(n=1, c=16, h=6, w=16, r=1, s=3, pad_h=0, pad_w=1, stride_w=2),
]  # fmt: skip


def _cases(p: Conv2dGw8Params, dev, seed: int) -> list[Conv2dGw8WgradConfig]:
    """Sampled configs plus every block_q 8 one's first few (the new narrow tile)."""
    cfgs = wg.configs(p, dev)
    narrow = [c for c in cfgs if c.block_q == 8]
    return list(dict.fromkeys(sample(cfgs, 3, seed=seed) + sample(narrow, 2, seed=seed)))


def _inputs(p, seed: int):
    """Random fp64 x and dy of p (NHWC numpy arrays) and the reference dw, db."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(p.n, p.c, p.h, p.w, generator=g, dtype=torch.float64)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=g, dtype=torch.float64)
    want_w = ref.wgrad(x, dy, (p.r, p.s), p.padding, p.stride).numpy()
    want_b = ref.bias_grad(dy).numpy()
    return x.permute(0, 2, 3, 1).numpy(), dy.permute(0, 2, 3, 1).numpy(), want_w, want_b


def assert_exact(p, cfg, dev, seed, inputs, **kw) -> None:
    """The emulated kernel (`emulate_wgrad(..., **kw)`) gives the fp64 reference's dw and db, and
    issues exactly the useful mmas."""
    xs, dys, want_w, want_b = inputs
    dw, db, mmas = emulate_wgrad(xs, dys, p, cfg, dev, **kw)
    where = f"{p} {cfg} {kw} seed={seed}"
    np.testing.assert_allclose(dw, want_w, rtol=1e-9, atol=1e-9, err_msg=where)
    if p.has_bias:
        np.testing.assert_allclose(db, want_b, rtol=1e-9, atol=1e-9, err_msg=where)
    assert mmas == useful_mmas(p, cfg, dev), where


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_wgrad_skips_give_the_exact_gradient(p, seed):
    dev = known_device("H100")
    inputs = _inputs(p, seed)
    for cfg in _cases(p, dev, seed):
        assert_exact(p, cfg, dev, seed, inputs)


def test_wgrad_streams_several_tasks_with_skips(seed):
    """A 1-SM device: every split streams several tasks, so padding rows of one task sit between
    rows of the next in the same pipeline."""
    p = SHAPES[0]
    dev = replace(known_device("H100"), sm_count=1)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(p.n, p.c, p.h, p.w, generator=g, dtype=torch.float64)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=g, dtype=torch.float64)
    want_w = ref.wgrad(x, dy, (p.r, p.s), p.padding).numpy()
    cfgs = [c for c in wg.configs(p, dev) if wt.split_plan(p, c, dev)[1] > 1 and c.block_p < 7]
    assert cfgs, f"no config of {p} streams several tasks per split"
    for cfg in sample(cfgs, 2, seed=seed):
        dw, _, mmas = emulate_wgrad(
            x.permute(0, 2, 3, 1).numpy(), dy.permute(0, 2, 3, 1).numpy(), p, cfg, dev
        )
        np.testing.assert_allclose(dw, want_w, rtol=1e-9, atol=1e-9, err_msg=f"{cfg}")
        assert mmas == useful_mmas(p, cfg, dev), f"{cfg}"


def test_dead_work_at_7x7_k7():
    """The numbers the skips were made for: at 7x7, k7, pad 3 a warp issues 37 (not 49) row
    products of one 8-column chunk (not two of a 16-column tile) per image, and streams 10 of
    the 13 rows of a whole-image task."""
    p = Conv2dGw8Params(n=1, c=8, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3)
    cfg = Conv2dGw8WgradConfig(block_p=7, block_q=8, warps=1, stages=4, splits_per_sm=4)
    assert useful_mmas(p, cfg, known_device("H100"))["dw"] == 37 * 1 * wt.s_pairs(p)
    assert cfg in wg.configs(p, known_device("H100"))
    assert wt.task_rows(p, cfg) == 10  # rows 10-12 (image rows 7-9) are trailing padding
    two_chunks = Conv2dGw8WgradConfig(block_p=4, block_q=8, warps=1, stages=4, splits_per_sm=1)
    assert wt.task_rows(p, two_chunks) == 4 + 7 - 1  # chunks start at different rows: no trim


def test_row_walk_matches_the_kernel():
    """Each task row once, in order; chunk rows start at multiples of STEP_ROWS (the kernel's
    constant, read from its source) and their copies ahead stay in the task."""
    from pathlib import Path

    import spio

    src = (Path(spio.__file__).parent / "src" / "conv2d_gw8_wgrad.cu").read_text()
    assert f"constexpr int STEP_ROWS = {STEP_ROWS};" in src
    for tile_h in range(1, 70):
        for stages in (2, 3, 4, 6, 8):
            walk = row_walk(tile_h, stages, wg.MAX_TASK_ROWS)
            assert [i for i, _, _ in walk] == list(range(tile_h))
            chunked = [i for i, _, c in walk if c]
            assert all(i + stages - 1 < tile_h for i in chunked)
            assert all(i - u in (0, *range(0, tile_h, STEP_ROWS)) for i, u, _ in walk)
            assert len(walk) - len(chunked) <= max(wg.MAX_TASK_ROWS, STEP_ROWS + stages - 2)


# Tasks longer than MAX_TASK_ROWS rows (28 and 14 row tasks at stride 1 and 2, 5x5 at 30 rows).
TALL_SHAPES = [
    Conv2dGw8Params(n=1, c=8, h=28, w=9, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=2, c=16, h=28, w=6, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=1, c=8, h=27, w=5, r=5, s=3, pad_h=2, pad_w=1, has_bias=True),
]  # fmt: skip


@pytest.mark.parametrize("p", SHAPES + TALL_SHAPES, ids=str)
def test_chunked_row_walk_gives_the_exact_gradient(p, seed):
    """The chunked walk of long tasks (every task chunked wherever it has enough rows:
    max_task_rows 0), with the TALL_SHAPES' whole-task walk beside it."""
    dev = known_device("H100")
    inputs = _inputs(p, seed)
    cfgs = wg.configs(p, dev)
    tall = [c for c in cfgs if wt.task_rows(p, c) > wg.MAX_TASK_ROWS]
    for cfg in dict.fromkeys(sample(cfgs, 2, seed=seed) + sample(tall, 2, seed=seed)):
        for max_rows in (0, wg.MAX_TASK_ROWS):
            assert_exact(p, cfg, dev, seed, inputs, max_task_rows=max_rows)
