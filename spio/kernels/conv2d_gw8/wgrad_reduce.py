"""The deterministic second pass of conv2d_gw8's weight gradient: the ordered slice reduction.

`spio/src/conv2d_gw8_wgrad_reduce.cu` sums the fp32 partial slices written by the wgrad kernel
(`spio.kernels.conv2d_gw8.wgrad`) in a fixed order (THREADS / 32 contiguous runs of slices, each
ascending, then the runs ascending) and rounds once to fp16/bf16.

Config: the CTA size is a pure function of the most slices the wgrad launch can write
(`reduce_config`: `config_for(max_slices(...))`), which depends on the wgrad kernel's selected
config and the device but not on the batch size, so a new batch size loads no new variant and
the summation order is fixed by (shape, wgrad config, device). This family therefore has no
performance model and no selector entry of its own. Its cost is in the wgrad family's timings
instead: the wgrad tune runner times both passes, so the wgrad model weighs the partials a config
writes.
"""

from __future__ import annotations

import math
from typing import Any

from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    REDUCE_THREADS,
    Conv2dGw8Params,
    Conv2dGw8ReduceConfig,
    Conv2dGw8WgradConfig,
)
from spio.kernels.conv2d_gw8.wgrad_tiling import max_slices
from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats

REDUCE_SOURCE = "conv2d_gw8_wgrad_reduce.cu"


UNROLL = 8  # loads in flight per thread (the kernel's UNROLL)


def reduce_configs(p: Conv2dGw8Params, dev: Any) -> list[Conv2dGw8ReduceConfig]:
    return [Conv2dGw8ReduceConfig(threads=t) for t in REDUCE_THREADS]


def config_for(slices: int) -> Conv2dGw8ReduceConfig:
    """The CTA size for `slices` partials: the fewest warps (at least 4) such that each sums at
    most UNROLL slices, i.e. one round of independent loads per thread; 32 warps beyond 256
    slices. The H100 run with a fixed 128 threads over 256 slices (8 loads in a row per thread,
    146 CTAs) took 7-10 us for a 3x3 C64 layer."""
    if slices < 1:
        raise ValueError(f"conv2d_gw8 wgrad reduce: slices must be >= 1, got {slices}")
    for threads in REDUCE_THREADS:
        if slices <= threads // 32 * UNROLL:
            return Conv2dGw8ReduceConfig(threads=threads)
    return Conv2dGw8ReduceConfig(threads=REDUCE_THREADS[-1])


def reduce_config(
    p: Conv2dGw8Params, wgrad_cfg: Conv2dGw8WgradConfig, dev: Any
) -> Conv2dGw8ReduceConfig:
    """The reduction's config for a wgrad launch of (p, wgrad_cfg) on dev, at any batch size:
    `config_for` the most slices that launch writes (`max_slices`). With fewer slices (a small
    batch) some warps sum nothing; the order of the sums is still fixed by (p, wgrad_cfg, dev)."""
    return config_for(max_slices(p, wgrad_cfg, dev))


def reduce_heuristic(p: Conv2dGw8Params, dev: Any) -> Conv2dGw8ReduceConfig:
    """`reduce_config` of the wgrad heuristic's config (callers that know the selected wgrad
    config call `reduce_config` with it)."""
    from spio.kernels.conv2d_gw8 import wgrad as wg

    return reduce_config(p, wg.heuristic(p, dev), dev)


def parts(cfg: Conv2dGw8ReduceConfig) -> int:
    """Runs of slices summed by separate warps (one per warp of the CTA)."""
    return cfg.threads // 32


def reduce_elements(p: Conv2dGw8Params) -> int:
    return p.c * GROUP_WIDTH * p.r * p.s + (p.c if p.has_bias else 0)


def reduce_grid(p: Conv2dGw8Params, cfg: Conv2dGw8ReduceConfig) -> tuple[int, int, int]:
    """One CTA per 32 consecutive elements (weight then bias)."""
    return (math.ceil(reduce_elements(p) / 32), 1, 1)


def reduce_spec(p: Conv2dGw8Params, cfg: Conv2dGw8ReduceConfig, dev: Any = None) -> KernelSpec:
    from spio.generators.compound_index import CompoundIndex
    from spio.generators.constant import Constant
    from spio.generators.dim import Dim
    from spio.generators.dtype import bfloat16, half
    from spio.generators.dtype import float as f32
    from spio.generators.tensor import Tensor
    from spio.generators.type_alias import Type

    elem = half if p.dtype == "float16" else bfloat16
    welem = f32 if p.weight_dtype == "float32" else elem
    E, PART, LANE = Dim(), Dim(), Dim()
    EB = E / 32
    weight_size = p.c * GROUP_WIDTH * p.r * p.s
    specs = {
        "E": E,
        "EB": EB,
        "PART": PART,
        "LANE": LANE,
        "SmemParts": Tensor((PART(parts(cfg)), LANE(32)), f32),
        "WElem": Type(welem),
        "WeightSlices": Tensor((E(weight_size),), f32),
        "BlockIdx": CompoundIndex(EB(reduce_grid(p, cfg)[0])),
        "THREADS": Constant(cfg.threads),
        "PARTS": Constant(parts(cfg)),
        "WEIGHT_SIZE": Constant(weight_size),
        "CHANNELS": Constant(p.c),
        "HAS_BIAS": Constant(bool(p.has_bias)),
    }
    return KernelSpec(
        source=REDUCE_SOURCE,
        entry="conv2d_gw8_wgrad_reduce",
        signature="ppppi",
        specs=specs,
        title=f"conv2d_gw8_wgrad_reduce {p.with_batch(1)} {cfg}",
        block=(cfg.threads, 1, 1),
    )


def reduce_stats(p: Conv2dGw8Params) -> KernelStats:
    """Lower bound of the pass's traffic: one slice read, the result written."""
    out = 4 if p.weight_dtype == "float32" else 2
    return KernelStats(bytes_moved=reduce_elements(p) * (4 + out), flops=reduce_elements(p))


def reduce_launch(
    kernel: Any,
    p: Conv2dGw8Params,
    cfg: Conv2dGw8ReduceConfig,
    grad_weight: Any,
    grad_bias: Any,
    partial: Any,
    bias_partial: Any,
    slices: int,
    stream: int,
) -> None:
    """grad_weight, grad_bias <- the ordered sums of the `slices` partials. A dependent launch:
    the kernel executes griddepcontrol.wait before reading them, so on sm_90+ it launches with
    programmatic dependent launch (PDL, unless SPIO_PDL=0) and overlaps the wgrad kernel's tail;
    call it right after the wgrad launch on the same stream."""
    kernel.launch(
        reduce_grid(p, cfg),
        (
            grad_weight,
            grad_bias if grad_bias is not None else grad_weight,
            partial,
            bias_partial,
            slices,
        ),
        stream=stream,
        dependent=True,
    )


def examples() -> list[Conv2dGw8Params]:
    from spio.kernels.conv2d_gw8.fprop import examples as fprop_examples

    return fprop_examples()


WGRAD_REDUCE = KernelDef(
    name="conv2d_gw8_wgrad_reduce",
    params_type=Conv2dGw8Params,
    config_type=Conv2dGw8ReduceConfig,
    configs=reduce_configs,
    spec=reduce_spec,
    heuristic=reduce_heuristic,
    stats=reduce_stats,
    examples=examples,
    compiled_params=Conv2dGw8Params.variant,
    derived_from="conv2d_gw8_wgrad",  # reduce_config(p, the wgrad config, dev)
    # No sample_params / make_runner: not tuned on its own (see the module docstring).
)
