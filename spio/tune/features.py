"""Feature vectors of (params, config, device) for the performance models."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.kernels.kernel_def import from_dict as from_dict
from spio.kernels.kernel_def import to_dict as to_dict


def _numeric_fields(prefix: str, obj: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, bool | int | float):
            out[f"{prefix}{f.name}"] = float(value)
        elif isinstance(value, tuple) and all(isinstance(v, int | float) for v in value):
            out.update({f"{prefix}{f.name}_{i}": float(v) for i, v in enumerate(value)})
    return out


# What a model may take besides its family's features: the GPU's memory bandwidth (GB/s) and L2
# size (MiB), which tell apart GPUs of one arch with the same SMs and shared memory (the H100 at
# 3352 GB/s and 50 MiB, the H200 at 4814 GB/s and 60 MiB). Only a model trained on several GPUs'
# samples has them (`spio tune train --pool-for`); they come last in its feature names.
DEVICE_FEATURES = ("dev_dram_gbps", "dev_l2_mib")


def device_features(device: Any) -> dict[str, float]:
    """DEVICE_FEATURES of a DeviceAttributes (double data rate: two transfers a memory clock)."""
    return {
        "dev_dram_gbps": device.memory_clock_khz * 2 * device.memory_bus_bits / 8 / 1e6,
        "dev_l2_mib": device.l2_bytes / 2**20,
    }


def features(kdef: KernelDef, params: Any, config: Any, device: Any) -> dict[str, float]:
    """The family's own features, or every numeric field of params and config when it has none."""
    if kdef.features is not None:
        return {k: float(v) for k, v in kdef.features(params, config, device).items()}
    return _numeric_fields("p_", params) | _numeric_fields("c_", config)


def feature_columns(
    kdef: KernelDef, params: Any, configs: Sequence[Any], device: Any, names: Sequence[str]
) -> list[Sequence[float]]:
    """The features of each config as one column per name in `names`: what a model trained on
    `names` is given (`spio.tune.trees.Trees.predict`), the values of `features()` (a model
    rounds them to float32 itself). No numpy: the selection path stays free of its import.

    A feature a family doesn't provide is NaN (callers check names first: `PerfModel.require`);
    DEVICE_FEATURES in `names` are the device's values, the same for every config.
    A family with `KernelDef.feature_columns` computes the columns itself; otherwise, when the
    family's own key order is `names` (the usual case: the model was trained on this family),
    the rows are transposed as they are, without per-key lookups.
    """
    names = tuple(names)
    if names and names[-1] in DEVICE_FEATURES:  # a pooled model: constant columns after its own
        own = tuple(n for n in names if n not in DEVICE_FEATURES)
        by_name = dict(zip(own, feature_columns(kdef, params, configs, device, own), strict=True))
        terms = device_features(device)
        return [by_name[n] if n in by_name else [terms[n]] * len(configs) for n in names]
    if kdef.feature_columns is not None and configs:
        columns = kdef.feature_columns(params, configs, device)
        missing = [math.nan] * len(configs)
        return [columns.get(n, missing) for n in names]
    f = kdef.features
    if f is None:
        rows = [features(kdef, params, c, device) for c in configs]
    else:
        rows = [f(params, c, device) for c in configs]
    if not rows or tuple(rows[0]) != names:
        return [[float(r[n]) if n in r else math.nan for r in rows] for n in names]
    k = len(names)
    for c, row in zip(configs, rows, strict=True):
        if len(row) != k:
            raise ValueError(
                f"{kdef.name}: features() returned {len(row)} values for {c} but {k} for "
                f"{configs[0]}; a family's features must have a fixed key order"
            )
    return list(zip(*map(dict.values, rows), strict=True))
