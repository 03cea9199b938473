"""conv2d_gw8 weight-gradient kernels: partial sums per split, then an ordered reduction.

`WGRAD` (spio/src/conv2d_gw8_wgrad.cu) writes one fp32 partial of dw (and db) per (split, column
tile); `wgrad_reduce.WGRAD_REDUCE` sums them in slice order. Same inputs
give the same bits: there are no float atomics and the summation order is fixed by the config
and the device's SM count.

This module holds the config space, heuristic, spec, stats, features and launch; the tiling
geometry they rest on (tile sizes, shared memory, registers, split plan, grid) is in
`spio.kernels.conv2d_gw8.wgrad_tiling`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from spio.kernels.conv2d_gw8 import tune as _tune
from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    Conv2dGw8Params,
    Conv2dGw8WgradConfig,
    idle_warps,
    select_at_batch_bucket,
    warps_allowed,
)

# The tiling geometry; `name as name` re-exports what ops, benches and tests reach as
# spio.kernels.conv2d_gw8.wgrad.<name>.
from spio.kernels.conv2d_gw8.wgrad_tiling import BLOCK_P_CHOICES as BLOCK_P_CHOICES
from spio.kernels.conv2d_gw8.wgrad_tiling import (
    TMA_MAX_ROWS,
    grid,
    group_blocks,
    in_flight_bytes,
    partial_bytes,
    plan_splits,
    row_align,
    s_pairs,
    smem_terms,
    task_rows,
    tma_swizzle,
)
from spio.kernels.conv2d_gw8.wgrad_tiling import block_p_choices as block_p_choices
from spio.kernels.conv2d_gw8.wgrad_tiling import dy_rows as dy_rows
from spio.kernels.conv2d_gw8.wgrad_tiling import live_regs as live_regs
from spio.kernels.conv2d_gw8.wgrad_tiling import num_slices as num_slices
from spio.kernels.conv2d_gw8.wgrad_tiling import p_chunks as p_chunks
from spio.kernels.conv2d_gw8.wgrad_tiling import q_tiles as q_tiles
from spio.kernels.conv2d_gw8.wgrad_tiling import smem_bytes as smem_bytes
from spio.kernels.conv2d_gw8.wgrad_tiling import split_plan as split_plan
from spio.kernels.conv2d_gw8.wgrad_tiling import stage_w as stage_w
from spio.kernels.conv2d_gw8.wgrad_tiling import tile_w as tile_w
from spio.kernels.conv2d_gw8.wgrad_tiling import tma_rows as tma_rows
from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats

SOURCE = "conv2d_gw8_wgrad.cu"
# 8: one mma column chunk, only for Q <= NARROW_Q_MAX (wider, each 8 columns would re-read
# 2*ceil(S/2) - 1 halo columns of x: 37% more x at 3x3).
BLOCK_Q_CHOICES = (8, 16, 32, 64, 128)
NARROW_Q_MAX = 16
WARP_CHOICES = (1, 2, 4)
# 8 warps read a whole 128-byte line per pixel at C = 64 (one L2 request of 4 sectors). In the
# default space only where they copy rows by TMA (`tma_rows`: on an H100 they tied with 4 warps
# at C64 56² and C128 28² and were 10% faster at C256 14² N256, fifteenth session); elsewhere a
# sweep passes `warp_choices=WIDE_WARP_CHOICES` to `configs`.
WIDE_WARP_CHOICES = (1, 2, 4, 8)
TMA_WIDE_WARPS = 8
STAGE_CHOICES = (2, 3, 4, 6, 8)
# CTAs per SM over the whole grid; a config takes those giving WARPS_PER_SM_MIN..MAX warps per
# SM (1 warp: 4..32 splits; 4 warps: 1..8). At layers whose group count is odd (C 56, 152, 440:
# one warp per CTA) the old ceiling of 4 splits left 4 warps per SM, latency-bound: on an H200,
# C440 14^2 stride 2 N128 took 75.0 us at 4 splits, 41.5 at 8, 32.5 at 16, 29.1 at 32 (cuDNN
# 44.0); C152 28^2 stride 2 N256 114.9 / 68.7 / 59.3 / 56.4 (cuDNN 181).
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32)
WARPS_PER_SM_MIN, WARPS_PER_SM_MAX = 4, 32
HEURISTIC_WARPS_PER_SM = 16
MAX_LIVE_REGS = 160  # R * ceil(S/2) * 4 accumulators + ceil(S/2) * 2 operands + bias
# Bytes of x and dy rows the heuristic wants in flight per SM (see conv2d_gw8.fprop): the first
# H100 run had 9-33 KB and reached 19-30% of copy bandwidth at 3x3.
IN_FLIGHT_BYTES = 48 * 1024
# Tasks of at most this many x rows run their rows fully unrolled (every row's conditions and
# the copy look-ahead compile-time constants); longer ones a chunk of rows at a time. As fprop's
# MAX_STEP_ROWS: a ceiling on the unrolled loop's code size.
MAX_TASK_ROWS = 24
# The kernel addresses x and dy as 32-bit offsets, in 16-byte units, from the tensors' pointers
# (a task's two offsets cost ptxas half the registers of two pointers): at most 2^32 units
# (64 GiB) in either tensor, batch included.
MAX_TENSOR_UNITS = 2**32


def check_tensor_size(p: Conv2dGw8Params) -> None:
    """Raises ValueError when x or dy of the layer, batch included, is too large for the wgrad
    kernel's 32-bit offsets (MAX_TENSOR_UNITS 16-byte units)."""
    units = p.n * max(p.h * p.w, p.p * p.q) * (p.c // GROUP_WIDTH)
    if units > MAX_TENSOR_UNITS:
        raise ValueError(
            f"conv2d_gw8 wgrad: x or dy of {p} holds {units} 16-byte units, above 2^32 (the "
            "kernel's offsets are 32-bit); run the weight gradient over smaller batches and sum"
        )


def configs(
    p: Conv2dGw8Params,
    dev: Any,
    warp_choices: tuple[int, ...] | None = None,
    with_idle_warps: bool = True,
) -> list[Conv2dGw8WgradConfig]:
    """Every valid wgrad config: block rows from `block_p_choices` (balanced over P), column
    tiles of BLOCK_Q_CHOICES up to the first covering Q (8 only up to NARROW_Q_MAX),
    `warp_choices` dividing the groups (default: WARP_CHOICES, and TMA_WIDE_WARPS where those
    configs copy rows by TMA), STAGE_CHOICES (above 3 only up to one task's rows),
    SPLIT_CHOICES giving WARPS_PER_SM_MIN..MAX warps per SM (`split_choices`), shared memory and
    registers within the device's limits.

    `with_idle_warps` (default) also takes warps that leave the last group block idle warps
    (`warps_allowed`, the kernel's RAGGED_GROUPS: odd group counts get CTAs of 2, 4 and, where
    they copy rows by TMA, 8 warps). In the default space since the twentieth session: with TMA
    rows (2+ warps) they beat the 1-warp cp.async CTAs those layers ran before by 11-34% at 7 of
    9 RegNet layers (docs/ops/conv2d_gw8.md)."""
    out: list[Conv2dGw8WgradConfig] = []
    tma_only: tuple[int, ...] = ()
    if warp_choices is None:
        warp_choices, tma_only = (*WARP_CHOICES, TMA_WIDE_WARPS), (TMA_WIDE_WARPS,)
    p_choices = block_p_choices(p)
    q_choices = []
    for bq in BLOCK_Q_CHOICES:
        if bq == 8 and p.q > NARROW_Q_MAX:
            continue
        q_choices.append(bq)
        if bq >= p.q:
            break
    warps_choices = [  # a warp count without a split choice (above WARPS_PER_SM_MAX) has none
        w
        for w in warp_choices
        if (not p.groups % w or (with_idle_warps and warps_allowed(p.groups, w)))
        and split_choices(w)
    ]
    smem_limit = dev.max_smem_per_block_optin
    # A new shape's selection lists the whole space: what does not depend on the stages or the
    # splits (the TMA rule, the registers, the shared memory's terms, `smem_terms`) is taken
    # once per tile, on its first config, and a tile's configs at one stage count are shared
    # (`_stage_configs`).
    for block_p in p_choices:
        # deeper than one task's rows (most splits run one task): above 3 stages, at most these
        max_stages = (block_p - 1) * p.stride_h + p.r
        stage_choices = [s for s in STAGE_CHOICES if s <= 3 or s <= max_stages]
        for block_q in q_choices:
            for warps in warps_choices:
                first = _stage_configs(block_p, block_q, warps, stage_choices[0])[0]
                if warps in tma_only and not tma_rows(p, first, dev):
                    continue
                if live_regs(p, first) > MAX_LIVE_REGS:
                    continue
                per_stage, fixed, floor, per_stage_tma, fixed_tma = smem_terms(p, first, dev)
                for stages in stage_choices:
                    smem = max(stages * per_stage + fixed, floor) + stages * per_stage_tma
                    if smem + fixed_tma <= smem_limit:  # `smem_bytes`
                        out += _stage_configs(block_p, block_q, warps, stages)
    return out


@functools.lru_cache(maxsize=8192)
def _stage_configs(
    block_p: int, block_q: int, warps: int, stages: int
) -> tuple[Conv2dGw8WgradConfig, ...]:
    """`configs`' configs of one tile and stage count, one per `split_choices(warps)`, in order.
    A config is frozen, so one object serves every space that lists it: a lookup of ~0.1 us
    for the whole tuple instead of the ~0.7 that building and validating each config takes. The
    spaces draw from few: 1656 (tile, stages) over 2400 sampled layers on four GPUs (H100, A100,
    L4, H200), at most 32 block_p x 5 block_q x 4 warps x 5 stages."""
    return tuple(
        Conv2dGw8WgradConfig(block_p, block_q, warps, stages, s) for s in split_choices(warps)
    )


def split_choices(warps: int) -> tuple[int, ...]:
    """The splits per SM a config of `warps` warps per CTA takes: those of SPLIT_CHOICES with
    WARPS_PER_SM_MIN <= warps * splits <= WARPS_PER_SM_MAX (1 warp: 4..32; 4 warps: 1..8)."""
    return tuple(s for s in SPLIT_CHOICES if WARPS_PER_SM_MIN <= warps * s <= WARPS_PER_SM_MAX)


def heuristic(p: Conv2dGw8Params, dev: Any) -> Conv2dGw8WgradConfig:
    """The config used until a performance model exists.

    Rule: the smallest column tile covering Q up to 64 (no column partials for most layers);
    4 warps when the groups allow; the tallest balanced block_p whose tasks still give every SM
    two CTAs, else the shortest (an interior task re-reads R - 1 halo rows of x: 25% more x at
    8 rows and 3x3, 7% at 28); splits per SM for HEURISTIC_WARPS_PER_SM warps per SM (1 warp:
    16 splits; co-resident CTAs hide each other's barriers and latency); then the fewest stages
    that put IN_FLIGHT_BYTES of x + dy rows in flight per SM (the first H100 run had 9-33 KB);
    when even the deepest falls short, twice the splits if their fp32 partials' traffic stays
    within the activation traffic (`_partials_fit`); and halving the splits while it does not,
    down to the fewest the space has for the warps (4 for 1-warp CTAs, whose partials may then
    still exceed the activations: about 1.6% of sampled layers).
    """
    valid = configs(p, dev)
    if not valid:
        raise ValueError(f"conv2d_gw8 wgrad: no valid config for {p} on {dev.name}")
    warps = max(w for w in WARP_CHOICES if p.groups % w == 0)
    block_q = next((bq for bq in BLOCK_Q_CHOICES if bq >= p.q), 64)
    block_q = min(block_q, 64)
    block_p = _tallest_block_p(p, block_q, warps, dev)
    stages = 3 if block_p >= 8 else 2  # more rows in flight to cover DRAM latency (see fprop)
    splits = max(1, HEURISTIC_WARPS_PER_SM // warps)

    def distance(c: Conv2dGw8WgradConfig) -> tuple:
        return (
            abs(c.warps - warps),
            abs(c.block_q - block_q),
            abs(c.block_p - block_p),
            c.stages != stages,
            abs(math.log2(c.splits_per_sm / splits)),
        )

    best = min(valid, key=distance)
    best = _deep_enough(p, best, valid, dev)
    # The fp32 partials are written once and read once by the reduction: while that exceeds the
    # activation traffic (large C·R·S, small N·P·Q), halve the splits.
    while best.splits_per_sm > 1 and not _partials_fit(p, best, dev):
        fewer = replace(best, splits_per_sm=best.splits_per_sm // 2)
        if fewer not in valid:
            break
        best = fewer
    return best


def _tallest_block_p(p: Conv2dGw8Params, block_q: int, warps: int, dev: Any) -> int:
    """The heuristic's rows per task: the tallest balanced choice whose tasks still give every SM
    two CTAs (one split runs at least one task), else the shortest."""
    per_task = math.ceil(p.q / block_q) * (p.groups // warps)
    choices = block_p_choices(p)
    for bp in reversed(choices):
        if p.n * math.ceil(p.p / bp) * per_task >= 2 * dev.sm_count:
            return bp
    return choices[0]


def _partials_fit(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> bool:
    """Whether the fp32 partials' traffic (written once, read once by the reduction) stays
    within the activation traffic. Measured on an H200 (C440 7^2 N128, 1 warp): 16 splits per
    SM, whose partials are 0.42 of the activations, ran 21.9 us against 43.6 at 4 (0.10)."""
    return 2 * partial_bytes(p, cfg, dev) <= stats(p).bytes_moved


def _deep_enough(
    p: Conv2dGw8Params, base: Conv2dGw8WgradConfig, valid: list, dev: Any
) -> Conv2dGw8WgradConfig:
    """`base` with the fewest stages reaching IN_FLIGHT_BYTES (trying twice the splits per SM
    when they fall short and the partials stay small), else the deepest valid stages."""

    def deepest(splits: int) -> Conv2dGw8WgradConfig | None:
        found = None
        for stages in STAGE_CHOICES:
            cand = replace(base, stages=stages, splits_per_sm=splits)
            if cand not in valid:
                continue
            found = cand
            if in_flight_bytes(p, cand, dev) >= IN_FLIGHT_BYTES:
                break
        return found

    chosen = deepest(base.splits_per_sm) or base
    doubled = 2 * base.splits_per_sm
    short = in_flight_bytes(p, chosen, dev) < IN_FLIGHT_BYTES
    if short and doubled in split_choices(base.warps):
        more = deepest(doubled)
        if (
            more is not None
            and _partials_fit(p, more, dev)
            and in_flight_bytes(p, more, dev) > in_flight_bytes(p, chosen, dev)
        ):
            return more
    return chosen


def fusable(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> bool:
    """Whether the wgrad variant of `cfg` can also write the input gradient (FUSE_DGRAD): an
    image's last task streams up to its last input row; row chunks (block_p < P) only where
    their streams meet or overlap (R >= stride: the kernel's task then also holds the dy rows
    past its chunk that its last dx rows read, and writes the dx rows no earlier chunk holds
    whole); and one column tile (a power of two) whose zero-filled columns past Q take the dy
    columns outside the image, left of it (wrapped) and right of it (the kernel's column
    wrap, mod block_q)."""
    bq = cfg.block_q
    chunks = p_chunks(p, cfg)
    left = max(0, -(-(p.s - 1 - p.pad_w) // p.stride_w))  # dy columns below 0
    right = (p.w - 1 + p.pad_w) // p.stride_w  # the last dy column a dx column reads
    last_h0 = (chunks - 1) * cfg.block_p * p.stride_h - p.pad_h  # the last task's first row
    return (
        p.pad_h >= 0  # the op's layers (the kernel's row bookkeeping assumes them)
        and p.dilate_h == p.dilate_w == 1
        and (chunks == 1 or p.r >= p.stride_h)
        and last_h0 + task_rows(p, cfg) >= p.h
        and bq & (bq - 1) == 0
        and bq - left >= p.q
        and right < bq
    )


# Whether the backward fuses dgrad into wgrad (`may_fuse`, then `fuses` with the config selected
# for WGRAD_DGRAD). Measured on an H200 against the op's dgrad + wgrad (docs/ops/conv2d_gw8.md,
# benchmarks/fused_backward_rule.py, benchmarks/data/yardstick/fused_backward/).
# - Row chunks (block_p < P; only a model of the family picks them), thirty-ninth session: the
#   fastest of the chunked configs timed (10 or more per layer) beat dgrad + wgrad at every
#   stride-1 layer (62, 0.55-0.99 of its time, 112^2 included) and at every stride-2 layer of
#   at most 56 input rows (20, 0.58-0.91), but lost at 5 of the 12 stride-2 layers above (C48
#   112^2 N128 1.18x, 224^2 up to 1.6x: there x and dx are 4 times dy, and fusing saves only
#   dy's second read). Held out, on 40 layers with every config timed, the picks under this
#   rule summed to 2073 us against 2374 for dgrad + wgrad.
# - Whole images (the heuristic's too, on GPUs without a model), thirty-eighth session: where
#   the tasks, each streaming its image's H input rows, still fill the GPU. Over 348 layers: at
#   P <= 14 output rows the fused kernel won at 221 of 230, stride 1 or 2, any batch; at more
#   rows, at H <= 28 at 40 of the 43 whose images' groups gave every SM two, at H <= 56 at 16
#   of the other 21 whose config's tasks gave every SM two, and at 13 of the 41 left; at H >
#   56 at 3 of 13.
# The thresholds were chosen on these same layers.
FUSE_SHORT_ROWS = 14  # output rows P: whole images fused at any batch
FUSE_MID_ROWS = 28  # input rows H: whole images fused where n * groups gives FUSE_MIN_TASKS_PER_SM
FUSE_MAX_ROWS = 56  # input rows H: whole images fused where the config's tasks do; never above
FUSE_MIN_TASKS_PER_SM = 2
# Measured at 3x3 only: kernels of at most this many rows and columns fuse (the kernel takes
# 5x5, 150-174 registers on sm_90, and 1x5 or 7x1 too, none of them timed).
FUSE_MAX_KERNEL = 3
# The kernel also takes strides (1, 2) and (2, 1), never timed.
FUSE_STRIDES = ((1, 1), (2, 2))


def may_fuse(p: Conv2dGw8Params, dev: Any) -> bool:
    """Whether the backward of layer p (batch included) may run the fused kernel, before its
    config is selected: a kernel of at most FUSE_MAX_KERNEL rows and columns, a stride of
    FUSE_STRIDES (at stride 2 at most FUSE_MAX_ROWS input rows), and a whole-image config
    that can fuse (`fused_configs`, which `fused_heuristic` takes); `fuses` decides with the
    selected config."""
    if max(p.r, p.s) > FUSE_MAX_KERNEL or p.stride not in FUSE_STRIDES:
        return False
    if p.stride_h > 1 and p.h > FUSE_MAX_ROWS:
        return False
    # A whole-image config too: the heuristic (GPUs without a model) picks only those. The
    # layers that fuse only in row chunks (a ragged last chunk reaches an input row a whole
    # image's stream stops short of: 3x3 'valid' at stride 2 and even H) run dgrad + wgrad.
    return bool(fused_configs(p, dev, chunked=False))


def fuses(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> bool:
    """Whether the backward of layer p runs the fused kernel of config `cfg` (a fused config,
    selected for WGRAD_DGRAD where `may_fuse` holds): with row chunks (block_p < P) at stride
    1, or at most FUSE_MAX_ROWS input rows; with whole images at most FUSE_MAX_ROWS input
    rows, and at most FUSE_SHORT_ROWS output rows or FUSE_MIN_TASKS_PER_SM tasks per SM,
    counted at one warp per CTA (n * groups) up to FUSE_MID_ROWS input rows, else at the
    config's warps."""
    if cfg.block_p < p.p:
        return p.stride_h == 1 or p.h <= FUSE_MAX_ROWS
    if p.h > FUSE_MAX_ROWS:
        return False
    least = FUSE_MIN_TASKS_PER_SM * dev.sm_count
    if p.p <= FUSE_SHORT_ROWS or (p.h <= FUSE_MID_ROWS and p.n * p.groups >= least):
        return True
    return p.n * group_blocks(p, cfg) >= least


def fused_configs(p: Conv2dGw8Params, dev: Any, chunked: bool = True) -> list[Conv2dGw8WgradConfig]:
    """The configs that also write dx (`fusable`; WGRAD_DGRAD's space): the default space's
    column tiles, warps, stages and splits with whole-image tasks (block_p = P), and (unless
    not `chunked`) the space's configs of row chunks (block_p < P) that can fuse as they are.
    Empty where the layer cannot fuse."""
    out: dict[Conv2dGw8WgradConfig, None] = {}
    for c in configs(p, dev):
        for cand in (replace(c, block_p=p.p), c) if chunked else (replace(c, block_p=p.p),):
            if fusable(p, cand) and smem_bytes(p, cand, dev) <= dev.max_smem_per_block_optin:
                out[cand] = None
    return list(out)


def fused_heuristic(p: Conv2dGw8Params, dev: Any) -> Conv2dGw8WgradConfig:
    """The fused config used until a performance model of WGRAD_DGRAD exists: `heuristic`'s
    wgrad config with whole-image tasks, or the whole-image fused config nearest it (warps,
    column tile, stages, splits per SM, in that order). Never row chunks: where whole images
    leave the GPU short of work, `fuses` then runs dgrad + wgrad (only a model picks chunks)."""
    valid = fused_configs(p, dev, chunked=False)
    if not valid:
        raise ValueError(f"conv2d_gw8 wgrad_dgrad: no fused config for {p} on {dev.name}")
    base = replace(heuristic(p, dev), block_p=p.p)

    def distance(c: Conv2dGw8WgradConfig) -> tuple:
        return (
            abs(c.warps - base.warps),
            abs(math.log2(c.block_q / base.block_q)),
            abs(c.stages - base.stages),
            abs(math.log2(c.splits_per_sm / base.splits_per_sm)),
        )

    return min(valid, key=distance)


def spec(
    p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any = None, fuse_dgrad: bool = False
) -> KernelSpec:
    """The compile-and-launch description of one wgrad variant (no batch size in it);
    `fuse_dgrad` (`fusable` layers) also writes dx, reading the weight (of p.wdtype)."""
    from spio.generators.compound_index import CompoundIndex
    from spio.generators.constant import Constant
    from spio.generators.dim import Dim
    from spio.generators.dtype import bfloat16, half, uint4
    from spio.generators.dtype import float as f32
    from spio.generators.macro import Macro
    from spio.generators.swizzle import Xor
    from spio.generators.tensor import Tensor
    from spio.generators.type_alias import Type

    elem = half if p.dtype == "float16" else bfloat16
    welem = f32 if p.wdtype == "float32" else elem
    if fuse_dgrad and not fusable(p, cfg):
        raise ValueError(f"conv2d_gw8 wgrad: {p} {cfg} cannot fuse the input gradient")
    H, W, P, Q, C = Dim(), Dim(), Dim(), Dim(), Dim()
    R, S, KO, CI, STAGE, DYROW = Dim(), Dim(), Dim(), Dim(), Dim(), Dim()
    C8 = C / GROUP_WIDTH
    GB, QB = C / (GROUP_WIDTH * cfg.warps), Q / cfg.block_q
    g = p.groups
    tma = tma_rows(p, cfg, dev)
    if tma:
        # TMA rows land pixel-major, WARPS x 16 bytes per pixel, swizzled so that the 8 pixels
        # an ldmatrix reads of one group sit in 8 bank groups: group ^ (pixel >> shift) % WARPS
        # with 8 pixels per swizzle period (TMA's 32/64/128-byte swizzle).
        bits = cfg.warps.bit_length() - 1
        smem_input = Tensor(
            (STAGE(cfg.stages), W(stage_w(p, cfg, dev)), C8(cfg.warps)),
            uint4,
            swizzle=Xor(W, C8, bits, 3 - bits),
        )
        smem_grad = Tensor(
            (DYROW(dy_rows(p, cfg)), Q(cfg.block_q), C8(cfg.warps)),
            uint4,
            swizzle=Xor(Q, C8, bits, 3 - bits),
        )
    else:
        smem_input = Tensor((STAGE(cfg.stages), C8(cfg.warps), W(tile_w(p, cfg))), uint4)
        smem_grad = Tensor((DYROW(dy_rows(p, cfg)), C8(cfg.warps), Q(cfg.block_q)), uint4)
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
        "STAGE": STAGE,
        "DYROW": DYROW,
        "C8": C8,
        "GB": GB,
        "QB": QB,
        "Elem": Type(elem),
        "WElem": Type(welem),
        "Input": Tensor((H(p.h), W(p.w), C8(g)), uint4),
        "Weight": Tensor(p.weight_dims(C8(g), KO(8), CI(8), R(p.r), S(p.s)), welem),
        "Grad": Tensor((P(p.p), Q(p.q), C8(g)), uint4),
        # The partials in the weight's layout: the reduction sums them flat into dw.
        "Partial": Tensor(p.weight_dims(C8(g), KO(8), CI(8), R(p.r), S(p.s)), f32),
        "BiasPartial": Tensor((C8(g), KO(8)), f32),
        "SmemInput": smem_input,
        "SmemGrad": smem_grad,
        "SmemPartial": Tensor(p.weight_dims(C8(cfg.warps), KO(8), CI(8), R(p.r), S(p.s)), f32),
        "BlockIdx": CompoundIndex(QB(q_tiles(p, cfg)), GB(group_blocks(p, cfg))),
        "GROUPS": Constant(g),
        "RAGGED_GROUPS": Constant(idle_warps(g, cfg.warps) > 0),
        "IN_H": Constant(p.h),
        "IN_W": Constant(p.w),
        "OUT_P": Constant(p.p),
        "OUT_Q": Constant(p.q),
        "KERNEL_R": Constant(p.r),
        "KERNEL_S": Constant(p.s),
        "S_PAIRS": Constant(s_pairs(p)),
        "PAD_H": Constant(p.pad_h),
        "PAD_W": Constant(p.pad_w),
        "STRIDE_H": Constant(p.stride_h),
        "STRIDE_W": Constant(p.stride_w),
        "HAS_BIAS": Constant(bool(p.has_bias)),
        "WARPS": Constant(cfg.warps),
        "STAGES": Constant(cfg.stages),
        "BLOCK_P": Constant(cfg.block_p),
        "BLOCK_Q": Constant(cfg.block_q),
        "TILE_H": Constant(task_rows(p, cfg)),
        "TILE_W": Constant(tile_w(p, cfg)),
        "DY_ROWS": Constant(dy_rows(p, cfg)),
        "P_CHUNKS": Constant(p_chunks(p, cfg)),
        "Q_TILES": Constant(q_tiles(p, cfg)),
        "MAX_TASK_ROWS": Constant(MAX_TASK_ROWS),
        # Rows by TMA (a macro: it adds the kernel's two tensor-map parameters), the boxes' bytes
        # and the rings' shared-memory alignment.
        "TMA_ROWS": Macro(tma),
        "FUSE_DGRAD": Macro(fuse_dgrad),
        "X_BOX_BYTES": Constant(cfg.warps * 16 * tile_w(p, cfg)),
        "DY_BOX_BYTES": Constant(cfg.warps * 16 * cfg.block_q),
        "ROW_ALIGN": Constant(row_align(p, cfg, dev)),
    }
    return KernelSpec(
        source=SOURCE,
        entry="conv2d_gw8_wgrad",
        signature=("ppppiitt" if tma else "ppppii") + ("pp" if fuse_dgrad else ""),
        specs=specs,
        title=f"conv2d_gw8_wgrad{'+dgrad' if fuse_dgrad else ''} {p.with_batch(1)} {cfg}",
        block=(32 * cfg.warps, 1, 1),
        smem=smem_bytes(p, cfg, dev),
    )


def stats(p: Conv2dGw8Params) -> KernelStats:
    """x and dy read once, dw (and db) written once; MMA FLOPs of the reduction."""
    act = p.n * p.c * (p.h * p.w + p.p * p.q) * 2
    wts = p.c * GROUP_WIDTH * p.r * p.s * 2 + (p.c * 2 if p.has_bias else 0)
    return KernelStats(
        bytes_moved=act + wts, flops=2 * p.n * p.p * p.q * p.c * GROUP_WIDTH * p.r * p.s
    )


def features(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any) -> dict[str, float]:
    """Numeric description of (params, config, device) for the performance model: the layer's
    own features (`_layer_terms`, computed once per layer), then the config's, from the terms of
    its tile (`_tile_terms`), of its splits (`_split_terms`, one split plan instead of `grid()`
    and `partial_bytes()`) and of its stages, as `feature_columns` takes them for a whole space.
    Names, order and values are pinned by tests/host/tune/data/feature_digests.json (the shipped
    models need them).
    """
    tile, plan = _tile_terms(p, cfg, dev)
    return _in_key_order(
        _layer_terms(p)[0],
        *tile,
        *_split_terms(cfg.splits_per_sm, *plan, dev.sm_count),
        cfg.stages,
        smem_bytes(p, cfg, dev),
    )


def feature_columns(
    p: Conv2dGw8Params, cfgs: Sequence[Conv2dGw8WgradConfig], dev: Any
) -> dict[str, Sequence[float]]:
    """`features` of every config of `cfgs`, one column per name in its key order: what a new
    shape's selection evaluates for the whole space (`spio.tune.features.feature_columns`).

    A space is a few dozen tiles (block_p, block_q, warps), each at a few stages and splits per
    SM (`configs`), and a config's features are its tile's, its splits' (given the tile) and its
    stages' (the shared memory, given the tile): each is computed once per tile, splits and
    stages, in whatever order `cfgs` lists them, and a config's row is the three joined."""
    layer = _layer_terms(p)[0]
    sm_count = dev.sm_count
    # per tile: its split terms (by splits per SM), its stage terms (by stages), and what they
    # are computed from
    tiles: dict[tuple[int, int, int], tuple[dict, dict, tuple, tuple, tuple]] = {}
    rows = []
    for cfg in cfgs:
        key = (cfg.block_p, cfg.block_q, cfg.warps)
        terms = tiles.get(key)
        if terms is None:
            tile, plan = _tile_terms(p, cfg, dev)
            terms = tiles[key] = ({}, {}, tile, plan, smem_terms(p, cfg, dev))
        by_splits, by_stages, tile, plan, smem = terms
        head = by_splits.get(cfg.splits_per_sm)
        if head is None:  # the tile's and the splits' features
            head = tile + _split_terms(cfg.splits_per_sm, *plan, sm_count)
            by_splits[cfg.splits_per_sm] = head
        stages = cfg.stages
        tail = by_stages.get(stages)
        if tail is None:  # `smem_bytes`
            per_stage, fixed, floor, per_stage_tma, fixed_tma = smem
            smem_b = max(stages * per_stage + fixed, floor) + stages * per_stage_tma + fixed_tma
            tail = by_stages[stages] = (stages, smem_b)
        rows.append(head + tail)
    n = len(rows)
    columns = zip(*rows, strict=True) if n else [()] * _CONFIG_FEATURES
    return _in_key_order({k: [v] * n for k, v in layer.items()}, *columns)


# `_tile_terms`' features (block_p, block_q, warps, idle_warps, live_regs, halo_ratio, bytes,
# flops, sm_count) and `_split_terms`' (splits_per_sm, tasks, tasks_per_split, splits, blocks,
# waves, partial_bytes): `_in_key_order`'s arguments in its order.
_TileFeatures = tuple[int, int, int, float, int, float, int, int, int]
_SplitFeatures = tuple[int, int, int, int, int, float, int]


def _tile_terms(
    p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any
) -> tuple[_TileFeatures, tuple[int, int, int]]:
    """The features of the config's tile (block_p, block_q, warps) in `_in_key_order`'s order,
    and what `_split_terms` takes of it: (tasks, CTAs per split, partial bytes per split)."""
    _, col_bytes, bytes_moved, flops, out_p, out_q = _layer_terms(p)
    col_tiles = -(-out_q // cfg.block_q)  # q_tiles
    blocks_g = -(-p.groups // cfg.warps)  # group_blocks
    # x rows a task spans ((BLOCK_P - 1) * stride + R; not task_rows' trimmed count, which the
    # shipped models were not trained on) per dy row, times x columns per dy column.
    rows = (cfg.block_p - 1) * p.stride_h + p.r
    own: _TileFeatures = (
        cfg.block_p,
        cfg.block_q,
        cfg.warps,
        # Share of the CTAs' warps past the last group (RAGGED_GROUPS), as fprop's feature.
        idle_warps(p.groups, cfg.warps) / (blocks_g * cfg.warps),
        live_regs(p, cfg),
        rows / cfg.block_p * tile_w(p, cfg) / cfg.block_q,
        bytes_moved,
        flops,
        dev.sm_count,
    )
    tasks = p.n * -(-out_p // cfg.block_p)  # x p_chunks
    return own, (tasks, col_tiles * blocks_g, col_tiles * col_bytes)


def _split_terms(
    splits_per_sm: int, tasks: int, per_split_grid: int, split_bytes: int, sm_count: int
) -> _SplitFeatures:
    """The features of a tile's splits per SM (`_tile_terms`' plan), in `_in_key_order`'s order:
    the split plan (`plan_splits`), its CTAs, waves and fp32 partial bytes."""
    tasks, tps, splits = plan_splits(tasks, per_split_grid, splits_per_sm, sm_count)
    blocks = per_split_grid * splits
    return (
        splits_per_sm,
        tasks,
        tps,
        splits,
        blocks,
        blocks / max(1, sm_count),
        splits * split_bytes,
    )


_CONFIG_FEATURES = 18  # `_in_key_order`'s arguments after the layer's


def _in_key_order(
    layer: dict[str, Any], block_p: Any, block_q: Any, warps: Any, idle: Any, regs: Any,
    halo: Any, bytes_moved: Any, flops: Any, sm_count: Any, splits_per_sm: Any, tasks: Any,
    tps: Any, splits: Any, blocks: Any, waves: Any, partial: Any, stages: Any, smem: Any,
) -> dict[str, Any]:  # fmt: skip
    """The features named, in their key order (values or columns alike): the layer's, then the
    tile's, splits' and stages' (`_tile_terms`, `_split_terms`; their order as arguments)."""
    return {
        **layer,
        "block_p": block_p,
        "block_q": block_q,
        "warps": warps,
        "idle_warps": idle,
        "stages": stages,
        "splits_per_sm": splits_per_sm,
        "tasks": tasks,
        "tasks_per_split": tps,
        "splits": splits,
        "blocks": blocks,
        "waves": waves,
        # TMA rows (`tma_rows`) are not a feature: they follow from warps, taps and the device,
        # and with the flag the whole-space regret on the complete shapes was worse (p90 1.163
        # against 1.082, docs/tuning.md, fifteenth session). smem_bytes includes their
        # alignment slack.
        "smem_bytes": smem,
        "live_regs": regs,
        "halo_ratio": halo,
        "partial_bytes": partial,
        "bytes": bytes_moved,
        "flops": flops,
        "sm_count": sm_count,
    }


@functools.lru_cache(maxsize=256)
def _layer_terms(p: Conv2dGw8Params) -> tuple[dict[str, float], int, int, int, int, int]:
    """The features' layer-only terms: the layer's own features, fp32 partial bytes per slice
    (weights and bias, as in `partial_bytes`), the layer's bytes and FLOPs (`stats`), and its
    output height and width. `features` copies the dict before adding to it."""
    st = stats(p)
    col_bytes = (p.c * GROUP_WIDTH * p.r * p.s + p.c) * 4
    return p.features(), col_bytes, st.bytes_moved, st.flops, p.p, p.q


def row_maps(kernel: Any, p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig) -> Any:
    """The tensor maps a TMA_ROWS variant (`kernel`, loaded for the layer `p`, its batch
    included) reads x and dy through: a pair of `spio.kernels.map_cache.MapCache` (one map per
    address); None for a cp.async variant. x (N, H, W, C) is a 3-D tensor (N x H rows, W, C)
    copied in boxes of one row x TILE_W pixels x the CTA's WARPS x 8 channels, dy (N x P rows, Q,
    C) in boxes of one row x BLOCK_Q pixels x the same channels; out of the tensor: zeros (the
    padding columns, dy's columns past Q, a ragged last group block's channels)."""
    if "t" not in getattr(getattr(kernel, "spec", None), "signature", ""):
        return None
    from spio.kernels.map_cache import MapCache

    rows = p.n * max(p.h, p.p)
    if rows > TMA_MAX_ROWS:
        raise ValueError(
            f"conv2d_gw8 wgrad: {p} has {rows} rows of x or dy over its batch, above the "
            f"{TMA_MAX_ROWS} a TMA coordinate holds; run the weight gradient over smaller batches "
            "and sum"
        )
    channels = cfg.warps * GROUP_WIDTH
    swizzle = tma_swizzle(cfg)
    x_maps = MapCache(
        p.dtype, (p.n * p.h, p.w, p.c), (p.w * p.c, p.c, 1), (1, tile_w(p, cfg), channels),
        swizzle=swizzle,
    )  # fmt: skip
    dy_maps = MapCache(
        p.dtype, (p.n * p.p, p.q, p.c), (p.q * p.c, p.c, 1), (1, cfg.block_q, channels),
        swizzle=swizzle,
    )  # fmt: skip
    return x_maps, dy_maps


class WgradLaunch:
    """Both passes of the weight gradient bound to one layer, its batch included: `launch(
    grad_weight, grad_bias, workspace, x, grad_output, stream)` writes the fp32 partials of each
    split into `workspace` (`workspace_floats` fp32, 16-byte aligned: the weight partials, then
    the bias partials) and sums them in a fixed order into grad_weight (C, 8, R, S) and
    grad_bias (C,) (None without a bias). The reduction is the dependent launch of the pair
    (programmatic dependent launch on sm_90+, see `wgrad_reduce.reduce_launch`). A TMA_ROWS
    variant also takes x's and dy's tensor maps (`row_maps`: encoded once per address).

    `reduce_kernel` is the loaded reduction of `reduce_config(p, cfg, dev)`."""

    __slots__ = ("_main", "_reduce", "_tasks", "_tps", "_maps", "slices", "_bias_offset",
                 "workspace_floats")  # fmt: skip

    def __init__(
        self, kernel: Any, reduce_kernel: Any, p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig,
        dev: Any,
    ) -> None:  # fmt: skip
        from spio.kernels.conv2d_gw8 import wgrad_reduce as rd

        check_tensor_size(p)
        tasks, tps, _ = split_plan(p, cfg, dev)
        self._main = kernel.bind(grid(p, cfg, dev))
        self._reduce: Any = (  # None: `partials` alone (`launch`)
            None
            if reduce_kernel is None
            else reduce_kernel.bind(
                rd.reduce_grid(p, rd.reduce_config(p, cfg, dev)), dependent=True
            )
        )
        self._tasks, self._tps = tasks, tps
        self._maps = row_maps(kernel, p, cfg)
        self.slices = num_slices(p, cfg, dev)
        weight_floats = self.slices * p.c * GROUP_WIDTH * p.r * p.s
        self._bias_offset = 4 * weight_floats  # bytes; a multiple of 256 (C % 8 == 0)
        self.workspace_floats = weight_floats + (self.slices * p.c if p.has_bias else 0)

    def partials(
        self, partial: Any, bias_partial: Any, x: Any, grad_output: Any, stream: int,
        dx: Any = None, weight: Any = None,
    ) -> None:  # fmt: skip
        """The first pass alone: the fp32 partials of each split into `partial` and (with a
        bias) `bias_partial`; a FUSE_DGRAD variant also writes `dx` from `weight`."""
        args: tuple[Any, ...] = (partial, bias_partial, x, grad_output, self._tasks, self._tps)
        if self._maps is not None:
            x_maps, dy_maps = self._maps
            args += (x_maps.get(x.data_ptr()), dy_maps.get(grad_output.data_ptr()))
        if dx is not None:
            args += (dx, weight)
        self._main(args, stream)

    def __call__(
        self, grad_weight: Any, grad_bias: Any, workspace: Any, x: Any, grad_output: Any,
        stream: int, dx: Any = None, weight: Any = None,
    ) -> None:  # fmt: skip
        partial = workspace.data_ptr()
        bias_partial = partial + self._bias_offset if grad_bias is not None else partial
        self.partials(partial, bias_partial, x, grad_output, stream, dx, weight)
        self._reduce(
            (grad_weight, grad_weight if grad_bias is None else grad_bias, partial, bias_partial,
             self.slices),
            stream,
        )  # fmt: skip


def launch(
    kernel: Any,
    p: Conv2dGw8Params,
    cfg: Conv2dGw8WgradConfig,
    dev: Any,
    partial: Any,
    bias_partial: Any,
    x: Any,
    grad_output: Any,
    stream: int,
) -> None:
    """Runs a loaded wgrad variant (the first pass alone); partial (16-byte aligned) has
    num_slices * C*8*R*S floats and bias_partial num_slices * C floats (any pointer when the
    layer has no bias). `WgradLaunch` runs both passes; this binds one on every call (and a
    TMA-rows variant encodes its tensor maps): for tests and one-off launches, where the ops and
    the benchmark bind a `WgradLaunch` once."""
    if hasattr(partial, "data_ptr") and partial.data_ptr() % 16:
        raise ValueError(
            "conv2d_gw8 wgrad: partial must be 16-byte aligned (the kernel writes it with 16-byte "
            "stores); allocate it fresh with torch.empty"
        )
    WgradLaunch(kernel, None, p, cfg, dev).partials(partial, bias_partial, x, grad_output, stream)


def compiled_variant(p: Conv2dGw8Params) -> Conv2dGw8Params:
    """What a compiled wgrad kernel depends on (`KernelDef.compiled_params`): the layer without
    its batch and without the weight's dtype, which only the reduction reads."""
    return replace(p, n=1, wdtype=None)


def examples() -> list[Conv2dGw8Params]:
    from spio.kernels.conv2d_gw8.fprop import examples as fprop_examples

    return fprop_examples()


def fused_spec(p: Conv2dGw8Params, cfg: Conv2dGw8WgradConfig, dev: Any = None) -> KernelSpec:
    """`spec` of the variant that also writes dx (FUSE_DGRAD, `fusable` layers)."""
    return spec(p, cfg, dev, fuse_dgrad=True)


def fused_stats(p: Conv2dGw8Params) -> KernelStats:
    """x and dy read once, dx written once, the weight read; dw (and db) written."""
    st = stats(p)
    return KernelStats(bytes_moved=st.bytes_moved + p.n * p.c * p.h * p.w * 2, flops=2 * st.flops)


def fused_examples() -> list[Conv2dGw8Params]:
    """The examples of at most FUSE_MAX_KERNEL rows and columns (those the backward may fuse)."""
    return [p for p in examples() if max(p.r, p.s) <= FUSE_MAX_KERNEL]


def fused_variant(p: Conv2dGw8Params) -> Conv2dGw8Params:
    """What a compiled fused kernel depends on: the layer without its batch (the weight's dtype
    stays: the kernel reads the weight)."""
    return replace(p, n=1)


WGRAD = KernelDef(
    name="conv2d_gw8_wgrad",
    params_type=Conv2dGw8Params,
    config_type=Conv2dGw8WgradConfig,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    features=features,
    feature_columns=feature_columns,
    examples=examples,
    sample_params=_tune.sample_params,
    make_runner=_tune.make_wgrad_runner,
    compiled_params=compiled_variant,
    # The config (tiling, splits per SM, the reduction's CTA size) fixes dweight's partial sums
    # and their order; selected at the batch's bucket (`params.select_batch`), dweight's bits
    # depend on the shape alone, never on which batch a process ran first. At the real batch the
    # launch splits the (image, row chunk) tasks over the config's CTAs (`split_plan`).
    select_key=select_at_batch_bucket,
)


# The weight gradient's kernel that also writes the input gradient, where the backward fuses
# them (`may_fuse`, `fuses`): a family of its own, selected and tuned as the others are (its
# model ranks the fused configs, whole images and row chunks, `fused_configs`), at the batch's
# bucket as WGRAD is.
WGRAD_DGRAD = KernelDef(
    name="conv2d_gw8_wgrad_dgrad",
    params_type=Conv2dGw8Params,
    config_type=Conv2dGw8WgradConfig,
    configs=fused_configs,
    spec=fused_spec,
    heuristic=fused_heuristic,
    stats=fused_stats,
    # WGRAD's features: a fused config is a wgrad config, and the family's own model learns
    # what writing dx (and a row chunk's dy halo) adds.
    features=features,
    feature_columns=feature_columns,
    examples=fused_examples,
    sample_params=_tune.sample_fused_params,
    make_runner=_tune.make_fused_runner,
    compiled_params=fused_variant,
    select_key=select_at_batch_bucket,
)
