"""Hopper matmul kernel (spio/src/matmul_sm90.cu) on an sm_90 GPU: every config against an fp64
reference from the same fp16/bf16 inputs.

Each launch writes into a NaN-poisoned C inside a NaN guard band (unwritten or out-of-bounds
stores fail), on ragged shapes (M and N not multiples of any tile, odd N for the unpaired
stores, K not a multiple of the 64-deep k tile), K from one 8-element chunk to many k tiles,
bias and fp32 output. Shapes are runtime arguments: each (config, flags) compiles once.
Clusters (cluster_m 2) run every shape too; M with an odd number of 128-row tiles (1, 3, 9)
makes the padded CTA of the last cluster compute on zero-filled A and store nothing, while its
peer still needs its half of B. Persistent configs (every one of `configs()`) run every shape,
and shapes with several tiles per CTA: more tiles than the grid, a tile count that is not a
multiple of it (some CTAs walk one tile more), K of a single k tile (the ring turns over tile
by tile) and of several. Where C's rows are whole 16-byte units (N = 128, 264, 1000 here, and
the aligned N of the persistent and cluster tests) the 128- and 256-wide configs store C by TMA
from shared memory (`stores_by_tma`: its staging buffers alternate across a persistent CTA's
tiles, its boxes clipped at M and N, a padded cluster CTA's boxes wholly past M); elsewhere, and
for a C one element off (`test_output_not_two_element_aligned`), from registers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from spio.kernels import matmul as mm
from spio.kernels import matmul_sm90 as k90
from spio.kernels.matmul import MatmulParams
from spio.testing import assert_close, poison, tolerance

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 8), (128, 128, 64), (17, 33, 24), (255, 1000, 72), (1000, 257, 1032),
          (130, 264, 4096)]  # fmt: skip
# (dtype, fp32 out, bias): every flag on and off.
FLAG_SETS = [("float16", False, False), ("bfloat16", True, True), ("float16", True, True),
             ("bfloat16", False, False)]  # fmt: skip
GUARD = 64  # elements of NaN before and after C
# The tests that sweep the whole space ran 120-330 s each under 14 workers on an H200 (twentieth
# session), past a 280 s `--timeout`: theirs, whatever the command line says.
SWEEP_TIMEOUT_S = 900


def _device():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _params(flags, m, n, k, b_transposed=True) -> MatmulParams:
    dtype, fp32_out, bias = flags
    out = "float32" if fp32_out else dtype
    return MatmulParams(m, n, k, dtype, out, b_transposed=b_transposed, has_bias=bias)


def _skip_unless_hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma and TMA)")


def check(
    p: MatmulParams, cfg: k90.MatmulSm90Config, seed: int, shift: int = 0, bias_shift: int = 0
) -> None:
    """Launches (p, cfg) once on fresh random inputs and compares with the fp64 reference;
    `shift` moves C by that many elements (an odd shift: C not 2-element aligned), `bias_shift`
    the bias likewise. With `cfg.a_transposed` A is drawn as its transpose's storage (K, M) and
    the kernel reads that."""
    g = torch.Generator("cuda").manual_seed(seed)
    dt, out_dt = getattr(torch, p.dtype), getattr(torch, p.out_dtype)
    a_shape = (p.k, p.m) if cfg.a_transposed else (p.m, p.k)
    a_store = torch.randn(*a_shape, generator=g, device="cuda").to(dt)
    a = a_store.t() if cfg.a_transposed else a_store
    b = torch.randn(*p.b_shape, generator=g, device="cuda").to(dt)
    bias = None
    if p.has_bias:
        bias = torch.randn(bias_shift + p.n, generator=g, device="cuda").to(dt)[bias_shift:]
    start = GUARD + shift
    buf = poison(torch.empty(start + p.m * p.n + GUARD, dtype=out_dt, device="cuda"))
    c = buf[start : start + p.m * p.n].view(p.m, p.n)
    k90.launch(p, cfg, c, a_store, b, bias, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    where = f"{p} {cfg} seed={seed}"
    guard = torch.cat([buf[:start], buf[start + p.m * p.n :]])
    assert torch.isnan(guard).all(), f"{where}: stores outside C (guard band overwritten)"
    want = mm.reference(a, b, bias, p.b_transposed)
    assert_close(c, want, tolerance(out_dt, depth=p.k), where=where)


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
@pytest.mark.parametrize("flags", FLAG_SETS, ids=str)
def test_every_config_on_every_shape(flags, seed):
    _skip_unless_hopper()
    # The split-tail configs run the plain variant on these few tiles (test_split_tail_*).
    cfgs = [c for c in k90.configs(_params(flags, 1, 1, 8), _device()) if not c.tail]
    assert len(cfgs) >= 10, cfgs
    for cfg in cfgs:
        for m, n, kk in SHAPES:
            check(_params(flags, m, n, kk), cfg, seed)


# A row-major (K, N) B: N a multiple of 8 (its rows start 16-byte aligned; the op pads), M and
# N ragged against every tile, K from one chunk to many k tiles.
ROW_MAJOR_SHAPES = [(1, 8, 8), (128, 128, 64), (17, 40, 24), (255, 1000, 72), (1000, 264, 1032),
                    (130, 264, 4096), (300, 136, 200)]  # fmt: skip


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
@pytest.mark.parametrize("flags", FLAG_SETS, ids=str)
def test_row_major_b_every_config_on_every_shape(flags, seed):
    """B stored (K, N) row-major, read N-major (wgmma's transposed-B mode, 64 x 64 boxes):
    every config (no clusters) on ragged shapes, against fp64."""
    _skip_unless_hopper()
    cfgs = [c for c in k90.configs(_params(flags, 1, 8, 8, False), _device()) if not c.tail]
    assert cfgs and all(c.cluster_m == 1 for c in cfgs), cfgs
    for cfg in cfgs:
        for m, n, kk in ROW_MAJOR_SHAPES:
            check(_params(flags, m, n, kk, b_transposed=False), cfg, seed)


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
@pytest.mark.parametrize("flags", FLAG_SETS[:2], ids=str)
def test_transposed_a_every_config(flags, seed):
    """A given as its transpose's storage (K, M), read M-major (wgmma's transposed-A mode, 64 x 64
    boxes, each consumer warpgroup its own block): every config without clusters, B either way,
    M a multiple of 8 and ragged against the tiles, against fp64."""
    _skip_unless_hopper()
    for bt in (True, False):
        for cfg in k90.configs(_params(flags, 8, 8, 8, bt), _device()):
            # Tails: test_split_tail_every_config; swapped configs read A K-major only.
            if cfg.cluster_m > 1 or cfg.tail or cfg.swap_ab:
                continue
            for m, n, kk in ((8, 8, 8), (136, 264, 72), (1000, 136, 200), (264, 40, 1032)):
                check(_params(flags, m, n, kk, bt), replace(cfg, a_transposed=True), seed)


def test_rasterization_covers_every_tile(seed):
    """raster 1, 3 (not dividing the M tiles) and 8 over a grid of 9 x 5 tiles, plain and in
    clusters of two (9 M tiles: 5 pairs, the last CTA padded)."""
    _skip_unless_hopper()
    for persistent in (False, True):
        for cluster_m in k90.CLUSTER_MS:
            for raster in (1, 3, 8):
                cfg = k90.MatmulSm90Config(
                    128, 4, raster=raster, cluster_m=cluster_m, persistent=persistent
                )
                check(_params(FLAG_SETS[0], 9 * 128 - 5, 5 * 128 - 3, 136), cfg, seed)


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
def test_persistent_ctas_walk_several_tiles(seed):
    """Every persistent config on 3 N tiles by enough M tiles for about 2.3 tiles a CTA (the
    tile count, 3 x tiles_m or pairs, not a multiple of the grid), K of one k tile and of five,
    ragged M and N; bias and fp32 output on the second flag set."""
    _skip_unless_hopper()
    dev = _device()
    for flags, bt in ((FLAG_SETS[0], True), (FLAG_SETS[1], True), (FLAG_SETS[1], False)):
        for cfg in k90.configs(_params(flags, 1, 1, 8, bt), dev):
            if not cfg.persistent:
                continue
            big = _params(flags, 1 << 16, 1 << 16, 8)
            ctas = k90.grid(big, cfg, dev)[0]  # the most CTAs this config launches
            tiles_m = -(-(7 * ctas) // 9)  # by 3 N tiles: ~2.3 tiles a CTA
            # N odd: C stored from registers; 3 block_n - 8 (a multiple of 8): by TMA (128-,
            # 256-wide tiles).
            # A row-major B needs N % 8 == 0: the second only.
            for n in (3 * cfg.block_n - 5, 3 * cfg.block_n - 8)[0 if bt else 1 :]:
                p = _params(flags, tiles_m * k90.BLOCK_M - 3, n, 8, bt)
                grid = k90.grid(p, cfg, dev)[0]
                tiles = k90.grid(p, replace(cfg, persistent=False), dev)[0]
                assert grid == ctas and tiles > 2 * grid and tiles % grid != 0, (cfg, grid, tiles)
                for kk in (24, 5 * 64 - 8):
                    check(replace(p, k=kk), cfg, seed)


def test_persistent_smallest_tile_on_1000_square(seed):
    """M = N = 1000 with the smallest tile (64 wide, 2 slots, the most CTAs an SM holds) and
    the largest, K of a single k tile and of many, plain and in clusters."""
    _skip_unless_hopper()
    for block_n, stages in ((64, 2), (256, 4)):
        for cluster_m in k90.CLUSTER_MS:
            cfg = k90.MatmulSm90Config(block_n, stages, cluster_m=cluster_m, persistent=True)
            for kk in (64, 1000):
                check(_params(FLAG_SETS[0], 1000, 1000, kk), cfg, seed)


def test_clusters_with_an_odd_number_of_m_tiles(seed):
    """Every cluster config on 3 M tiles (the second cluster's CTA of rank 1 lies past M) by
    several N and k tiles, ragged everywhere, with bias and fp32 output on one flag set."""
    _skip_unless_hopper()
    for flags in (FLAG_SETS[0], FLAG_SETS[1]):
        p0 = _params(flags, 1, 1, 8)
        for cfg in k90.configs(p0, _device()):
            if cfg.cluster_m == 2:
                for n in (3 * cfg.block_n + 5, 3 * cfg.block_n + 8):  # registers, TMA stores
                    check(_params(flags, 3 * 128 - 7, n, 8 * 64 + 24), cfg, seed)


def test_output_not_two_element_aligned(seed):
    """C one element off a 2-element boundary (even N): the epilogue stores element-wise."""
    _skip_unless_hopper()
    for flags in (FLAG_SETS[0], FLAG_SETS[1]):
        check(_params(flags, 130, 264, 96), k90.MatmulSm90Config(block_n=128, stages=3), seed, 1)
    # The split-K sum stores element-wise too (its float4 loads read the workspace, not C).
    check(_params(FLAG_SETS[2], 16, 264, 1024), k90.MatmulSm90Config(split_k=4), seed, 1)


@pytest.mark.parametrize("m, n, k", [(16, 4096, 4096), (1, 1000, 2056), (100, 64, 4096)])
def test_split_k_decode_shapes_same_bits_every_run(m, n, k, seed):
    """`split_choice`'s split-K config at decode shapes (one row of tiles, long K) against
    fp64, and a second run with other values in the workspace's memory gives the same bits."""
    _skip_unless_hopper()
    p = _params(("bfloat16", False, True), m, n, k)
    cfg = k90.split_choice(p, _device())
    assert cfg is not None and cfg.split_k > 1, cfg
    check(p, cfg, seed)
    assert_same_bits_twice(p, cfg, seed, cfg.split_k * m * n)


def assert_same_bits_twice(p: MatmulParams, cfg: k90.MatmulSm90Config, seed: int, nan: int) -> None:
    """Two launches of (p, cfg) on the same fresh inputs (bias on) give the same bits: before
    each, `nan` NaNs are freed where the next workspace is likely to come from, so a partial
    left unwritten or summed out of order shows."""
    g = torch.Generator("cuda").manual_seed(seed)
    dt = getattr(torch, p.dtype)
    a = torch.randn(p.m, p.k, generator=g, device="cuda").to(dt)
    b = torch.randn(p.n, p.k, generator=g, device="cuda").to(dt)
    bias = torch.randn(p.n, generator=g, device="cuda").to(dt)
    stream = torch.cuda.current_stream().cuda_stream
    outs = [torch.empty(p.m, p.n, dtype=getattr(torch, p.out_dtype), device="cuda") for _ in "ab"]
    for c in outs:
        del_me = torch.full((nan,), float("nan"), device="cuda")
        del del_me
        k90.launch(p, cfg, c, a, b, bias, stream=stream)
    assert torch.equal(outs[0], outs[1]), f"{p} {cfg}: results differ between runs"


@pytest.mark.timeout(SWEEP_TIMEOUT_S)
@pytest.mark.parametrize("flags", FLAG_SETS, ids=str)
def test_swapped_every_config_at_decode_shapes(flags, seed):
    """Swapped configs (`swap_ab`: the kernel multiplies C^T = B A^T and stores the tile
    transposed) of each width, M 1 to 64 (ragged against the 16-, 32- and 64-wide tiles), every
    ring depth and split of K, N ragged against the 128-row tiles of B (odd N too), K from 3
    chunks to 64 k tiles, bias by the tile's rows; and C one element off."""
    _skip_unless_hopper()
    dev = _device()
    for m in (1, 5, 16, 17, 32, 33, 64):
        cfgs = [c for c in k90.configs(_params(flags, m, 8, 8), dev) if c.swap_ab]
        assert {c.block_n for c in cfgs} == {k90.swap_block_n(_params(flags, m, 8, 8))}, cfgs
        for cfg in cfgs:
            for n, kk in ((1000, 1032), (257, 4096), (130, 24)):
                check(_params(flags, m, n, kk), cfg, seed)
        check(_params(flags, m, 264, 520), cfgs[0], seed, 1)


@pytest.mark.parametrize("m, n, k", [(16, 4096, 4096), (1, 1000, 2056), (64, 11008, 4096)])
def test_swapped_decode_picks_same_bits_every_run(m, n, k, seed):
    """The heuristic's swapped pick (`swap_choice`) at decode shapes against fp64, and the same
    bits in a second run."""
    _skip_unless_hopper()
    p = _params(("bfloat16", False, True), m, n, k)
    cfg = k90.heuristic(p, _device())
    assert cfg.swap_ab, cfg
    check(p, cfg, seed)
    assert_same_bits_twice(p, cfg, seed, cfg.split_k * m * n)


def _tail_shapes(dev, block_n: int) -> list[tuple[int, int, int]]:
    """Shapes whose 128 x block_n tiles fill whole waves of dev's SMs and then part of one more
    (a split tail): M 1100 (9 M tiles, the last of 76 rows), N past a whole number of waves and
    ragged (odd N: unpaired stores), K ragged (one k tile of 8 rows) and short (4 splits at most)
    or long (an uneven balanced split)."""
    slots = dev.sm_count  # one CTA an SM for every tail config (their rings fill shared memory)
    tn = slots // 9 + 3  # 9 x tn tiles: one wave and 27 - slots % 9 more
    n = tn * block_n - block_n // 2 - 1
    return [(1100, n, 520), (1100, n, 2048), (1100, n + 1 - 8, 1032)]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=str)
def test_split_tail_every_config(flags, seed):
    """Every `tail` config on shapes with a partial last wave (`tail_plan` splits it): whole
    tiles by the plain epilogue (TMA or registers), the tail's partials summed in order (+ bias)
    by the second kernel, against fp64 into a NaN-poisoned C; raster 1 and 3 (the tail's tiles
    in another order), B either way, A given as (K, M), C one element off (element stores)."""
    _skip_unless_hopper()
    dev = _device()
    for cfg in (c for c in k90.configs(_params(flags, 1, 1, 8), dev) if c.tail):
        for m, n, kk in _tail_shapes(dev, cfg.block_n):
            p = _params(flags, m, n, kk)
            assert k90.tail_plan(p, cfg, dev)[1] > 1, (p, cfg)
            check(p, cfg, seed)
            check(p, replace(cfg, raster=3), seed)
        m, n, kk = _tail_shapes(dev, cfg.block_n)[2]  # N a multiple of 8
        check(_params(flags, m, n, kk), cfg, seed, 1)  # C not 2-element aligned: no paired stores
        check(_params(flags, m, n, kk, b_transposed=False), replace(cfg, raster=1), seed)
        check(_params(flags, m + 4, n, kk), replace(cfg, a_transposed=True), seed)


def test_split_tail_same_bits_every_run(seed):
    """A split tail sums its partials in a fixed order: two runs (other values in the
    workspace's memory) give the same bits."""
    _skip_unless_hopper()
    dev = _device()
    cfg = k90.MatmulSm90Config(256, 4, tail=True)
    m, n, k = _tail_shapes(dev, 256)[1]
    assert_same_bits_twice(_params(("bfloat16", False, True), m, n, k), cfg, seed, m * n)


def test_bias_of_any_alignment(seed):
    """The unswapped epilogue loads a tile's bias once, two elements a load where the tile lies
    inside N and the bias is 4-byte aligned, else element by element: a bias one element off
    (2-byte aligned), N ragged against the tiles (even and odd), each tile width with and without
    a cluster, persistent or not, both epilogues (C one element off is stored from registers),
    and the split-tail configs on shapes that have a tail (whole tiles by this epilogue)."""
    _skip_unless_hopper()
    dev = _device()
    for flags in (("float16", False, True), ("bfloat16", True, True)):
        p = _params(flags, 255, 1000, 72)
        cfgs = [c for c in k90.configs(p, dev) if not c.swap_ab and c.split_k == 1 and not c.tail]
        kinds = {(c.block_n, c.cluster_m, c.persistent): c for c in cfgs}
        assert len(kinds) >= 8, kinds
        for cfg in kinds.values():
            for shift, bias_shift in ((0, 0), (0, 1), (1, 1)):
                check(p, cfg, seed, shift=shift, bias_shift=bias_shift)
            check(_params(flags, 130, 1001, 72), cfg, seed, bias_shift=1)  # odd N
        for cfg in (c for c in k90.configs(p, dev) if c.tail):
            m, n, kk = _tail_shapes(dev, cfg.block_n)[0]
            q = _params(flags, m, n, kk)
            assert k90.tail_plan(q, cfg, dev)[1] > 1, (q, cfg)
            check(q, cfg, seed, bias_shift=1)
