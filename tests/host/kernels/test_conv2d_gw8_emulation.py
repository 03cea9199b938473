"""Lane-level emulation of the conv2d_gw8 kernels on the host, against PyTorch.

The CI machine has no GPU, so this file replays the index logic of spio/src/conv2d_gw8_fprop.cu
and conv2d_gw8_wgrad.cu statement by statement in numpy: the block -> tile mapping, the cp.async
row loads with zero fill, the shared-memory stage and dy rings, the accumulator ring of the
overlap-add, the mma.m16n8k8 and ldmatrix(.trans) fragment layouts of the PTX ISA (the same
tables spio/include/spio/fragment.h implements), the epilogue's fragment -> (pixel, channel)
mapping, the split plan and the ordered reduction. A wrong offset, ring slot or fragment index
in the design shows up here as a mismatch with F.conv2d (or an IndexError on shared memory).
It does not replace the GPU tests (tests/gpu/kernels/test_conv2d_gw8.py), which run the real code.
The wgrad copy here predates the kernel's dead-work skips (skipped work is exact zeros, so it
still matches); it is kept for the split plan, the partial layout and the reduction order.
test_conv2d_gw8_wgrad_emulation.py mirrors the current wgrad kernel, skips included.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from spio.cuda import known_device
from spio.kernels.conv2d_gw8 import fprop as fp
from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8 import wgrad_tiling as wt
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
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


def ldmatrix_trans(rows):
    """One 8x8 matrix from 8 row vectors (rows[8, 8], from lanes 8i..8i+7), transposed:
    lane gets (M[2t][g], M[2t + 1][g])."""
    return np.stack([rows[2 * T, G], rows[2 * T + 1, G]], axis=1)


def emulate_fprop(x, w, b, p: Conv2dGw8Params, cfg, transposed: bool = False):
    """x (N, H, W, C), w (C, 8, R, S), b (C,) or None -> y (N, P, Q, C), as the fprop kernel.
    `transposed`: the dgrad variant (TRANSPOSED_WEIGHT), which reads w[g8 + c, k, R-1-r, S-1-s]."""
    y = np.full((p.n, p.p, p.q, p.c), np.nan)
    n_p, n_q = math.ceil(p.p / cfg.block_p), math.ceil(p.q / cfg.block_q)
    n_g = fp.group_blocks(p, cfg)  # the last block has idle warps when warps doesn't divide
    tile_h, tile_w, mt = fp.tile_h(p, cfg), fp.tile_w(p, cfg), fp.m_tiles(cfg)
    phased = fp.phased(p, cfg)
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilate_h, p.dilate_w
    ring, unroll = p.ring, p.stride_h * p.ring
    # The kernel's STEP_ROWS and step_mod: rows per main-loop step, and (i0 + u) mod n there.
    both = math.lcm(unroll, cfg.stages, 2)
    step = both if both <= fp.MAX_STEP_ROWS else unroll

    def step_mod(i0, u, n):
        return u % n if step % n == 0 else (i0 + u) % n

    def ring_slot(d):  # the kernel's ring_slot (d a multiple of the stride)
        return (d // sh) % ring

    def tile_col(m, g):  # the kernel's tile_col: output column of fragment row g of M tile m
        return 32 * (m // 2) + 2 * g + m % 2 if phased else 16 * m + g

    def zero_tap(m, s):  # the kernel's zero_tap: PHASED tile m's tap s reads zero columns only
        return phased and (m % 2 + s - p.pad_w) % 2 != 0

    imgs = fp.images(cfg)
    # smem column of fragment rows 8-15 relative to 0-7
    a_hi = tile_w if imgs == 2 else 8 * sw * (2 if phased else 1)
    for n0 in range(0, p.n, imgs):  # blockIdx.y = n / IMAGES
        images = min(imgs, p.n - n0)
        n = n0
        for blk in range(n_p * n_q * n_g):  # CompoundIndex(PB, QB, GB), row-major
            pb, qb, gb = blk // (n_q * n_g), (blk // n_g) % n_q, blk % n_g
            p0, q0, group0 = pb * cfg.block_p, qb * cfg.block_q, gb * cfg.warps
            # NaN until loaded: reading a column or stage the kernel never filled shows up.
            smem = np.full((cfg.stages, cfg.warps, imgs * tile_w, 8), np.nan)
            reg_w = np.zeros((cfg.warps, 32, p.r, p.s, 2))
            for wp in range(cfg.warps):
                if group0 + wp >= p.groups:
                    continue  # an idle warp: its registers are never used
                k = (group0 + wp) * 8 + G
                for h in range(2):
                    if transposed:
                        c = (group0 + wp) * 8 + 2 * T + h
                        reg_w[wp, :, :, :, h] = w[c, G][:, ::-1, ::-1]
                    else:
                        reg_w[wp, :, :, :, h] = w[k, 2 * T + h]
            acc = np.zeros((cfg.warps, ring, mt, 32, 4))

            def load(i, stage, p0=p0, q0=q0, group0=group0, n=n, smem=smem, images=images):
                v = p0 * sh - p.pad_h + i
                h = v // dh
                row_inside = v >= 0 and v % dh == 0 and h < p.h
                for t in range(cfg.warps * imgs * tile_w):
                    g, j = t % cfg.warps, t // cfg.warps
                    img, jj = divmod(j, tile_w) if imgs == 2 else (0, j)
                    wv = q0 * sw - p.pad_w + jj
                    wc = wv // dw
                    if phased and wv % 2:
                        continue  # PHASED: the dilation's zero columns are never filled (NaN)
                    inside = row_inside and wv >= 0 and wv % dw == 0 and wc < p.w and img < images
                    inside = inside and group0 + g < p.groups  # no channels past the last group
                    c0 = (group0 + g) * 8
                    smem[stage, g, j] = x[n + img, h, wc, c0 : c0 + 8] if inside else 0.0

            out = np.full((2, cfg.warps, 16 * mt, 8), np.nan)  # staged output rows

            def write_row(pp, buf, n=n, q0=q0, group0=group0, out=out, images=images):
                for t in range(cfg.warps * 16 * mt):
                    g, j = t % cfg.warps, t // cfg.warps
                    img, q = divmod(j, 8) if imgs == 2 else (0, q0 + j)
                    if q < p.q and img < images and group0 + g < p.groups:
                        c0 = (group0 + g) * 8
                        y[n + img, pp, q, c0 : c0 + 8] = out[buf, g, j]

            for i in range(cfg.stages - 1):
                if i < tile_h:
                    load(i, i)
            pending_p, pending_buf = -1, 0
            for i0 in range(0, tile_h, step):
                for u in range(step):
                    i = i0 + u
                    if i >= tile_h:
                        continue
                    if pending_p >= 0:
                        write_row(pending_p, pending_buf)
                    nxt = i + cfg.stages - 1
                    if nxt < tile_h:
                        load(nxt, step_mod(i0, u + cfg.stages - 1, cfg.stages))
                    stage = step_mod(i0, u, cfg.stages)
                    v = p0 * sh - p.pad_h + i
                    row_real = v >= 0 and v % dh == 0 and v // dh < p.h
                    rows = min(cfg.block_p, p.p - p0)
                    live = [
                        row_real and (u - r) % sh == 0 and i - r >= 0 and (i - r) // sh < rows
                        for r in range(p.r)
                    ]
                    for wp in range(cfg.warps):
                        if group0 + wp >= p.groups:
                            continue  # an idle warp multiplies nothing
                        for s in range(p.s):
                            for m in range(mt):
                                if zero_tap(m, s):
                                    continue
                                col = sw * tile_col(m, G) + s
                                words = [
                                    smem[stage, wp, c, :].reshape(32, 4, 2)[LANES, T]
                                    for c in (col, col + a_hi)
                                ]  # fragment rows g and g + 8
                                a = np.stack(words, axis=1)
                                for r in range(p.r):
                                    if live[r]:  # skipped products: padding row or dead output
                                        mma_m16n8k8(
                                            acc[wp, ring_slot(u - r), m], a, reg_w[wp, :, r, s]
                                        )
                    pending_p = -1
                    if (u - (p.r - 1)) % sh:
                        continue  # no output row completes at this input row
                    d = i - (p.r - 1)
                    j, slot = d // sh, ring_slot(u - (p.r - 1))
                    valid = d >= 0 and p0 + j < p.p
                    for wp in range(cfg.warps):
                        if valid and group0 + wp < p.groups:
                            for m in range(mt):
                                for half in range(2):
                                    q = tile_col(m, G + 8 * half)  # column within the tile
                                    ch = (group0 + wp) * 8 + 2 * T
                                    for e in range(2):
                                        v = acc[wp, slot, m, :, 2 * half + e]
                                        v = v + (b[ch + e] if b is not None else 0.0)
                                        out[step_mod(i0, u, 2), wp, q, 2 * T + e] = v
                        acc[wp, slot] = 0.0
                    pending_p, pending_buf = (p0 + j if valid else -1), step_mod(i0, u, 2)
            if pending_p >= 0:
                write_row(pending_p, pending_buf)
    return y


def emulate_wgrad(x, dy, p: Conv2dGw8Params, cfg, dev):
    """x (N, H, W, C), dy (N, P, Q, C) -> (dw (C, 8, R, S), db (C,)), as wgrad + reduce."""
    tasks, tps, splits = wt.split_plan(p, cfg, dev)
    n_q, n_g = wt.q_tiles(p, cfg), wt.group_blocks(p, cfg)  # the last may have idle warps
    sp, tile_w, dyr = wt.s_pairs(p), wt.tile_w(p, cfg), wt.dy_rows(p, cfg)
    tile_h, chunks = cfg.block_p + p.r - 1, wt.p_chunks(p, cfg)
    slices = splits * n_q
    partial = np.full((slices, p.c, 8, p.r, p.s), np.nan)
    bias_partial = np.full((slices, p.c), np.nan)
    for split in range(splits):
        for blk in range(n_q * n_g):
            qb, gb = blk // n_g, blk % n_g
            q0, group0 = qb * cfg.block_q, gb * cfg.warps
            slice_ = split * n_q + qb
            acc = np.zeros((cfg.warps, p.r, sp, 32, 4))
            acc_b = np.zeros((cfg.warps, 32, 4))
            sx = np.full((cfg.stages, cfg.warps, tile_w, 8), np.nan)
            sdy = np.full((dyr, cfg.warps, cfg.block_q, 8), np.nan)
            first, last = split * tps, min(split * tps + tps, tasks)
            stream_rows = max(last - first, 0) * tile_h  # the split's rows as one stream

            def load(k, first=first, q0=q0, group0=group0, sx=sx, sdy=sdy):
                task, i = first + k // tile_h, k % tile_h
                n, p0 = task // chunks, (task % chunks) * cfg.block_p
                h = p0 - p.pad_h + i
                for t in range(cfg.warps * tile_w):
                    g, j = t % cfg.warps, t // cfg.warps
                    if group0 + g >= p.groups:
                        continue  # an idle warp's plane is never filled (nor read)
                    wc = q0 - p.pad_w + j
                    c0 = (group0 + g) * 8
                    ok = 0 <= h < p.h and 0 <= wc < p.w
                    sx[k % cfg.stages, g, j] = x[n, h, wc, c0 : c0 + 8] if ok else 0.0
                if i < cfg.block_p:
                    for t in range(cfg.warps * cfg.block_q):
                        g, j = t % cfg.warps, t // cfg.warps
                        if group0 + g >= p.groups:
                            continue
                        c0 = (group0 + g) * 8
                        ok = p0 + i < p.p and q0 + j < p.q
                        sdy[k % dyr, g, j] = dy[n, p0 + i, q0 + j, c0 : c0 + 8] if ok else 0.0

            for k in range(cfg.stages - 1):
                if k < stream_rows:
                    load(k)
            for k in range(stream_rows):
                if k + cfg.stages - 1 < stream_rows:
                    load(k + cfg.stages - 1)
                i = k % tile_h
                for wp in range(cfg.warps):
                    if group0 + wp >= p.groups:
                        continue  # an idle warp multiplies nothing
                    for qc in range(cfg.block_q // 8):
                        a = np.zeros((sp, 32, 2, 2))
                        for jj in range(sp):
                            for mi in range(2):  # lanes 8 mi .. 8 mi + 7 address matrix mi
                                cols = 8 * qc + 2 * jj + mi + np.arange(8)
                                a[jj, :, mi] = ldmatrix_trans(sx[k % cfg.stages, wp, cols])
                        for r in range(p.r):
                            row = i - r
                            if 0 <= row < cfg.block_p:
                                cols = 8 * qc + np.arange(8)
                                bfrag = ldmatrix_trans(sdy[(k - r) % dyr, wp, cols])
                                for jj in range(sp):
                                    mma_m16n8k8(acc[wp, r, jj], a[jj], bfrag)
                                if p.has_bias and r == 0:
                                    mma_m16n8k8(acc_b[wp], np.ones((32, 2, 2)), bfrag)
            for wp in range(cfg.warps):
                grp = group0 + wp
                if grp >= p.groups:
                    continue  # nor writes a partial
                for r in range(p.r):
                    for jj in range(sp):
                        for e in range(4):
                            s = 2 * jj + e // 2
                            if s < p.s:
                                k = grp * 8 + 2 * T + e % 2
                                partial[slice_, k, G, r, s] = acc[wp, r, jj, :, e]
                for lane in range(4):
                    for e in range(2):
                        bias_partial[slice_, grp * 8 + 2 * lane + e] = acc_b[wp, lane, e]
    dw = np.zeros((p.c, 8, p.r, p.s))
    db = np.zeros(p.c)
    # The reduce kernel's order: runs of ceil(slices / parts) slices, each ascending, then the
    # runs ascending (parts = warps of the CTA the op launches for this slice count).
    parts = rd.parts(rd.config_for(slices))
    per_part = -(-slices // parts)
    for k in range(parts):
        run_w, run_b = np.zeros_like(dw), np.zeros_like(db)
        for s_ in range(k * per_part, min(slices, (k + 1) * per_part)):
            run_w += partial[s_]
            run_b += bias_partial[s_]
        dw += run_w
        db += run_b
    return dw, db


SHAPES = [
    Conv2dGw8Params(n=2, c=16, h=5, w=19, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=1, c=8, h=6, w=9, r=2, s=5, pad_h=0, pad_w=2, has_bias=False),
    Conv2dGw8Params(n=2, c=32, h=4, w=17, r=5, s=1, pad_h=2, pad_w=0, has_bias=True),
    Conv2dGw8Params(n=1, c=16, h=3, w=33, r=1, s=7, pad_h=0, pad_w=3, has_bias=True),
    # padding beyond R - 1: the dgrad problem has negative padding (the kernel crops)
    Conv2dGw8Params(n=1, c=16, h=5, w=6, r=3, s=2, pad_h=3, pad_w=2, has_bias=True),
]
# Q <= 8 with an odd batch: two images per CTA (block_q 8), the last CTA's second image masked.
PACKED_SHAPES = [
    Conv2dGw8Params(n=3, c=16, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, has_bias=True),
    Conv2dGw8Params(n=3, c=8, h=4, w=8, r=3, s=2, pad_h=1, pad_w=0),
]


# Stride 2 (one axis or both; odd and even input sizes): the forward kernel's output rows in a
# ring of ceil(R / 2), and its dgrad on dy dilated by 2 with end padding.
STRIDED_SHAPES = [
    Conv2dGw8Params(n=2, c=16, h=9, w=19, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=10, w=8, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=1, c=16, h=11, w=13, r=5, s=3, pad_h=2, pad_w=0, stride_h=2, stride_w=1),
    Conv2dGw8Params(n=2, c=8, h=8, w=15, r=1, s=7, pad_h=0, pad_w=3, stride_h=1, stride_w=2),
    Conv2dGw8Params(n=3, c=8, h=14, w=14, r=7, s=7, pad_h=3, pad_w=3, stride_h=2, stride_w=2),
]  # fmt: skip


# dgrad of stride 2 in W on an even number of M tiles (PHASED: tiles paired by column parity,
# the dilation's zero columns never filled, so a read of one would bring NaN): every parity of
# the dgrad padding (S - 1 - pad = 2, 0, 1, and -1: pad > S - 1 crops), a ragged last tile,
# stride (1, 2).
PHASED_SHAPES = [
    Conv2dGw8Params(n=1, c=8, h=5, w=47, r=3, s=5, pad_h=1, pad_w=2, stride_h=2, stride_w=2,
                    has_bias=True),
    Conv2dGw8Params(n=1, c=16, h=6, w=37, r=3, s=3, pad_h=2, pad_w=2, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=2, c=8, h=4, w=40, r=2, s=2, pad_h=0, pad_w=0, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=3, w=36, r=1, s=3, pad_h=0, pad_w=1, stride_h=1, stride_w=2),
    Conv2dGw8Params(n=1, c=8, h=5, w=40, r=3, s=3, pad_h=1, pad_w=3, stride_h=2, stride_w=2),
]  # fmt: skip
# Odd channel-group counts on CTAs with idle warps in the last group block (RAGGED_GROUPS).
RAGGED_SHAPES = [
    Conv2dGw8Params(n=1, c=40, h=5, w=9, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=2, c=56, h=6, w=7, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=1, c=104, h=4, w=34, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2,
                    has_bias=True),
]  # fmt: skip


# Odd group counts at stride 1 (the wgrad emulator's stride): 2- and 4-warp wgrad CTAs with idle
# warps in the last group block.
RAGGED_WGRAD_SHAPES = [
    Conv2dGw8Params(n=2, c=56, h=6, w=9, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=1, c=40, h=5, w=7, r=3, s=2, pad_h=1, pad_w=0, has_bias=True),
]


def _inputs(p: Conv2dGw8Params, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(p.n, p.c, p.h, p.w, generator=g, dtype=torch.float64)
    w = torch.randn(p.c, 8, p.r, p.s, generator=g, dtype=torch.float64)
    b = torch.randn(p.c, generator=g, dtype=torch.float64) if p.has_bias else None
    return x, w, b


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(0, 2, 3, 1).numpy()


def _check_fprop(p: Conv2dGw8Params, cfgs, seed: int) -> None:
    """emulate_fprop of each config against the fp64 reference of the same inputs."""
    assert cfgs, f"{p}: no config to check"
    x, w, b = _inputs(p, seed)
    want = _nhwc(ref.fprop(x, w, b, p.padding, p.stride))
    for cfg in cfgs:
        got = emulate_fprop(_nhwc(x), w.numpy(), None if b is None else b.numpy(), p, cfg)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")


def _check_dgrad(p: Conv2dGw8Params, cfgs, seed: int) -> None:
    """The dgrad variant (the fprop kernel on dy, reading the forward weight transposed and
    rotated) of each config against the fp64 input gradient."""
    assert cfgs, f"dgrad {p}: no config to check"
    _, w, _ = _inputs(p, seed)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=torch.Generator().manual_seed(seed + 1),
                     dtype=torch.float64)  # fmt: skip
    want = _nhwc(ref.dgrad(dy, w, (p.h, p.w), p.padding, p.stride))
    q = p.dgrad_as_fprop()
    assert (q.p, q.q) == (p.h, p.w)
    for cfg in cfgs:
        got = emulate_fprop(_nhwc(dy), w.numpy(), None, q, cfg, transposed=True)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=f"dgrad {p} {cfg}")


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_fprop_and_dgrad_emulation(p, seed):
    dev = known_device("H100")
    _check_fprop(p, sample(fp.configs(p, dev), 3, seed=seed), seed)
    _check_dgrad(p, sample(fp.dgrad_configs(p, dev), 2, seed=seed), seed)


@pytest.mark.parametrize("p", STRIDED_SHAPES, ids=str)
def test_strided_fprop_and_dgrad_emulation(p, seed):
    dev = known_device("H100")
    _check_fprop(p, sample(fp.configs(p, dev), 3, seed=seed), seed)
    _check_dgrad(p, sample(fp.dgrad_configs(p, dev), 3, seed=seed), seed)


@pytest.mark.parametrize("p", SHAPES, ids=str)
def test_wgrad_emulation(p, seed):
    dev = known_device("H100")
    x, _, _ = _inputs(p, seed)
    dy = torch.randn(p.n, p.c, p.p, p.q, dtype=torch.float64)
    want_w = ref.wgrad(x, dy, (p.r, p.s), p.padding).numpy()
    want_b = ref.bias_grad(dy).numpy()
    for cfg in sample(wg.configs(p, dev), 3, seed=seed):
        dw, db = emulate_wgrad(_nhwc(x), _nhwc(dy), p, cfg, dev)
        np.testing.assert_allclose(dw, want_w, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")
        if p.has_bias:
            np.testing.assert_allclose(db, want_b, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")


@pytest.mark.parametrize("p", SHAPES[:2], ids=str)
def test_wgrad_emulation_streams_across_tasks(p, seed):
    """On a 1-SM device every split runs several (image, row-chunk) tasks: the kernel streams their
    rows as one pipeline (x stages and dy ring indexed by stream position), which must still
    give the exact weight gradient. One split per SM (the space gives 1-warp CTAs 4 or more, so
    the configs are made from the space's with it)."""
    dev = replace(known_device("H100"), sm_count=1)
    x, _, _ = _inputs(p, seed)
    dy = torch.randn(p.n, p.c, p.p, p.q, dtype=torch.float64)
    want_w = ref.wgrad(x, dy, (p.r, p.s), p.padding).numpy()
    one = {replace(c, splits_per_sm=1) for c in wg.configs(p, dev)}
    cfgs = [c for c in sorted(one, key=str) if wt.split_plan(p, c, dev)[1] > 1]
    assert cfgs, f"no config runs several tasks per split for {p}"
    for cfg in sample(cfgs, 3, seed=seed):
        dw, _ = emulate_wgrad(_nhwc(x), _nhwc(dy), p, cfg, dev)
        np.testing.assert_allclose(dw, want_w, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")


@pytest.mark.parametrize("p", PACKED_SHAPES, ids=str)
def test_two_images_per_cta_emulation(p, seed):
    dev = known_device("H100")
    packed = [c for c in fp.configs(p, dev) if fp.images(c) == 2]
    assert packed, f"{p}: Q <= 8 must offer block_q 8"
    _check_fprop(p, sample(packed, 3, seed=seed), seed)
    packed = [c for c in fp.dgrad_configs(p, dev) if fp.images(c) == 2]
    _check_dgrad(p, sample(packed, 2, seed=seed), seed)


@pytest.mark.parametrize("p", PHASED_SHAPES, ids=str)
def test_phased_dgrad_emulation(p, seed):
    dev = known_device("H100")
    phased = [c for c in fp.dgrad_configs(p, dev) if fp.phased(p.dgrad_as_fprop(), c)]
    _check_dgrad(p, sample(phased, 3, seed=seed), seed)


@pytest.mark.parametrize("p", RAGGED_SHAPES, ids=str)
def test_ragged_group_blocks_emulation(p, seed):
    dev = known_device("H100")
    _check_fprop(
        p, sample([c for c in fp.configs(p, dev) if p.groups % c.warps], 3, seed=seed), seed
    )
    ragged = [c for c in fp.dgrad_configs(p, dev) if p.groups % c.warps]
    _check_dgrad(p, sample(ragged, 3, seed=seed), seed)


@pytest.mark.parametrize("p", RAGGED_WGRAD_SHAPES, ids=str)
def test_ragged_group_blocks_wgrad_emulation(p, seed):
    """wgrad CTAs of 2 or 4 warps at odd group counts (in the default space, none with
    `configs(..., with_idle_warps=False)`):
    the idle warps of the last group block copy, multiply and write nothing, and every real
    group's partial is written (the emulator's partials start as NaN)."""
    dev = known_device("H100")
    x, _, _ = _inputs(p, seed)
    dy = torch.randn(p.n, p.c, p.p, p.q, dtype=torch.float64)
    want_w = ref.wgrad(x, dy, (p.r, p.s), p.padding).numpy()
    want_b = ref.bias_grad(dy).numpy()
    assert not [c for c in wg.configs(p, dev, with_idle_warps=False) if p.groups % c.warps]
    ragged = [c for c in wg.configs(p, dev) if p.groups % c.warps]
    assert ragged, f"{p}: no wgrad config with idle warps"
    for cfg in sample(ragged, 3, seed=seed):
        dw, db = emulate_wgrad(_nhwc(x), _nhwc(dy), p, cfg, dev)
        np.testing.assert_allclose(dw, want_w, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")
        np.testing.assert_allclose(db, want_b, rtol=1e-9, atol=1e-9, err_msg=f"{p} {cfg}")
