"""The split-K sum of the Hopper matmul (`spio/src/matmul_splitk_reduce.cu`): C = the ordered
sum of split_k fp32 partial slices (+ bias), rounded once to C's type. Not selected on its own:
its config follows the main kernel's split (`config_for`), and `matmul_sm90.bound` loads it next
to a split-K main kernel and launches it as the dependent second pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec
from spio.kernels.matmul import stats
from spio.kernels.matmul_params import MatmulParams

SPLITS = (2, 4, 8)  # the split_k values the main kernel's configs use (matmul_sm90.SPLIT_KS)
THREADS = 256


@dataclass(frozen=True, slots=True)
class SplitSumConfig:
    """The sum's variant: `split_k` slices, `vec` elements per thread (`config_for`)."""

    split_k: int = 2
    vec: int = 1


def config_for(p: MatmulParams, split_k: int) -> SplitSumConfig:
    """The sum's config for a split of p over split_k CTAs: float4 loads when every 4-element
    run of C stays in one row (N % 4 == 0; the workspace is a fresh allocation, 16-byte aligned,
    and the kernel writes C one element at a time)."""
    return SplitSumConfig(split_k, 4 if p.n % 4 == 0 else 1)


def configs(p: MatmulParams, dev: Any) -> list[SplitSumConfig]:
    """Every variant of the sum p can run: each split, vec as `config_for` sets it."""
    del dev
    return [config_for(p, split_k) for split_k in SPLITS]


def heuristic(p: MatmulParams, dev: Any) -> SplitSumConfig:
    """Unused by the op (the sum's config follows the main kernel's split: `config_for`)."""
    return configs(p, dev)[0]


def spec(p: MatmulParams, cfg: SplitSumConfig, dev: Any = None) -> KernelSpec:
    """The variant for (dtypes, bias, split_k, vec)."""
    from spio.generators import Constant, Type, dtype

    del dev
    return KernelSpec(
        source="matmul_splitk_reduce.cu",
        entry="matmul_splitk_reduce",
        signature="pppil",  # c, workspace, bias, n, total
        specs={
            "Out": Type(dtype.by_name(p.out_dtype)),
            "Element": Type(dtype.by_name(p.dtype)),
            "SPLIT_K": Constant(cfg.split_k),
            "VEC": Constant(cfg.vec),
            "HAS_BIAS": Constant(int(p.has_bias)),
            "THREADS": Constant(THREADS),
        },
        title=f"matmul split-K sum {cfg.split_k} -> {p.out_dtype} bias={p.has_bias} vec {cfg.vec}",
        block=(THREADS, 1, 1),
        smem=0,
    )


def grid(p: MatmulParams, cfg: SplitSumConfig) -> tuple[int, int, int]:
    """One thread per cfg.vec elements of C."""
    return (-(-(p.m * p.n) // (THREADS * cfg.vec)), 1, 1)


# Derived from the main kernel's config (config_for), never selected alone.
DEF = KernelDef(
    name="matmul_splitk_reduce",
    params_type=MatmulParams,
    config_type=SplitSumConfig,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    compiled_params=MatmulParams.variant,
)
