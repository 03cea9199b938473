"""conv2d_gw8 forward and input-gradient kernels: configs, heuristic, specs, features and launch.

Both run `spio/src/conv2d_gw8_fprop.cu`. The input gradient is the forward convolution of dy with
the weights transposed within each 8x8 group and rotated 180 degrees, padding R - 1 - pad
(`Conv2dGw8Params.dgrad_as_fprop`), so `DGRAD` is `FPROP` applied to the transposed problem; both
take the layer's params.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from spio.kernels.conv2d_gw8 import tune as _tune
from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    Conv2dGw8Config,
    Conv2dGw8Params,
    ctas_per_sm,
    select_at_batch_bucket,
    tma_capable,
)
from spio.kernels.conv2d_gw8.params import idle_warps as idle_warps
from spio.kernels.conv2d_gw8.params import warps_allowed as warps_allowed
from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats

SOURCE = "conv2d_gw8_fprop.cu"
ENTRY = "conv2d_gw8_fprop"
BLOCK_P_CHOICES = (2, 4, 8, 16, 32, 64)
M_TILE_CHOICES = (1, 2, 4)  # block_q = 16 * m tiles
PACKED_BLOCK_Q = 8  # two images per M tile, 8 columns each: offered when Q <= 8
# Longest main-loop step (input rows) the kernel unrolls to make stage and output-buffer offsets
# compile-time constants (its STEP_ROWS). 24 covers 3x3 with every stage count (8 stages: a
# 24-row step at stride 1), and more 5x5/7x7 configs than 12 did. Timed against 12 on an H100,
# every fprop/dgrad config at nine layers (docs/ops/conv2d_gw8.md, "Eleventh session"): the
# configs whose step changed 1.00-1.30x faster (median per layer; 8-stage strided dgrad 1.13-1.30,
# 4-stage 5x5 1.10-1.14, 2-stage 7x7 1.11-1.23), single-warp 8-stage strided ones up to 20%
# slower (none near the best), every other config within 1%; the best of the space up to 9%
# faster. A sweep may set this module attribute before compiling (`sweep_conv2d_gw8.py
# --max-step-rows`; the disk cache keys on the constant).
MAX_STEP_ROWS = 24
WARP_CHOICES = (1, 2, 4, 8)
STAGE_CHOICES = (2, 3, 4, 6, 8)
# Registers: R*S weights + R*M*4 accumulators + addressing; past this the kernel spills.
MAX_LIVE_REGS = 168
# Bytes of input rows the heuristic wants in flight per SM (cp.async stages beyond the row being
# multiplied): Little's law at ~3 TB/s over 132 SMs and ~1.5-2 us loaded DRAM latency gives
# 35-45 KB; the first H100 run had 10-35 KB in flight and reached 21-51% of copy bandwidth.
IN_FLIGHT_BYTES = 48 * 1024
# ptxas uses about this many registers beyond live_regs (addresses, loop state), measured on
# sm_90 for 3x3 to 7x7 variants (64-128 registers in all).
REG_OVERHEAD = 48
MAX_CTAS_PER_SM = 32
# Input rows through the tensor memory accelerator on sm_90+ (`tma_rows`): one
# cp.async.bulk.tensor per row, issued by one thread, instead of a cp.async per 16 bytes from
# every thread. A sweep may set this module attribute to False to time the cp.async kernel
# (`sweep_conv2d_gw8.py --cp-async`; the disk cache keys on the generated header).
TMA_ROWS = True
# ... where `params.tma_capable` (CTAs of 2+ warps, at most 9 taps). Every config timed both ways
# on an H100 (docs/ops/conv2d_gw8.md, "Fourteenth session"), cp.async / TMA time per config,
# median per (warps, block_q) family: 3x3 with 2-8 warps 1.04-1.29x at 56x56 and larger maps
# (stride 1 and 2), 0.97-1.07x at 28x28, 0.93-0.95x at 14x14, the best config of each space
# 0.97-1.26x; 1-warp CTAs (16-byte boxes) 0.81-1.04x, mostly below 0.93; 7x7 0.93-0.98x with 2-8
# warps.
# The batch row of the last image (n * H + h) is a 32-bit TMA coordinate, and N <= 65535.
TMA_MAX_H = 2**31 // 65536
# Preferred shared-memory carveouts (percent of the SM's maximum) the space offers besides the
# driver's choice (-1), for cp.async variants on a dilated input (the dgrad of a strided layer)
# whose CTAs the carveout holds at most CARVEOUT_MAX_SHARE of (`carveout_offered`): fewer
# resident CTAs, a larger L1. With the driver's choice (the smallest split that holds the most
# resident CTAs) such variants run each call at one of two speeds about 20% apart, and at 50% the
# C72 112^2 N64 pick ran 101 us against 123-130 (docs/tuning.md, "Twenty-ninth session"). Every
# dgrad config of 8 strided RegNet layers timed at both (H100): of the 246 configs 50% made >5%
# faster, 243 are among the 1209 offered by this rule (3 of the 233 others); at TMA variants 50%
# only cost (up to +20%).
CARVEOUT_CHOICES = (50,)
CARVEOUT_MAX_SHARE = 0.75


def images(cfg: Conv2dGw8Config) -> int:
    """Images per CTA: 2 side by side in the M tile when block_q is 8, else 1."""
    return 2 if cfg.block_q == PACKED_BLOCK_Q else 1


def m_tiles(cfg: Conv2dGw8Config) -> int:
    """m16n8k8 M tiles per output row of the CTA (16 fragment rows each)."""
    return max(1, cfg.block_q // 16)


def phased(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> bool:
    """Whether the M tiles pair up by column parity (the kernel's PHASED): an input dilated by 2 in
    W (the dgrad of a stride-2 layer) and an even number of M tiles, so the taps that land on the
    dilation's zero columns are neither loaded nor multiplied."""
    return p.dilate_w == 2 and m_tiles(cfg) % 2 == 0


def group_blocks(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> int:
    """CTAs along the channel groups: ceil(groups / warps) (the last one has idle warps when
    warps does not divide the groups: the kernel's RAGGED_GROUPS)."""
    return -(-p.groups // cfg.warps)


def tile_w(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> int:
    """Input columns one image's tile reads: (BLOCK_Q - 1) * stride + S (BLOCK_Q plus the S - 1
    halo at stride 1)."""
    return (cfg.block_q - 1) * p.stride_w + p.s


def tile_h(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> int:
    """Input rows one tile streams: (BLOCK_P - 1) * stride + R."""
    return (cfg.block_p - 1) * p.stride_h + p.r


def tma_rows(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> bool:
    """Whether the variant loads its input rows with TMA (the kernel's TMA_ROWS): where
    `params.tma_capable` (sm_90+, CTAs of 2+ warps, at most 9 taps), for tiles of one
    image (not block_q 8's two) whose input is not dilated along W (the dgrad of a stride-2 layer
    interleaves zero columns, which a TMA box cannot). Off when the module's TMA_ROWS is False;
    where it is off the kernel is the cp.async one, instruction for instruction."""
    return (
        TMA_ROWS
        and tma_capable(p, cfg.warps, dev)
        and p.dilate_w == 1
        and images(cfg) == 1
        and p.h <= TMA_MAX_H
    )


def tma_swizzle(cfg: Conv2dGw8Config) -> int:
    """The TMA swizzle span (bytes) of a TMA_ROWS input row: one pixel's WARPS x 16 bytes (none
    for one warp), so the 8 pixels a fragment reads from one warp's group sit in 8 bank groups."""
    return 16 * cfg.warps if cfg.warps > 1 else 0


def stage_w(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> int:
    """Pixels per shared-memory input stage and image: TILE_W, rounded up to 8 for TMA_ROWS (so
    each stage starts on a swizzle period of 8 pixels x WARPS x 16 bytes)."""
    tw = tile_w(p, cfg)
    return -(-tw // 8) * 8 if tma_rows(p, cfg, dev) else tw


def out_plane(cfg: Conv2dGw8Config) -> int:
    """16-byte chunks per warp plane of the staged output row: the 16 * m_tiles staged columns
    plus 8 / WARPS padding, so the 16-byte reads of 8 consecutive threads (g fastest) land in 8
    distinct bank groups."""
    return 16 * m_tiles(cfg) + (8 // cfg.warps if cfg.warps < 8 else 1)


@functools.lru_cache(maxsize=1024)
def sector_waste(c: int, warps: int) -> float:
    """32-byte sectors that one CTA's channel slice of a pixel touches (16 B per warp; the last
    group block's slice is shorter when it has idle warps), averaged over the pixels and the group
    blocks, over the fewest that slice could touch. x, y, dy and dx are NHWC with 2 * C bytes per
    pixel: when that is a multiple of 32 every slice starts on a sector and this is 1; at an odd
    group count every other pixel starts mid-sector, and a slice shares its edge sectors with the
    neighbouring group block's (C72 with 2 warps: 1.4). Such layers (the dgrad of C40 and C72 at
    112x112 stride 2) prefer other tiles than their even-group neighbours, which the model could
    not tell apart before (docs/tuning.md, "Fourteenth session")."""
    pixel = 2 * c  # fp16 / bf16
    chunk = 16 * warps
    touched = ideal = 0
    for b in range(-(-(c // GROUP_WIDTH) // warps)):
        size = min(chunk, pixel - b * chunk)
        ideal += 2 * -(-size // 32)
        for start in (0, pixel % 32):  # two pixels: the first aligned, the next maybe not
            first = start + b * chunk
            touched += (first + size - 1) // 32 - first // 32 + 1
    return touched / ideal


def smem_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any = None) -> int:
    """Dynamic shared memory: STAGES input rows of (BLOCK_Q + S - 1) pixels x WARPS groups x 16 B,
    two staged output rows of WARPS padded planes, and the CTA's weights (WARPS x 8 x 8 x R x S
    fp16/bf16). TMA_ROWS (`tma_rows`) rounds each row up to 8 pixels and adds the slack that
    aligns the rows to the swizzle's period (`row_align`) and one mbarrier per stage."""
    per_stage, fixed = _smem_terms(p, cfg, dev)
    return cfg.stages * per_stage + fixed


def _smem_terms(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> tuple[int, int]:
    """`smem_bytes` as (bytes per stage, bytes besides the stages), which do not depend on the
    stages: `configs` takes them once per tile."""
    weights = cfg.warps * GROUP_WIDTH * GROUP_WIDTH * p.r * p.s * 2
    out = 2 * cfg.warps * out_plane(cfg) * 16 + weights
    if tma_rows(p, cfg, dev):  # an input row and an mbarrier per stage
        return cfg.warps * stage_w(p, cfg, dev) * 16 + 8, row_align(p, cfg, dev) + out
    return row_bytes(p, cfg), out


def row_align(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> int:
    """Alignment (bytes) of the shared-memory input rows: the swizzle's period for TMA_ROWS (8
    pixels of WARPS x 16 bytes: TMA swizzles by shared-memory address bits), else 16."""
    return 128 * cfg.warps if tma_rows(p, cfg, dev) else 16


def live_regs(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> int:
    """Registers the accumulator ring and the weights need per thread."""
    return p.r * p.s + p.ring * m_tiles(cfg) * 4 + 2 * m_tiles(cfg)


def grid(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> tuple[int, int, int]:
    """(tiles of one image, batch / images per CTA, 1): blockIdx.x = (P tile, Q tile, group
    block), y = n / images(cfg)."""
    tiles = math.ceil(p.p / cfg.block_p) * math.ceil(p.q / cfg.block_q) * group_blocks(p, cfg)
    return (tiles, math.ceil(p.n / images(cfg)), 1)


# `configs`' constructor: a config is frozen, so one object serves every space that lists it, and
# a new shape's space costs ~0.1 us a config instead of the ~0.7 that building and validating one
# takes. The spaces draw from few: 2312 configs over 12000 sampled layers of fprop and dgrad on
# three GPUs (at most 64 block_p x 4 block_q x 4 warps x 11, tiles included).
_config = functools.lru_cache(maxsize=8192)(Conv2dGw8Config)


def configs(p: Conv2dGw8Params, dev: Any) -> list[Conv2dGw8Config]:
    """Every valid fprop config for `p` on `dev`, in a stable order.

    Block rows above P and 16-column strips beyond the first that covers Q are dropped (they only
    add idle work); block_q 8 (two images per M tile) only when Q <= 8; warps divide the channel
    groups or leave few idle (`warps_allowed`); stages above 3 only while the block has that
    many rows to prefetch; shared memory must fit the device's opt-in limit and the register
    estimate must stay below the spill point. A cp.async variant on a dilated input (the dgrad of
    a strided layer) comes also at each of CARVEOUT_CHOICES that holds at most CARVEOUT_MAX_SHARE
    of its CTAs (`carveout_offered`), right after it.
    """
    dilated = p.dilate_h > 1 or p.dilate_w > 1
    out = []
    p_choices = sorted({min(bp, p.p) for bp in BLOCK_P_CHOICES})
    m_needed = math.ceil(p.q / 16)
    q_choices = [PACKED_BLOCK_Q] if p.q <= PACKED_BLOCK_Q else []
    q_choices += [16 * m for m in M_TILE_CHOICES if m == 1 or m <= m_needed]
    warp_choices = [w for w in WARP_CHOICES if warps_allowed(p.groups, w)]
    smem_limit = dev.max_smem_per_block_optin
    # The terms that do not depend on the stages (the register estimate, TMA_ROWS and the CTAs
    # a carveout is weighed against) are taken once per tile: a new shape's selection lists the
    # whole space.
    for block_p in p_choices:
        for block_q in q_choices:
            for warps in warp_choices:
                tile = _config(block_p, block_q, warps)
                if live_regs(p, tile) > MAX_LIVE_REGS:
                    continue
                rows = tile_h(p, tile)
                carve = dilated and not tma_rows(p, tile, dev)
                cap = _ctas_cap(p, tile, dev) if carve else 0
                per_stage, fixed = _smem_terms(p, tile, dev)
                for stages in STAGE_CHOICES:
                    if stages > 3 and stages > rows:
                        continue  # more stages than the block has rows to prefetch
                    smem = stages * per_stage + fixed  # `smem_bytes`
                    if smem > smem_limit:
                        continue
                    out.append(_config(block_p, block_q, warps, stages))
                    if carve:
                        for carveout in CARVEOUT_CHOICES:
                            if _offered(cap, smem, dev, carveout):
                                out.append(_config(block_p, block_q, warps, stages, carveout))
    return out


def carveout_ctas(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any, carveout: int) -> int:
    """CTAs of this config one SM's shared memory holds at a preferred carveout (percent of the
    SM's maximum; -1: all of it, the most the driver's choice takes), the 1 KB the driver
    reserves per CTA included, capped by threads, the grid spread over the SMs and the hardware's
    CTA limit. Registers are left out: their estimate (`resident_ctas`) runs low at some cp.async
    dgrad variants (8 CTAs estimated where the driver ran 16), which is where carveouts matter."""
    return _held_ctas(_ctas_cap(p, cfg, dev), smem_bytes(p, cfg, dev), dev, carveout)


def carveout_offered(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> bool:
    """Whether `cfg`'s preferred carveout holds at most CARVEOUT_MAX_SHARE of the CTAs the
    driver's choice would (`carveout_ctas`): where the space offers it."""
    return _offered(_ctas_cap(p, cfg, dev), smem_bytes(p, cfg, dev), dev, cfg.carveout)


def _ctas_cap(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> int:
    """Resident CTAs of a config as threads, the grid spread and the hardware allow."""
    g = grid(p, cfg)
    spread = -(-(g[0] * g[1]) // dev.sm_count)
    return min(spread, dev.max_threads_per_sm // (32 * cfg.warps), MAX_CTAS_PER_SM)


def _held_ctas(cap: int, smem: int, dev: Any, carveout: int) -> int:
    """`carveout_ctas` from its parts: `cap` (`_ctas_cap`) and the config's shared memory."""
    most = dev.max_smem_per_sm
    return max(1, min(cap, (most if carveout == -1 else most * carveout // 100) // (smem + 1024)))


def _offered(cap: int, smem: int, dev: Any, carveout: int) -> bool:
    """`carveout_offered` from its parts (`configs` has them at hand)."""
    return _held_ctas(cap, smem, dev, carveout) <= CARVEOUT_MAX_SHARE * _held_ctas(
        cap, smem, dev, -1
    )


def row_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> int:
    """Bytes of one input row of the tile (one cp.async stage), all its images."""
    return cfg.warps * images(cfg) * tile_w(p, cfg) * 16


def resident_ctas(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> int:
    """CTAs of this config one SM runs at once (see `ctas_per_sm`)."""
    g = grid(p, cfg)
    return ctas_per_sm(
        g[0] * g[1],
        live_regs(p, cfg) + REG_OVERHEAD,
        cfg.warps,
        smem_bytes(p, cfg, dev),
        dev,
        MAX_CTAS_PER_SM,
    )


def in_flight_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> int:
    """Input bytes in flight per SM in the steady state: STAGES - 1 rows per resident CTA."""
    rows = min(cfg.stages - 1, tile_h(p, cfg) - 1)
    return resident_ctas(p, cfg, dev) * rows * row_bytes(p, cfg)


def heuristic(p: Conv2dGw8Params, dev: Any) -> Conv2dGw8Config:
    """The config used until a performance model exists.

    Rule: 4 warps (128 threads) when the groups allow it (`warps_allowed`), else 2 or 1; 32
    output columns when Q >= 32 and the registers allow, 8 (two images per M tile) when
    Q <= 8, else 16; then the tallest block (fewest
    halo rows re-read; up to a whole image) that still gives at least 2 CTAs per SM over the
    whole batch, so small batches still fill the GPU; then the fewest pipeline stages that put
    IN_FLIGHT_BYTES of input rows in flight per SM (the deepest valid one when none does). The
    first H100 run (2-3 stages) had 10-35 KB in flight per SM and was latency-bound.
    """
    valid = configs(p, dev)
    if not valid:
        raise ValueError(f"conv2d_gw8 fprop: no valid config for {p} on {dev.name}")
    warps = max(w for w in (1, 2, 4) if warps_allowed(p.groups, w))
    block_q = 32 if p.q >= 32 and any(c.block_q == 32 for c in valid) else 16
    if p.q <= PACKED_BLOCK_Q:
        block_q = PACKED_BLOCK_Q  # 14 of 16 fragment rows busy at Q = 7 instead of 7
    pool = [c for c in valid if c.warps == warps and c.block_q == block_q and c.stages == 2]
    pool = pool or valid
    target = 2 * dev.sm_count
    pool.sort(key=lambda c: c.block_p)
    best = pool[0]
    for cfg in pool:
        g = grid(p, cfg)
        if g[0] * g[1] >= target:
            best = cfg
    # Little's law: a CTA has STAGES - 1 rows (WARPS x TILE_W x 16 B, ~1-2 KB) in flight.
    chosen = best
    for stages in STAGE_CHOICES:
        cand = replace(best, stages=stages)
        if cand not in valid:
            continue
        chosen = cand
        if in_flight_bytes(p, cand, dev) >= IN_FLIGHT_BYTES:
            break
    return chosen


def spec(
    p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any = None, transposed: bool = False
) -> KernelSpec:
    """The compile-and-launch description of one variant (batch size is not part of it).
    `transposed`: the dgrad variant, which reads the forward weight as w[g8+c, k, R-1-r, S-1-s]."""
    from spio.generators.compound_index import CompoundIndex
    from spio.generators.constant import Constant
    from spio.generators.dim import Dim
    from spio.generators.dtype import bfloat16, half, uint4, uint32
    from spio.generators.dtype import float as f32
    from spio.generators.macro import Macro
    from spio.generators.swizzle import Xor
    from spio.generators.tensor import Tensor
    from spio.generators.type_alias import Type

    elem = half if p.dtype == "float16" else bfloat16
    welem = f32 if p.weight_dtype == "float32" else elem
    H, W, P, Q, C = Dim(), Dim(), Dim(), Dim(), Dim()
    R, S, KO, CI, CP, STAGE, OUTBUF = Dim(), Dim(), Dim(), Dim(), Dim(), Dim(), Dim()
    C8 = C / GROUP_WIDTH
    GB, PB, QB = C / (GROUP_WIDTH * cfg.warps), P / cfg.block_p, Q / cfg.block_q
    tw = tile_w(p, cfg)
    g = p.groups
    tma = tma_rows(p, cfg, dev)
    if tma:
        # A TMA row lands pixel-major, WARPS x 16 bytes per pixel, swizzled so that the 8 pixels
        # a fragment reads of one group sit in 8 bank groups: group index ^ (pixel >> shift) %
        # WARPS with 8 pixels per swizzle period (TMA's 32/64/128-byte swizzle).
        bits = cfg.warps.bit_length() - 1
        smem_input = Tensor(
            (STAGE(cfg.stages), W(stage_w(p, cfg, dev)), C8(cfg.warps), CP(4)),
            uint32,
            swizzle=Xor(W, C8, bits, 3 - bits) if bits else None,
        )
    else:
        smem_input = Tensor((STAGE(cfg.stages), C8(cfg.warps), W(images(cfg) * tw), CP(4)), uint32)
    specs = {
        "H": H,
        "W": W,
        "P": P,
        "Q": Q,
        "C": C,
        "R": R,
        "S": S,
        "KO": KO,
        "CI": CI,
        "CP": CP,
        "STAGE": STAGE,
        "OUTBUF": OUTBUF,
        "C8": C8,
        "GB": GB,
        "PB": PB,
        "QB": QB,
        "Elem": Type(elem),
        "WElem": Type(welem),
        # One image of x (NHWC as 16-byte pixel groups) and of y (half2 channel pairs).
        "Input": Tensor((H(p.h), W(p.w), C8(g)), uint4),
        "Output": Tensor((P(p.p), Q(p.q), C8(g), CP(4)), uint32),
        "Weight": Tensor(p.weight_dims(C8(g), KO(8), CI(8), R(p.r), S(p.s)), welem),
        "Bias": Tensor((C8(g), KO(8)), welem),
        "SmemInput": smem_input,
        "SmemOutput": Tensor(
            (OUTBUF(2), C8(cfg.warps), Q(16 * m_tiles(cfg)), CP(4)),
            uint32,
            strides={C8: 4 * out_plane(cfg)},
        ),
        "SmemWeight": Tensor(p.weight_dims(C8(cfg.warps), KO(8), CI(8), R(p.r), S(p.s)), elem),
        "BlockIdx": CompoundIndex(
            PB(math.ceil(p.p / cfg.block_p)),
            QB(math.ceil(p.q / cfg.block_q)),
            GB(group_blocks(p, cfg)),
        ),
        "IN_H": Constant(p.h),
        "IN_W": Constant(p.w),
        "OUT_P": Constant(p.p),
        "OUT_Q": Constant(p.q),
        "GROUPS": Constant(g),
        "RAGGED_GROUPS": Constant(idle_warps(g, cfg.warps) > 0),
        "KERNEL_R": Constant(p.r),
        "KERNEL_S": Constant(p.s),
        "PAD_H": Constant(p.pad_h),
        "PAD_W": Constant(p.pad_w),
        "HAS_BIAS": Constant(bool(p.has_bias)),
        "TRANSPOSED_WEIGHT": Constant(transposed),
        "STRIDE_H": Constant(p.stride_h),
        "STRIDE_W": Constant(p.stride_w),
        "DILATE_H": Constant(p.dilate_h),
        "DILATE_W": Constant(p.dilate_w),
        "RING": Constant(p.ring),
        "UNROLL": Constant(p.stride_h * p.ring),
        "MAX_STEP_ROWS": Constant(MAX_STEP_ROWS),
        "WARPS": Constant(cfg.warps),
        "STAGES": Constant(cfg.stages),
        "TILE_H": Constant(tile_h(p, cfg)),
        "BLOCK_P": Constant(cfg.block_p),
        "TILE_W": Constant(tw),
        "MMA_M_TILES": Constant(m_tiles(cfg)),
        "BLOCK_Q": Constant(cfg.block_q),
        "IMAGES": Constant(images(cfg)),
        "STAGED_Q": Constant(16 * m_tiles(cfg)),
        "PHASED": Constant(phased(p, cfg)),
        # Shared-memory column of fragment rows 8-15 relative to rows 0-7: the next 8 output
        # columns' (8 stride apart; 16 columns apart when PHASED), or the second image's region.
        "A_HI": Constant(tw if images(cfg) == 2 else 8 * p.stride_w * (2 if phased(p, cfg) else 1)),
        # Input rows by TMA (a macro: it adds the kernel's tensor-map parameter), the box's bytes
        # and the rows' shared-memory alignment.
        "TMA_ROWS": Macro(tma),
        "ROW_BOX_BYTES": Constant(cfg.warps * GROUP_WIDTH * tw * 2),
        "ROW_ALIGN": Constant(row_align(p, cfg, dev)),
    }
    shape = p.with_batch(1)
    return KernelSpec(
        source=SOURCE,
        entry=ENTRY,
        signature="ppppit" if tma else "ppppi",
        specs=specs,
        # Without the carveout: variants that differ only there share the cubin.
        title=f"conv2d_gw8_{'dgrad' if transposed else 'fprop'} {shape} "
        f"{replace(cfg, carveout=-1)}",
        block=(32 * cfg.warps, 1, 1),
        smem=smem_bytes(p, cfg, dev),
        carveout=cfg.carveout,
    )


def stats(p: Conv2dGw8Params) -> KernelStats:
    """Fewest DRAM bytes (x read once, y written once, weights and bias once) and MMA FLOPs."""
    esize = 2
    act = p.n * p.c * (p.h * p.w + p.p * p.q) * esize
    wts = p.c * GROUP_WIDTH * p.r * p.s * esize + (p.c * esize if p.has_bias else 0)
    flops = 2 * p.n * p.p * p.q * p.c * GROUP_WIDTH * p.r * p.s
    return KernelStats(bytes_moved=act + wts, flops=flops)


@functools.lru_cache(maxsize=256)
def _layer_terms(p: Conv2dGw8Params) -> tuple[dict[str, float], int, int, int, int]:
    """The features' layer-only terms, computed once per layer (selection evaluates `features`
    for every config of a new shape): the layer's own features, output rows and columns (P and
    Q are properties), the fewest bytes moved and the FLOPs."""
    st = stats(p)
    return p.features(), p.p, p.q, st.bytes_moved, st.flops


def features(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> dict[str, float]:
    """Numeric description of (params, config, device) for the performance model: the layer's own
    features, then the config's (`_config_features`). Names, order and values are pinned by
    tests/host/tune/data/feature_digests.json."""
    return {**_layer_terms(p)[0], **_config_features(p, cfg, dev)}


def feature_columns(
    p: Conv2dGw8Params, cfgs: Sequence[Conv2dGw8Config], dev: Any
) -> dict[str, Sequence[float]]:
    """`features` of every config of `cfgs`, one column per name in its key order: what a new
    shape's selection evaluates for the whole space (`spio.tune.features.feature_columns`).

    A config of the same tile (block_p, block_q, warps) as the one before it, as `configs` lists
    them, has the same features but for the stages and the shared memory (`smem_bytes`), and
    equal features at equal stages (fprop has no carveout feature): those are taken from the
    config before, not computed again. The dgrad of C104 56x56 stride 2 (605 configs of 72
    tiles): 0.8 ms against 3.3 config by config."""
    rows: list[dict[str, float]] = []
    prev: Conv2dGw8Config | None = None
    row: dict[str, float] = {}
    for cfg in cfgs:
        if (
            prev is None
            or cfg.block_p != prev.block_p
            or cfg.block_q != prev.block_q
            or cfg.warps != prev.warps
        ):
            row = _config_features(p, cfg, dev)
        elif cfg.stages != prev.stages:
            row = row | {"stages": cfg.stages, "smem_bytes": smem_bytes(p, cfg, dev)}
        rows.append(row)
        prev = cfg
    n = len(rows)
    columns: dict[str, Sequence[float]] = {k: [v] * n for k, v in _layer_terms(p)[0].items()}
    if rows:
        columns.update(zip(rows[0], zip(*map(dict.values, rows), strict=True), strict=True))
    return columns


def _config_features(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> dict[str, float]:
    """The features after the layer's own (`features`): the config's and the work's."""
    _, _, out_q, bytes_moved, flops = _layer_terms(p)
    g = grid(p, cfg)
    blocks = g[0] * g[1]
    # Input pixels a CTA's tile streams per output pixel: TILE_H x TILE_W (rows and columns of
    # the dilated input at dgrad), (BLOCK_P + R - 1) x (BLOCK_Q + S - 1) at stride 1.
    halo = (tile_h(p, cfg) * tile_w(p, cfg)) / (cfg.block_p * cfg.block_q)
    tiles_q = -(-out_q // cfg.block_q)
    return {
        "block_p": cfg.block_p,
        "block_q": cfg.block_q,
        "warps": cfg.warps,
        "idle_warps": idle_warps(p.groups, cfg.warps) / (group_blocks(p, cfg) * cfg.warps),
        "tma_rows": float(tma_rows(p, cfg, dev)),
        "stages": cfg.stages,
        "blocks": blocks,
        "waves": blocks / max(1, dev.sm_count),
        "smem_bytes": smem_bytes(p, cfg, dev),
        "live_regs": live_regs(p, cfg),
        "halo_ratio": halo,
        "q_waste": tiles_q * cfg.block_q / out_q,
        "bytes": bytes_moved,
        "flops": flops,
        "sm_count": dev.sm_count,
        "sector_waste": sector_waste(p.c, cfg.warps),
    }


def examples() -> list[Conv2dGw8Params]:
    return [
        Conv2dGw8Params(n=32, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
        Conv2dGw8Params(n=8, c=128, h=28, w=28, r=5, s=5, pad_h=2, pad_w=2, dtype="bfloat16"),
        Conv2dGw8Params(n=1, c=512, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3),
    ]


def row_maps(kernel: Any, p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> Any:
    """The tensor maps a TMA_ROWS variant (`kernel`, loaded for the fprop problem `p`) reads its
    input through, one per input address (`spio.kernels.map_cache.MapCache`); None for a cp.async
    variant. The input (N, H, W, C) is a 3-D tensor (N x H rows, W, C) copied in boxes of one row
    x TILE_W pixels x the CTA's WARPS x 8 channels (out of the tensor: zeros, i.e. the padding
    columns and a ragged last group block's channels)."""
    spec = getattr(kernel, "spec", None)
    if spec is None or not spec.signature.endswith("t"):
        return None
    from spio.kernels.map_cache import MapCache

    return MapCache(
        p.dtype,
        (p.n * p.h, p.w, p.c),
        (p.w * p.c, p.c, 1),
        (1, tile_w(p, cfg), cfg.warps * GROUP_WIDTH),
        swizzle=tma_swizzle(cfg),
    )


class FpropLaunch:
    """A loaded fprop variant bound to one layer, its batch included: `launch(out, x, weight,
    bias, stream)` runs out (N, C, P, Q) <- conv(x, weight) + bias on NHWC memory. The grid is
    computed once; a call only packs the arguments and launches (the ops keep one per call
    signature). A TMA_ROWS variant also takes x's tensor map (`row_maps`: encoded once per
    address)."""

    __slots__ = ("_launch", "_n", "_maps")

    def __init__(self, kernel: Any, p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> None:
        self._launch = kernel.bind(grid(p, cfg))
        self._n = p.n
        self._maps = row_maps(kernel, p, cfg)

    def __call__(self, out: Any, x: Any, weight: Any, bias: Any, stream: int) -> None:
        b = weight if bias is None else bias
        if self._maps is None:
            self._launch((out, x, weight, b, self._n), stream)
        else:
            self._launch((out, x, weight, b, self._n, self._maps.get(x.data_ptr())), stream)


def launch(
    kernel: Any,
    p: Conv2dGw8Params,
    cfg: Conv2dGw8Config,
    out: Any,
    x: Any,
    weight: Any,
    bias: Any,
    stream: int,
) -> None:
    """Runs a loaded fprop variant once (`FpropLaunch`): out (N, C, P, Q) <- conv(x, weight) +
    bias, NHWC memory. `kernel` is a LoadedKernel for (p, cfg) (any batch size: the batch is
    the grid's y). A TMA-rows variant encodes x's tensor map on every call: for tests, where the
    ops bind one FpropLaunch per call signature."""
    FpropLaunch(kernel, p, cfg)(out, x, weight, bias, stream)


# ---- dgrad: the same kernel on the layer's input-gradient problem -----------------------------


def on_dgrad_problem(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """fprop's `fn(p, ...)` for the input gradient of layer p: `fn` on the fprop problem of dy
    (`Conv2dGw8Params.dgrad_as_fprop`), named `name` in this module (so it pickles by reference
    and reads as itself in tracebacks). The dgrad family is fprop's functions through this one
    adapter (its spec the transposed-weight variant), so the two cannot drift apart."""

    @functools.wraps(fn)
    def on_dgrad(p: Conv2dGw8Params, *args: Any, **kwargs: Any) -> Any:
        return fn(p.dgrad_as_fprop(), *args, **kwargs)

    on_dgrad.__name__ = on_dgrad.__qualname__ = name
    return on_dgrad


def _transposed_spec(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any = None) -> KernelSpec:
    """The dgrad variant of `spec`: it reads the forward weight as w[g8+c, k, R-1-r, S-1-s]."""
    return spec(p, cfg, dev, transposed=True)


def _transposed_features(p: Conv2dGw8Params, cfg: Conv2dGw8Config, dev: Any) -> dict[str, float]:
    """`features` of the dgrad problem, and the carveout percent the variant prefers (100 for
    the driver's choice, which at the variants offered at a carveout is the larger split). The
    CTAs the carveout holds (`carveout_ctas`) as a feature too ranked worse: held-out whole-space
    max 1.230 against 1.211, autotune's 1.152 against 1.107 (docs/tuning.md, "Thirtieth
    session")."""
    return {**features(p, cfg, dev), "carveout": _carveout_feature(cfg)}


def _transposed_feature_columns(
    p: Conv2dGw8Params, cfgs: Sequence[Conv2dGw8Config], dev: Any
) -> dict[str, Sequence[float]]:
    """`_transposed_features` of every config of `cfgs` as columns (`feature_columns`)."""
    columns = feature_columns(p, cfgs, dev)
    columns["carveout"] = [_carveout_feature(cfg) for cfg in cfgs]
    return columns


def _carveout_feature(cfg: Conv2dGw8Config) -> float:
    """The carveout percent a variant prefers, 100 for the driver's choice."""
    return float(100 if cfg.carveout == -1 else cfg.carveout)


dgrad_configs = on_dgrad_problem(configs, "dgrad_configs")
dgrad_heuristic = on_dgrad_problem(heuristic, "dgrad_heuristic")
dgrad_spec = on_dgrad_problem(_transposed_spec, "dgrad_spec")
dgrad_stats = on_dgrad_problem(stats, "dgrad_stats")
dgrad_features = on_dgrad_problem(_transposed_features, "dgrad_features")
dgrad_feature_columns = on_dgrad_problem(_transposed_feature_columns, "dgrad_feature_columns")


class DgradLaunch:
    """A loaded dgrad variant bound to one layer, its batch included: `launch(grad_input,
    grad_output, weight, stream)` runs grad_input <- conv(grad_output, transpose_weight(weight))
    with the forward `weight` (C, 8, R, S) as is: the kernel reads it transposed and rotated (see
    `transpose_weight` in spio.kernels.conv2d_gw8.reference for the same map on the host). A
    TMA_ROWS variant also takes grad_output's tensor map (`row_maps`)."""

    __slots__ = ("_launch", "_n", "_maps")

    def __init__(self, kernel: Any, p: Conv2dGw8Params, cfg: Conv2dGw8Config) -> None:
        q = p.dgrad_as_fprop()
        self._launch = kernel.bind(grid(q, cfg))
        self._n = p.n
        self._maps = row_maps(kernel, q, cfg)

    def __call__(self, grad_input: Any, grad_output: Any, weight: Any, stream: int) -> None:
        if self._maps is None:
            self._launch((grad_input, grad_output, weight, weight, self._n), stream)
        else:
            dy_map = self._maps.get(grad_output.data_ptr())
            self._launch((grad_input, grad_output, weight, weight, self._n, dy_map), stream)


def dgrad_launch(
    kernel: Any,
    p: Conv2dGw8Params,
    cfg: Conv2dGw8Config,
    grad_input: Any,
    grad_output: Any,
    weight: Any,
    stream: int,
) -> None:
    """Runs a loaded dgrad variant once (`DgradLaunch`; a TMA-rows variant encodes dy's tensor
    map on every call: for tests, where the ops bind one DgradLaunch per call signature)."""
    DgradLaunch(kernel, p, cfg)(grad_input, grad_output, weight, stream)


FPROP = KernelDef(
    name="conv2d_gw8_fprop",
    params_type=Conv2dGw8Params,
    config_type=Conv2dGw8Config,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    features=features,
    feature_columns=feature_columns,
    examples=examples,
    sample_params=_tune.sample_params,
    make_runner=_tune.make_fprop_runner,
    compiled_params=Conv2dGw8Params.variant,
    # The output's bits do not depend on the config: every element sums its taps in the same
    # order (input rows, then filter columns, 8 channels per MMA) whatever the tiling.
    select_key=select_at_batch_bucket,
)

DGRAD = KernelDef(
    name="conv2d_gw8_dgrad",
    params_type=Conv2dGw8Params,
    config_type=Conv2dGw8Config,
    configs=dgrad_configs,
    spec=dgrad_spec,
    heuristic=dgrad_heuristic,
    stats=dgrad_stats,
    features=dgrad_features,
    feature_columns=dgrad_feature_columns,
    examples=examples,
    sample_params=_tune.sample_params,
    make_runner=_tune.make_dgrad_runner,
    compiled_params=Conv2dGw8Params.variant,
    select_key=select_at_batch_bucket,
)
