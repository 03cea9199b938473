"""Ranks a family's configs for a layer by predicted latency, and measures the best few."""

from __future__ import annotations

from typing import Any

import numpy as np

from spio.kernels.kernel_def import KernelDef
from spio.logs import logger
from spio.tune.features import feature_matrix, features
from spio.tune.model import PerfModel


def rank(kdef: KernelDef, params: Any, device: Any, model: PerfModel) -> list[tuple[Any, float]]:
    """Every valid config with its predicted latency (µs), fastest first."""
    configs = kdef.configs(params, device)
    if not configs:
        raise ValueError(f"{kdef.name}: no valid config for {params} on {device.name}")
    model.require(features(kdef, params, configs[0], device))
    predicted = model.predict_matrix_us(
        feature_matrix(kdef, params, configs, device, model.feature_names)
    )
    order = np.argsort(predicted, kind="stable")  # ties keep the family's config order
    us = predicted.tolist()
    return [(configs[i], us[i]) for i in order.tolist()]


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
