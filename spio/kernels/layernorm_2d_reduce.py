"""layernorm_2d_bwd_reduce: dweight/dbias = the ordered column sums of the backward's partials.

layernorm_2d_bwd writes one fp32 partial row of C channels per CTA and output (dweight = Σ dy·x̂,
dbias = Σ dy); this kernel (spio/src/layernorm_2d_bwd_reduce.cu) sums those `parts` rows in a
fixed order, so dweight and dbias are bitwise reproducible without float atomics.

It exists only for params with a weight or a bias: without either there is nothing to reduce,
and every path (configs, heuristic, spec, sample_params, launch_backward) skips or refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats
from spio.kernels.layernorm_2d_params import (
    LayerNorm2dParams,
    dtype_spec,
    examples,
    outputs,
    sample_params,
)

REDUCE_CHANNELS = 32  # channels per reduce CTA: one warp-wide coalesced 128-byte row segment
# Row count bound of the partial tensors (parts is a runtime argument).
MAX_ROWS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ReduceConfig:
    """`splits` warps per CTA, each summing every splits-th partial row of a 32-channel column
    (8 loads in flight per thread), then combined in warp order through shared memory."""

    splits: int = 32

    def __post_init__(self) -> None:
        if self.splits not in (4, 8, 16, 32):
            raise ValueError(f"ReduceConfig.splits must be 4, 8, 16 or 32, got {self.splits}")


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
    split = part % cfg.splits  # which every-splits-th partial row a warp sums
    lane = c % REDUCE_CHANNELS  # the thread's channel of the CTA's 32
    return KernelSpec(
        source="layernorm_2d_bwd_reduce.cu",
        entry="layernorm_2d_bwd_reduce",
        signature="ppppi",
        specs={
            "PART": part,
            "C": c,
            "PARTIALS": Tensor((part(MAX_ROWS // p.c), c(p.c)), dtype.float),
            "OUT": Tensor((c(p.c),), dtype_spec(p.wdtype)),
            "SPLIT": split,
            "LANE": lane,
            "THREAD": CompoundIndex(split(cfg.splits), lane(REDUCE_CHANNELS)),
            "SUMS": Tensor((split(cfg.splits), lane(REDUCE_CHANNELS)), dtype.float),
            "COLUMN": c / REDUCE_CHANNELS,
            "WEIGHT": Type(dtype_spec(p.wdtype)),
            "CHANNELS": Constant(p.c),
            "SPLITS": Constant(cfg.splits),
            "HAS_WEIGHT": Constant(p.has_weight),
            "HAS_BIAS": Constant(p.has_bias),
        },
        title=f"layernorm_2d_bwd_reduce {p} {cfg}",
        block=(REDUCE_CHANNELS * cfg.splits, 1, 1),
    )


def reduce_configs(p: LayerNorm2dParams, dev: Any) -> list[ReduceConfig]:
    """Every splits; none without weight and bias (nothing to reduce)."""
    return [ReduceConfig(s) for s in (4, 8, 16, 32)] if needs_reduce(p) else []


def reduce_heuristic(p: LayerNorm2dParams, dev: Any) -> ReduceConfig:
    """32 warps per CTA (1024 threads). The reduce is latency-bound, not bandwidth-bound: its
    parts (~ the backward's resident CTAs, 264–1056 on an H100) x C floats sit in L2, and its
    time is the serial depth parts / splits of each warp's loads (8 in flight per thread), so
    the most warps give the shortest kernel (one or two L2 round trips at parts <= 512)."""
    _require(p)
    return ReduceConfig(32)


def reduce_grid(p: LayerNorm2dParams) -> tuple[int, int, int]:
    """(32-channel columns, outputs: dweight then dbias, 1)."""
    return (-(-p.c // REDUCE_CHANNELS), outputs(p), 1)


def reduce_stats(p: LayerNorm2dParams) -> KernelStats:
    # parts depends on the device and the backward's config; count ~2 CTAs per SM of an H100.
    parts = 264
    n = outputs(p)
    return KernelStats(bytes_moved=n * p.c * (4 * parts + p.welem_bytes), flops=n * p.c * parts)


def reduce_features(p: LayerNorm2dParams, cfg: ReduceConfig, dev: Any) -> dict[str, float]:
    return {
        "c": float(p.c),
        "splits": float(cfg.splits),
        "outputs": float(outputs(p)),
        "sm_count": float(dev.sm_count),
    }


def sample_reduce_params(rng: Any) -> LayerNorm2dParams:
    """sample_params with a weight and/or a bias (the reduce never runs without one)."""
    p = sample_params(rng)
    if needs_reduce(p):
        return p
    hw, hb = rng.choice(((True, True), (True, False), (False, True)))
    return replace(p, has_weight=hw, has_bias=hb)


def make_reduce_runner(p: LayerNorm2dParams, cfg: ReduceConfig):
    """A zero-argument launch of the reduce alone, on as many random partial rows as the
    backward's heuristic config writes for p on the current GPU (collect, autotune)."""
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
    wdt = getattr(torch, p.wdtype)
    dwp = torch.randn(n, p.c, device="cuda") if p.has_weight else None
    dbp = torch.randn(n, p.c, device="cuda") if p.has_bias else None
    dw = torch.empty(p.c, device="cuda", dtype=wdt) if p.has_weight else None
    db = torch.empty(p.c, device="cuda", dtype=wdt) if p.has_bias else None
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: launch_reduce(loaded, p, dweight_part=dwp, dbias_part=dbp, dweight=dw,
                                 dbias=db, parts=n, stream=stream)  # fmt: skip


def launch_reduce(loaded: Any, p: LayerNorm2dParams, *, dweight_part: Any, dbias_part: Any,
                  dweight: Any, dbias: Any, parts: int, stream: int = 0) -> None:  # fmt: skip
    """dweight, dbias <- column sums of the (parts, C) fp32 partials (None where absent)."""
    _require(p)
    ptr = lambda t: 0 if t is None else t  # noqa: E731  (a null pointer for an absent tensor)
    loaded.launch(
        reduce_grid(p),
        (ptr(dweight_part), ptr(dbias_part), ptr(dweight), ptr(dbias), parts),
        stream=stream,
    )


BWD_REDUCE = KernelDef(
    name="layernorm_2d_bwd_reduce",
    params_type=LayerNorm2dParams,
    config_type=ReduceConfig,
    configs=reduce_configs,
    spec=reduce_spec,
    heuristic=reduce_heuristic,
    stats=reduce_stats,
    features=reduce_features,
    examples=examples,
    sample_params=sample_reduce_params,
    make_runner=make_reduce_runner,
)
