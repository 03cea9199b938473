"""The split tail's sum of the Hopper matmul (`spio/src/matmul_tail_sum.cu`): each tail tile's
C = the ordered sum of its splits' fp32 partials (+ bias), rounded once to C's type. Not selected
on its own: `matmul_sm90.bound` loads it next to a main kernel whose config has `tail` and whose
problem has a tail (`matmul_sm90.tail_plan`), and launches it as the dependent second pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec
from spio.kernels.matmul import stats
from spio.kernels.matmul_params import MatmulParams

THREADS = 256  # one per consumer thread of the main kernel
MAX_SPLITS = 16  # the most CTAs a tail tile is split over (matmul_sm90.TAIL_MAX_SPLITS)


@dataclass(frozen=True, slots=True)
class TailSumConfig:
    """The sum's variant: the main kernel's tile width (`block_n`, 128 or 256: the
    accumulators' layout)."""

    block_n: int = 256

    def __post_init__(self) -> None:
        if self.block_n not in (128, 256):
            raise ValueError(f"TailSumConfig.block_n must be 128 or 256, got {self.block_n!r}")


def configs(p: MatmulParams, dev: Any) -> list[TailSumConfig]:
    """Every variant of the sum: one per tile width the main kernel splits a tail of."""
    del p, dev
    return [TailSumConfig(128), TailSumConfig(256)]


def heuristic(p: MatmulParams, dev: Any) -> TailSumConfig:
    """Unused by the op (the sum's config follows the main kernel's tile)."""
    return configs(p, dev)[-1]


def spec(p: MatmulParams, cfg: TailSumConfig, dev: Any = None) -> KernelSpec:
    """The variant for (dtypes, bias, block_n)."""
    from spio.generators import Constant, Type, dtype

    del dev
    return KernelSpec(
        source="matmul_tail_sum.cu",
        entry="matmul_tail_sum",
        signature="pppiiiii",  # c, workspace, bias, m, n, dp_tiles, splits, raster
        specs={
            "Out": Type(dtype.by_name(p.out_dtype)),
            "Element": Type(dtype.by_name(p.dtype)),
            "BLOCK_N": Constant(cfg.block_n),
            "MAX_SPLITS": Constant(MAX_SPLITS),
            "HAS_BIAS": Constant(int(p.has_bias)),
        },
        title=f"matmul split-tail sum n{cfg.block_n} -> {p.out_dtype} bias={p.has_bias}",
        block=(THREADS, 1, 1),
        smem=0,
        arch_suffix="a",
    )


def grid(cfg: TailSumConfig, tail_tiles: int) -> tuple[int, int, int]:
    """block_n / 8 CTAs per tail tile: one per float4 of a consumer thread's accumulators."""
    return (tail_tiles * cfg.block_n // 8, 1, 1)


# Derived from the main kernel's config, never selected alone.
DEF = KernelDef(
    name="matmul_tail_sum",
    params_type=MatmulParams,
    config_type=TailSumConfig,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    compiled_params=MatmulParams.variant,
)
