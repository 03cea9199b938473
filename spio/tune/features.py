"""Feature vectors of (params, config, device) for the performance models."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

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


def features(kdef: KernelDef, params: Any, config: Any, device: Any) -> dict[str, float]:
    """The family's own features, or every numeric field of params and config when it has none."""
    if kdef.features is not None:
        return {k: float(v) for k, v in kdef.features(params, config, device).items()}
    return _numeric_fields("p_", params) | _numeric_fields("c_", config)


def feature_matrix(
    kdef: KernelDef, params: Any, configs: Sequence[Any], device: Any, names: Sequence[str]
) -> np.ndarray:
    """float32 matrix of the features of each config (rows) in the order `names` (columns), as
    a model trained on `names` sees them: the same values as `features()`, rounded to float32.

    A feature a family doesn't provide is NaN (callers check names first: `PerfModel.require`).
    When the family's own key order is `names` (the usual case: the model was trained on this
    family), the values go straight into one float64 buffer without per-key lookups.
    """
    names = tuple(names)
    if not configs:
        return np.empty((0, len(names)), dtype=np.float32)
    f = kdef.features
    first = f(params, configs[0], device) if f is not None else None
    if f is None or first is None or tuple(first) != names:
        rows = [features(kdef, params, c, device) for c in configs]
        return np.asarray(
            [[r.get(n, math.nan) for n in names] for r in rows], dtype=np.float64
        ).astype(np.float32)
    k = len(names)
    rows = [first] + [f(params, c, device) for c in itertools.islice(configs, 1, None)]
    for c, row in zip(configs, rows, strict=True):
        if len(row) != k:
            raise ValueError(
                f"{kdef.name}: features() returned {len(row)} values for {c} but {k} for "
                f"{configs[0]}; a family's features must have a fixed key order"
            )
    values = itertools.chain.from_iterable(map(dict.values, rows))
    x = np.fromiter(values, dtype=np.float64, count=len(rows) * k)
    return x.reshape(len(rows), k).astype(np.float32)
