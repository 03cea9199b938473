"""layernorm_2d_bwd_reduce: dweight/dbias = the ordered column sums of the backward's partials.

layernorm_2d_bwd writes one fp32 partial row of C channels per CTA and output (dweight = Σ dy·x̂,
dbias = Σ dy); this kernel (spio/src/layernorm_2d_bwd_reduce.cu) sums those `parts` rows in a
fixed order, so dweight and dbias are bitwise reproducible without float atomics.

It exists only for params with a weight or a bias: without either there is nothing to reduce,
and every path (configs, heuristic, spec, launch_backward) skips or refuses it.

Not tuned on its own: its config is `reduce_config(p, parts, dev)` for the most partial rows a
backward launch of the selected variant writes (`layernorm_2d.backward_reduce_config`), whatever
M is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats
from spio.kernels.layernorm_2d_params import (
    LayerNorm2dParams,
    examples,
    outputs,
)

# Row count bound of the partial tensors (parts is a runtime argument).
MAX_ROWS = 2**31 - 1
REDUCE_COLS = (8, 16, 32)  # channels per CTA: 32-byte sectors up to one 128-byte line per row
REDUCE_THREADS = (128, 256, 512, 1024)
DEPTH = 4  # independent partial-row loads in flight per thread (the kernel's DEPTH)


@dataclass(frozen=True, slots=True)
class ReduceConfig:
    """CTAs of `cols` channels (cols / 4 float4 lanes) and `threads` threads: splits = threads /
    (cols / 4) threads per channel vector, each summing every splits-th partial row, DEPTH loads
    in flight; then fixed-order warp butterflies and a shared-memory combine."""

    cols: int = 32
    threads: int = 256

    def __post_init__(self) -> None:
        if self.cols not in REDUCE_COLS:
            raise ValueError(f"ReduceConfig.cols must be one of {REDUCE_COLS}, got {self.cols}")
        if self.threads not in REDUCE_THREADS:
            raise ValueError(
                f"ReduceConfig.threads must be one of {REDUCE_THREADS}, got {self.threads}"
            )

    @property
    def lanes(self) -> int:
        """float4 vectors per column row (threads of one split)."""
        return self.cols // 4

    @property
    def splits(self) -> int:
        """Threads that share a channel vector, each summing every splits-th partial row."""
        return self.threads // self.lanes


def needs_reduce(p: LayerNorm2dParams) -> bool:
    """Whether the backward of p has partials to reduce (a weight or a bias)."""
    return outputs(p) > 0


def _require(p: LayerNorm2dParams) -> None:
    if not needs_reduce(p):
        raise ValueError(
            f"layernorm_2d_bwd_reduce: {p} has neither weight nor bias, so there is nothing to "
            "reduce; skip the reduce (launch_backward does when reduce_loaded is None)"
        )


def reduce_spec(p: LayerNorm2dParams, cfg: ReduceConfig, dev: Any) -> KernelSpec:
    """(dweight_partial, dbias_partial, dweight, dbias, parts). Raises ValueError without weight
    and bias (the kernel would have nothing to do)."""
    from spio.generators import CompoundIndex, Constant, Dim, Tensor, Type, dtype

    _require(p)
    p = p.static()
    part, c = Dim(), Dim()
    cv = c / 4  # one float4 of channels
    split = part % cfg.splits  # which every-splits-th partial row a thread sums
    lane = cv % cfg.lanes  # the thread's float4 of the CTA's column
    return KernelSpec(
        source="layernorm_2d_bwd_reduce.cu",
        entry="layernorm_2d_bwd_reduce",
        signature="ppppi",
        specs={
            "PART": part,
            "C": c,
            "CV": cv,
            "PARTIALS": Tensor((part(MAX_ROWS // p.c), cv(p.c // 4)), dtype.uint4),
            "OUT": Tensor((c(p.c),), dtype.by_name(p.weight_dtype)),
            "SPLIT": split,
            "LANE": lane,
            "THREAD": CompoundIndex(split(cfg.splits), lane(cfg.lanes)),
            "COLUMN": cv / cfg.lanes,
            "WEIGHT": Type(dtype.by_name(p.weight_dtype)),
            "CHANNELS": Constant(p.c),
            "COLS": Constant(cfg.cols),
            "THREADS": Constant(cfg.threads),
            "SPLITS": Constant(cfg.splits),
            "DEPTH": Constant(DEPTH),
            "HAS_WEIGHT": Constant(p.has_weight),
            "HAS_BIAS": Constant(p.has_bias),
        },
        title=f"layernorm_2d_bwd_reduce {p} {cfg}",
        block=(cfg.threads, 1, 1),
    )


def reduce_configs(p: LayerNorm2dParams, dev: Any) -> list[ReduceConfig]:
    """Every (cols, threads); none without weight and bias (nothing to reduce)."""
    if not needs_reduce(p):
        return []
    return [ReduceConfig(c, t) for c in REDUCE_COLS for t in REDUCE_THREADS]


def reduce_config(p: LayerNorm2dParams, parts: int, dev: Any) -> ReduceConfig:
    """The reduce config for up to `parts` partial rows: a pure function of (C, outputs, parts,
    SM count). The ops and launch_backward apply it to the most parts a launch of the loaded
    backward variant writes (`layernorm_2d.backward_reduce_config`: its resident CTAs, which
    depend on its config and the device, not on M; a selector that sees only the params cannot
    know them), so one reduce variant serves every M.

    The reduce is latency-bound (its data sits in L2), so: the widest column (32, 16, 8
    channels) that still gives at least one CTA per SM, else 8 (the most CTAs); then the fewest
    threads (128..1024) that leave each thread at most DEPTH partial rows (one round of DEPTH
    loads in flight), else 1024."""
    _require(p)
    if parts < 1:
        raise ValueError(f"layernorm_2d reduce_config: parts must be >= 1, got {parts}")
    n = outputs(p)
    cols = next((c for c in (32, 16) if -(-p.c // c) * n >= dev.sm_count), 8)
    lanes = cols // 4
    for t in REDUCE_THREADS:
        if -(-parts // (t // lanes)) <= DEPTH:
            return ReduceConfig(cols, t)
    return ReduceConfig(cols, REDUCE_THREADS[-1])


def estimated_parts(p: LayerNorm2dParams, dev: Any) -> int:
    """The most partial rows a backward launch is expected to write, without loading it: 2 CTAs
    per SM (the usual residency of the backward's 256-thread blocks)."""
    return 2 * dev.sm_count


def reduce_heuristic(p: LayerNorm2dParams, dev: Any) -> ReduceConfig:
    """reduce_config at the estimated most parts. Only for standalone use (compiling the
    heuristic variant in `spio bench`/`spio compile`, benchmarks): the ops and launch_backward
    derive the config from the loaded backward variant's residency instead."""
    _require(p)
    return reduce_config(p, estimated_parts(p, dev), dev)


def reduce_grid(p: LayerNorm2dParams, cfg: ReduceConfig) -> tuple[int, int, int]:
    """(columns of cfg.cols channels, outputs: dweight then dbias, 1)."""
    return (-(-p.c // cfg.cols), outputs(p), 1)


def reduce_stats(p: LayerNorm2dParams) -> KernelStats:
    # parts depends on the device and the backward's config; count ~2 CTAs per SM of an H100.
    parts = 264
    n = outputs(p)
    return KernelStats(bytes_moved=n * p.c * (4 * parts + p.welem_bytes), flops=n * p.c * parts)


def ordered_sum(partials: Any, cfg: ReduceConfig) -> Any:
    """The column sums of a (parts, C) float32 numpy array in exactly the order of
    layernorm_2d_bwd_reduce.cu under cfg, in float32 (numpy adds round like the GPU's FADD):
    per split a strided ascending sum, an xor butterfly over the splits of each warp, strided
    ascending sums over the warps, a second butterfly. Tests compare the kernel to it bitwise."""
    import numpy as np

    f32 = np.float32
    parts, c = partials.shape
    per_warp, warps = 32 // cfg.lanes, cfg.threads // 32

    def strided(rows: list, start: int, step: int) -> Any:
        t = np.zeros(c, dtype=f32)
        for r in range(start, len(rows), step):
            t = (t + rows[r]).astype(f32)
        return t

    def butterfly(v: list) -> Any:  # xor offsets len/2, ..., 1; lane 0's result
        off = len(v) // 2
        while off >= 1:
            v = [(v[j] + v[j ^ off]).astype(f32) for j in range(len(v))]
            off //= 2
        return v[0]

    rows = [partials[r].astype(f32) for r in range(parts)]
    splits = [strided(rows, s, cfg.splits) for s in range(cfg.splits)]
    warp_sums = [butterfly(splits[w * per_warp : (w + 1) * per_warp]) for w in range(warps)]
    return butterfly([strided(warp_sums, j, per_warp) for j in range(per_warp)])


def make_reduce_runner(p: LayerNorm2dParams, cfg: ReduceConfig):
    """A zero-argument launch of the reduce alone, on as many random partial rows as the
    backward's heuristic config writes for p on the current GPU (`spio bench layernorm2d
    --sweep-reduce`)."""
    import torch

    from spio.cuda import device_attributes
    from spio.kernels import layernorm_2d as k
    from spio.kernels.loader import default_function_cache

    _require(p)
    dev = device_attributes(torch.cuda.current_device())
    cache = default_function_cache()
    bwd_cfg = k.BWD.heuristic(p, dev)
    n = k.parts(cache.get(k.BWD, p.static(), bwd_cfg, dev), p, bwd_cfg, dev)
    loaded = cache.get(BWD_REDUCE, p.static(), cfg, dev)
    wdt = getattr(torch, p.weight_dtype)
    dwp = torch.randn(n, p.c, device="cuda") if p.has_weight else None
    dbp = torch.randn(n, p.c, device="cuda") if p.has_bias else None
    dw = torch.empty(p.c, device="cuda", dtype=wdt) if p.has_weight else None
    db = torch.empty(p.c, device="cuda", dtype=wdt) if p.has_bias else None
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: launch_reduce(loaded, p, cfg, dweight_part=dwp, dbias_part=dbp, dweight=dw,
                                 dbias=db, parts=n, stream=stream)  # fmt: skip


def reduce_kernel(p: LayerNorm2dParams, cfg: ReduceConfig, dev: Any) -> Any:
    """The loaded reduce variant of (p, cfg), from the default function cache."""
    from spio.kernels.loader import default_function_cache

    return default_function_cache().get(BWD_REDUCE, p.static(), cfg, dev)


def launch_reduce(loaded: Any, p: LayerNorm2dParams, cfg: ReduceConfig, *, dweight_part: Any,
                  dbias_part: Any, dweight: Any, dbias: Any, parts: int,
                  stream: int = 0) -> None:  # fmt: skip
    """dweight, dbias <- column sums of the (parts, C) fp32 partials (None where absent).
    loaded: the layernorm_2d_bwd_reduce variant of (p, cfg). Launched as a dependent kernel:
    with programmatic dependent launch where the loaded kernel allows it (sm_90+, SPIO_PDL)."""
    _require(p)
    if parts < 1:
        raise ValueError(f"layernorm_2d launch_reduce: parts must be >= 1, got {parts}")
    for name, t in (("dweight_part", dweight_part), ("dbias_part", dbias_part)):
        if t is not None and hasattr(t, "data_ptr") and t.data_ptr() % 16:
            raise ValueError(
                f"layernorm_2d launch_reduce: {name} must be 16-byte aligned (the kernel reads "
                "it with 16-byte loads); pass a fresh contiguous tensor, not an offset view"
            )
    ptr = lambda t: 0 if t is None else t  # noqa: E731  (a null pointer for an absent tensor)
    # dependent: the kernel executes griddepcontrol.wait before reading the partials, so on
    # sm_90+ it launches with PDL and overlaps the backward's tail (loader.programmatic_launch).
    loaded.launch(
        reduce_grid(p, cfg),
        (ptr(dweight_part), ptr(dbias_part), ptr(dweight), ptr(dbias), parts),
        stream=stream,
        dependent=True,
    )


BWD_REDUCE = KernelDef(
    name="layernorm_2d_bwd_reduce",
    params_type=LayerNorm2dParams,
    config_type=ReduceConfig,
    configs=reduce_configs,
    spec=reduce_spec,
    heuristic=reduce_heuristic,
    stats=reduce_stats,
    examples=examples,
    compiled_params=LayerNorm2dParams.static,
    derived_from="layernorm_2d_bwd",  # backward_reduce_config (the most parts of a launch)
    # No sample_params / make_runner: the config is reduce_config of the real parts count (a
    # pure function), and `spio tune` times the reduce inside layernorm_2d_bwd's runner, so this
    # family has no model of its own (make_reduce_runner times it alone for benchmarks/tests).
)
