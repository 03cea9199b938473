"""spio's binding of the CUDA Driver API: devices, modules, functions and launches.

    from spio.cuda import Module, device_attributes
    dev = device_attributes()                        # DeviceAttributes of device 0 ("sm_90", ...)
    f = Module.load(cubin).function("axpy", signature="ppif")
    f.launch(grid, block, (y, x, n, alpha), stream=torch.cuda.current_stream().cuda_stream)

Thin and policy-free (see docs/driver.md): no kernel caching, no heuristics, no torch. Importing
does nothing: libcuda is opened at first use. `Module`, `Function`, `Launch`, `pack_args`,
`synchronize` and `driver` come from the compiled extensions and are imported on first access, so
the pure Python parts (DeviceAttributes, known_device) work even where the extensions are not
built.
"""

from __future__ import annotations

import importlib

from spio.cuda.device import (
    DeviceAttributes,
    device_attributes,
    device_count,
    driver_version,
    known_device,
    known_devices,
)
from spio.cuda.tensor_map import TensorMap

_FROM_EXTENSION = {
    "Module": "spio.cuda.module",
    "Function": "spio.cuda.module",
    "Launch": "spio.cuda.module",
    "pack_args": "spio.cuda.args",
    "synchronize": "spio.cuda.driver",
    "driver": "spio.cuda.driver",
}

__all__ = [
    "DeviceAttributes",
    "Function",
    "Launch",
    "Module",
    "TensorMap",
    "device_attributes",
    "device_count",
    "driver",
    "driver_version",
    "known_device",
    "known_devices",
    "pack_args",
    "synchronize",
]


def _extension(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(
            f"{name} is a compiled extension that is not built ({e}); build it in place with "
            "`pip install -e . --no-build-isolation --no-deps` (needs Cython and a C compiler, "
            "no CUDA toolkit)"
        ) from e


def __getattr__(name: str):
    if name not in _FROM_EXTENSION:
        raise AttributeError(f"module 'spio.cuda' has no attribute {name!r}")
    module = _extension(_FROM_EXTENSION[name])
    return module if name == "driver" else getattr(module, name)
