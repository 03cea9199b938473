"""Ranks a family's configs for a layer by predicted latency, and measures the best few.

The ranking is by the model's margin (log µs) as XGBoost computes it (`spio.tune.trees`), ties in
the family's config order, as a stable sort of XGBoost's predictions orders them.
"""

from __future__ import annotations

import math
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.logs import logger
from spio.tune.features import feature_columns, features
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


def _predict(
    kdef: KernelDef, params: Any, device: Any, model: PerfModel
) -> tuple[list[Any], Prediction]:
    configs = kdef.configs(params, device)
    if not configs:
        raise ValueError(f"{kdef.name}: no valid config for {params} on {device.name}")
    model.require(features(kdef, params, configs[0], device))  # the family's features changed?
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
