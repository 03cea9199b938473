"""Feature vectors of (params, config, device) for the performance models."""

from __future__ import annotations

import dataclasses
from typing import Any

from spio.kernels.kernel_def import KernelDef


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


def to_dict(obj: Any) -> dict[str, Any]:
    """A params/config dataclass as JSON-able data (tuples become lists)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuilds a params/config dataclass from `to_dict` output (lists back to tuples)."""
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**kwargs)
