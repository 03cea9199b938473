"""conv2d_gw8 wgrad tiling geometry: what a (params, config, device) triple implies.

Tile widths and ring depths, shared memory and live registers, the balanced row choices, the
split plan and grid, and the per-SM traffic terms the heuristic and the features read. Pure
functions of their arguments; `conv2d_gw8.wgrad` builds the config space, heuristic, spec and
launch on them and re-exports the names other modules reach through it (`split_plan`,
`num_slices`, ...). Dependencies point one way: this module must not import `conv2d_gw8.wgrad`.
"""

from __future__ import annotations

import math
from typing import Any

from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    Conv2dGw8Params,
    Conv2dGw8WgradConfig,
    ctas_per_sm,
    tma_capable,
)

# Target rows per task; each is balanced over P (`block_p_choices`), so 16 at P = 56 is 14 (four
# chunks, no ragged fifth) and 32 at P = 56 is 28.
BLOCK_P_CHOICES = (4, 8, 16, 32)
REG_OVERHEAD = 40  # ptxas registers beyond live_regs, measured on sm_90 (72 at 3x3)
MAX_CTAS_PER_SM = 32
# x and dy rows through the tensor memory accelerator on sm_90+ (`tma_rows`): one thread copies
# each row as one box instead of every thread issuing 16-byte cp.async copies, whose stream
# read at 1.1-1.3 TB/s from DRAM or L2 alike in fprop's probe (docs/ops/conv2d_gw8.md). False:
# the cp.async kernel everywhere (a sweep's --cp-async).
TMA_ROWS = True
# ... where `params.tma_capable` (sm_90+, CTAs of 2+ warps, at most 9 taps: fprop's measured rule)
# and rows of at most TMA_MAX_BOX pixels (the tensor map's limit per box dimension).
TMA_MAX_BOX = 256
# A row's TMA coordinate is image * H + h, a signed 32-bit integer.
TMA_MAX_ROWS = 2**31 - 1


def s_pairs(p: Conv2dGw8Params) -> int:
    return (p.s + 1) // 2


def tile_w(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    """x columns a tile reads: (BLOCK_Q - 1) * stride + 2 * S_PAIRS (the last s pair's second
    column included)."""
    return (cfg.block_q - 1) * p.stride_w + 2 * s_pairs(p)


def dy_rows(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    return p.r + cfg.stages - 1


def tma_rows(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> bool:
    """Whether the variant copies its x and dy rows with TMA (the kernel's TMA_ROWS): where
    `params.tma_capable` (sm_90+, CTAs of 2+ warps, at most 9 taps), for rows of at most
    TMA_MAX_BOX pixels. Off when TMA_ROWS is False; where it is off the kernel is the cp.async
    one, instruction for instruction."""
    return (
        TMA_ROWS
        and tma_capable(p, cfg.warps, dev)
        and tile_w(p, cfg) <= TMA_MAX_BOX
        and cfg.block_q <= TMA_MAX_BOX
    )


def stage_w(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """Pixels per shared-memory x stage: TILE_W, rounded up to 8 for TMA_ROWS (each stage starts
    on a swizzle period of 8 pixels x WARPS x 16 bytes; block_q, a dy slot's width, is a
    multiple of 8 already)."""
    return _stage_w(tile_w(p, cfg), tma_rows(p, cfg, dev))


def _stage_w(tw: int, tma: bool) -> int:
    return -(-tw // 8) * 8 if tma else tw


def tma_swizzle(cfg: Conv2dGw8WgradConfig) -> int:
    """The TMA swizzle span (bytes) of a TMA_ROWS row: one pixel's WARPS x 16 bytes, so the 8
    pixels an ldmatrix reads of one warp's group sit in 8 bank groups."""
    return 16 * cfg.warps


def row_align(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """Alignment (bytes) of the shared-memory rings: the swizzle's period for TMA_ROWS (8 pixels
    of WARPS x 16 bytes: TMA swizzles by shared-memory address bits), else 16."""
    return _row_align(cfg.warps, tma_rows(p, cfg, dev))


def _row_align(warps: int, tma: bool) -> int:
    return 128 * warps if tma else 16


def smem_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any = None) -> int:
    """x ring (STAGES rows) plus dy ring (R + STAGES - 1 rows), 16 B per pixel and group; after
    the main loop the same memory stages the CTA's fp32 partial (WARPS x 8 x 8 x R x S).
    TMA_ROWS (`tma_rows`, which needs `dev`) rounds x rows up to 8 pixels and adds the slack that
    aligns the rings to the swizzle's period (`row_align`) and one mbarrier per stage, past
    both the rings and the partial's staging."""
    per_stage, fixed, floor, per_stage_tma, fixed_tma = smem_terms(p, cfg, dev)
    return max(cfg.stages * per_stage + fixed, floor) + cfg.stages * per_stage_tma + fixed_tma


def smem_terms(
    p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any
) -> tuple[int, int, int, int, int]:
    """`smem_bytes` as terms that do not depend on the stages: (x and dy row bytes per stage, the
    dy ring's other R - 1 rows, the partial's staging, TMA's mbarrier per stage, TMA's alignment
    slack); smem_bytes = max(STAGES * per stage + rows, staging) + STAGES * mbarrier + slack.
    A new shape's selection lists and describes the whole space (`wgrad.configs`,
    `wgrad.feature_columns`): they take these once per tile, the TMA rule with them."""
    tma = tma_rows(p, cfg, dev)
    row = cfg.warps * 16  # bytes per pixel
    per_stage = row * (_stage_w(tile_w(p, cfg), tma) + cfg.block_q)
    fixed = (p.r - 1) * row * cfg.block_q
    if tma:
        return per_stage, fixed, partial_stage_bytes(p, cfg), 8, _row_align(cfg.warps, tma)
    return per_stage, fixed, partial_stage_bytes(p, cfg), 0, 0


def partial_stage_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    return cfg.warps * GROUP_WIDTH * GROUP_WIDTH * p.r * p.s * 4


def live_regs(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    return p.r * s_pairs(p) * 4 + s_pairs(p) * 2 + 4


def block_p_choices(p: Conv2dGw8Params) -> list[int]:
    """Rows per task: each target of BLOCK_P_CHOICES spread evenly over P, ceil(P / ceil(P /
    target)), so the last chunk of an image is as tall as the others where P allows."""
    return sorted({math.ceil(p.p / math.ceil(p.p / bp)) for bp in BLOCK_P_CHOICES})


def task_rows(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    """x rows the kernel streams per task (TILE_H): (BLOCK_P - 1) * stride + R, less the trailing
    padding rows when one chunk covers P (every task starts at row 0, so rows past IN_H + PAD_H
    - 1 feed nothing; at 7x7, k7, pad 3: 10 rows instead of 13); never fewer than the rows
    that load the task's dy rows ((BLOCK_P - 1) * stride + 1)."""
    rows = (cfg.block_p - 1) * p.stride_h + p.r
    if p_chunks(p, cfg) == 1:
        rows = min(rows, max((cfg.block_p - 1) * p.stride_h + 1, p.h + p.pad_h))
    return rows


def q_tiles(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    return math.ceil(p.q / cfg.block_q)


def p_chunks(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    return math.ceil(p.p / cfg.block_p)


def group_blocks(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    """CTAs along the channel groups: ceil(groups / warps) (the last one has idle warps when
    warps does not divide the groups: the kernel's RAGGED_GROUPS)."""
    return -(-p.groups // cfg.warps)


def split_plan(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> tuple[int, int, int]:
    """(tasks, tasks per split, splits): splits_per_sm CTAs per SM over the whole grid, at most
    one split per task, and every split non-empty."""
    per_split_grid = q_tiles(p, cfg) * group_blocks(p, cfg)
    return plan_splits(p.n * p_chunks(p, cfg), per_split_grid, cfg.splits_per_sm, dev.sm_count)


def plan_splits(
    tasks: int, per_split_grid: int, splits_per_sm: int, sm_count: int
) -> tuple[int, int, int]:
    """`split_plan` from its terms (selection's `features` has them at hand)."""
    splits = min(tasks, max(1, (splits_per_sm * sm_count) // per_split_grid))
    tps = -(-tasks // splits)
    return tasks, tps, -(-tasks // tps)


def num_slices(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """Partial slices the reduction sums: splits x column tiles."""
    return split_plan(p, cfg, dev)[2] * q_tiles(p, cfg)


def max_slices(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """The most partial slices a launch of (layer, config, device) writes at any batch size:
    `num_slices` once the tasks outnumber the wanted splits. It does not depend on the batch,
    so what is derived from it (the reduction's CTA size) serves every batch size."""
    per_split_grid = q_tiles(p, cfg) * group_blocks(p, cfg)
    return max(1, (cfg.splits_per_sm * dev.sm_count) // per_split_grid) * q_tiles(p, cfg)


def grid(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> tuple[int, int, int]:
    return (q_tiles(p, cfg) * group_blocks(p, cfg), split_plan(p, cfg, dev)[2], 1)


def row_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> int:
    """Bytes of one pipeline stage: an x row of the tile and a dy row."""
    return cfg.warps * (tile_w(p, cfg) + cfg.block_q) * 16


def resident_ctas(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """CTAs of this config one SM runs at once (see `ctas_per_sm`)."""
    g = grid(p, cfg, dev)
    return ctas_per_sm(
        g[0] * g[1],
        live_regs(p, cfg) + REG_OVERHEAD,
        cfg.warps,
        smem_bytes(p, cfg, dev),
        dev,
        MAX_CTAS_PER_SM,
    )


def in_flight_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """x + dy bytes in flight per SM in the steady state: STAGES - 1 rows per resident CTA."""
    return resident_ctas(p, cfg, dev) * (cfg.stages - 1) * row_bytes(p, cfg)


def partial_bytes(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> int:
    """Bytes of fp32 partials (weight and bias) the wgrad kernel writes."""
    return num_slices(p, cfg, dev) * (p.c * GROUP_WIDTH * p.r * p.s + p.c) * 4
