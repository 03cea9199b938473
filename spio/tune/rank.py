"""Ranks a family's configs for a layer by predicted latency, and measures the best few.

The ranking is by the model's margin (log µs) as XGBoost computes it (`spio.tune.trees`), ties in
the family's config order, as a stable sort of XGBoost's predictions orders them. Which of the
ranked configs autotune measures: `autotune_candidates`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.logs import logger
from spio.tune.features import DEVICE_FEATURES, feature_columns, features
from spio.tune.model import PerfModel
from spio.tune.trees import Prediction


def rank(kdef: KernelDef, params: Any, device: Any, model: PerfModel) -> list[tuple[Any, float]]:
    """Every valid config with its predicted latency (µs), fastest first."""
    configs, predicted = _predict(kdef, params, device, model)
    margins = predicted.margins()
    order = sorted(range(len(configs)), key=margins.__getitem__)  # stable: ties in config order
    return [(configs[i], math.exp(margins[i])) for i in order]


def best(kdef: KernelDef, params: Any, device: Any, model: PerfModel) -> tuple[Any, float]:
    """`rank(...)[0]`, the model's pick, without summing every config's margin in float32."""
    configs, predicted = _predict(kdef, params, device, model)
    i, margin = predicted.best()
    return configs[i], math.exp(margin)


# Autotune's candidates keep the model's best AUTOTUNE_TOP; the rest differ where those agree.
AUTOTUNE_TOP = 2


def autotune_candidates(ranked: Sequence[Any], k: int) -> list[Any]:
    """The k configs autotune measures (`Selector.autotune`; `spio.tune.evaluate` scores the
    same choice), from `ranked`, best first: the first AUTOTUNE_TOP; then, for each field of the
    config in declaration order on which every candidate so far agrees, the best-ranked config
    that differs in it; then the next best-ranked ones. All of `ranked` when it has k or fewer.

    The model's plain top k is often one tile at several pipeline depths or one warp count, so
    when the model misjudges that family every candidate misses together. On the held-out
    complete shapes of every family (H100 samples, 5 folds by layer, mean over 4-10 training
    seeds), the fastest of these candidates had a worst regret within 0.001 of the plain top 5's
    or lower: conv2d_gw8_fprop 1.089 -> 1.072, layernorm_2d_fwd 1.115 -> 1.054, matmul 1.162 ->
    1.139 (on the H200's few complete shapes wgrad's max and matmul's p90 rose; docs/tuning.md,
    "Fourteenth session"). A config that is not a
    dataclass has no fields to tell apart: the plain top k."""
    chosen = list(ranked[: min(k, AUTOTUNE_TOP)])
    if chosen and dataclasses.is_dataclass(chosen[0]):
        for field in dataclasses.fields(chosen[0]):
            if len(chosen) >= k:
                break
            seen = {getattr(c, field.name) for c in chosen}
            if len(seen) == 1:
                other = next((c for c in ranked if getattr(c, field.name) not in seen), None)
                if other is not None:
                    chosen.append(other)
    for c in ranked:
        if len(chosen) >= k:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


def _predict(
    kdef: KernelDef, params: Any, device: Any, model: PerfModel
) -> tuple[list[Any], Prediction]:
    configs = kdef.configs(params, device)
    if not configs:
        raise ValueError(f"{kdef.name}: no valid config for {params} on {device.name}")
    # the family's features changed?
    model.require([*features(kdef, params, configs[0], device), *DEVICE_FEATURES])
    columns = feature_columns(kdef, params, configs, device, model.feature_names)
    return configs, model.trees.predict(columns)


def measure(kdef: KernelDef, params: Any, configs: list[Any]) -> list[tuple[Any, float]]:
    """Times each config on the current GPU (median µs, L2 flushed), fastest first.

    Configs that don't fit the device (`OutOfResources`) are skipped with a log line.
    """
    from spio.errors import OutOfResources
    from spio.timing import bench

    if kdef.make_runner is None:
        raise ValueError(f"{kdef.name}: the family has no make_runner, so it can't be measured")
    timed = []
    for cfg in configs:
        try:
            run = kdef.make_runner(params, cfg)
        except OutOfResources as e:
            logger().info("spio: skipping %s %s: %s", kdef.name, cfg, e)
            continue
        timed.append((cfg, bench(run).median_ms * 1e3))
    timed.sort(key=lambda t: t[1])
    return timed
