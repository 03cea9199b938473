"""Compiled, loaded kernels: (family, params, config, device) -> launchable function, cached in memory.

The disk cache of cubins lives in the compiler; this is the level above it: one loaded CUfunction per
device, looked up by frozen dataclasses so a warm launch costs a dict lookup.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel variant loaded on one device, ready to launch."""

    spec: KernelSpec
    function: Any  # spio.cuda Function
    module: Any  # keeps the module alive as long as the function

    def launch(self, grid, args, stream: int = 0) -> None:
        self.function.launch(grid, self.spec.block, args, smem=self.spec.smem, stream=stream)


def compile_spec(spec: KernelSpec, arch: str) -> bytes:
    """Compiles one kernel variant to a cubin (through the disk cache)."""
    from spio.compiler import compile as nvrtc_compile

    return nvrtc_compile(
        spec.source_text(), arch, options=spec.options, name=spec.source, scope=spec.specs
    )


def load_spec(spec: KernelSpec, arch: str) -> LoadedKernel:
    """Compiles (or loads from disk) and loads a kernel variant into the current device."""
    from spio.cuda import Module

    module = Module.load(compile_spec(spec, arch))
    function = module.function(spec.entry, signature=spec.signature)
    if spec.smem > 48 * 1024:
        function.set_max_dynamic_smem(spec.smem)
    return LoadedKernel(spec=spec, function=function, module=module)


class FunctionCache:
    """In-memory cache of loaded kernels keyed on (family, params, config, device ordinal)."""

    def __init__(self) -> None:
        self._loaded: dict[tuple, LoadedKernel] = {}
        self._lock = threading.Lock()

    def get(self, kdef: KernelDef, params: Any, config: Any, device: Any) -> LoadedKernel:
        key = (kdef.name, params, config, device.ordinal)
        hit = self._loaded.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._loaded.get(key)
            if hit is None:
                hit = load_spec(kdef.spec(params, config, device), device.arch)
                self._loaded[key] = hit
        return hit

    def __len__(self) -> int:
        return len(self._loaded)

    def clear(self) -> None:
        self._loaded.clear()


@functools.cache
def default_function_cache() -> FunctionCache:
    """The process-wide cache the torch ops use; tests may build their own FunctionCache."""
    return FunctionCache()
