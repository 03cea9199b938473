"""Compiled, loaded kernels: (family, params, config, device) -> launchable function, in memory.

The disk cache of cubins lives in the compiler; this is the level above it: one loaded CUfunction
per device, looked up by frozen dataclasses so a warm launch costs a dict lookup.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel variant loaded on one device, ready to launch.

    pdl: whether launches that ask for it (`launch(..., dependent=True)`) use programmatic
    dependent launch; `programmatic_launch(arch)` at load time (sm_90+ cubin, CUDA 12.3+
    driver, SPIO_PDL on).
    carveout: the preferred shared-memory carveout every launch carries: the spec's, or -1
    where the driver predates the launch attribute (`launch_carveout`)."""

    spec: KernelSpec
    function: Any  # spio.cuda Function
    module: Any  # keeps the module alive as long as the function
    pdl: bool = False
    carveout: int = -1

    def bind(self, grid, *, dependent: bool = False) -> Any:
        """A `spio.cuda.Launch` of this kernel on `grid` with its block and shared memory:
        called with (args, stream) it launches (in the kernel's own device context).

        dependent=True: this kernel executes `griddepcontrol.wait` before it reads what the
        previous kernel in the stream wrote, so it may be launched with PDL (when self.pdl) and
        overlap that kernel's tail. Only second passes whose source does so may pass it."""
        return self.function.bind(
            grid,
            self.spec.block,
            self.spec.smem,
            pdl=bool(dependent) and self.pdl,
            carveout=self.carveout,
        )

    def launch(self, grid, args, stream: int = 0, *, dependent: bool = False) -> None:
        """One launch on `grid` (see `bind`)."""
        self.bind(grid, dependent=dependent)(args, stream)


# CUDA 12.3: the first driver that captures a PDL launch into a CUDA graph (as a programmatic
# edge); older drivers get plain launches, so graph capture keeps working everywhere.
PDL_MIN_DRIVER = (12, 3)


def programmatic_launch(arch: str) -> bool:
    """Whether dependent second passes of a cubin built for `arch` launch with PDL: compute
    capability 9.0+ (griddepcontrol exists; an sm_90+ cubin runs only on such a device), a
    driver of CUDA 12.3+ (stream capture of PDL launches) and SPIO_PDL on (the default).
    Read once per loaded kernel: clear the function cache after changing SPIO_PDL in-process."""
    from spio.cuda import driver_version
    from spio.settings import settings

    major = int(arch.removeprefix("sm_").rstrip("a")) // 10
    if major < 9 or not settings().pdl:
        return False
    version = driver_version()
    return version is not None and version >= PDL_MIN_DRIVER


# CUDA 12.8: a driver that surely knows the launch attribute PREFERRED_SHARED_MEMORY_CARVEOUT;
# under older drivers a spec's carveout is dropped (the driver's choice: the kernel is the same,
# its speed may differ).
CARVEOUT_MIN_DRIVER = (12, 8)


def launch_carveout(spec: KernelSpec) -> int:
    """The carveout launches of `spec` carry: `spec.carveout` on a CUDA 12.8+ driver, else -1."""
    from spio.cuda import driver_version

    if spec.carveout == -1:
        return -1
    version = driver_version()
    return spec.carveout if version is not None and version >= CARVEOUT_MIN_DRIVER else -1


def compile_spec(spec: KernelSpec, arch: str) -> bytes:
    """Compiles one kernel variant to a cubin (through the disk cache)."""
    from spio.compiler import compile as nvrtc_compile

    return nvrtc_compile(
        spec.source_text(),
        arch + spec.arch_suffix,
        options=spec.options,
        name=spec.source,
        scope=spec.specs,
    )


def compile_job(spec: KernelSpec, arch: str) -> Any:
    """The `spio.compiler.CompileJob` of one kernel variant (for `compile_many`)."""
    from spio.compiler import CompileJob

    return CompileJob(
        spec.source_text(),
        arch + spec.arch_suffix,
        options=spec.options,
        name=spec.source,
        scope=spec.specs,
    )


def compile_specs(
    specs: Sequence[KernelSpec],
    arch: str,
    progress: bool | None = False,
    *,
    workers: int | None = None,
    nice: int = 0,
) -> list:
    """Compiles kernel variants in parallel processes (through the disk cache, so later
    `load_spec` calls only load); returns the cubins in order. `workers` and `nice` as in
    `spio.compiler.compile_many`."""
    from spio.compiler import compile_many

    jobs = [compile_job(s, arch) for s in specs]
    return compile_many(jobs, workers=workers, progress=progress, nice=nice)


def load_spec(spec: KernelSpec, arch: str) -> LoadedKernel:
    """Compiles (or loads from disk) and loads a kernel variant into the current device."""
    from spio.cuda import Module

    module = Module.load(compile_spec(spec, arch))
    function = module.function(spec.entry, signature=spec.signature)
    if spec.min_registers and function.num_regs < spec.min_registers:
        from spio.compiler.toolchain import describe

        nvrtc = describe()
        raise RuntimeError(
            f"{spec.title}: the compiler gave it {function.num_regs} registers a thread, below "
            f"the {spec.min_registers} its register rebalancing (setmaxnreg) draws from, so it "
            f"would hang at launch; NVRTC {nvrtc['version']} ({nvrtc['library']}) is not one "
            "spio was tested with: point SPIO_NVRTC at NVRTC 12.9 or 13.0"
        )
    if spec.smem > 48 * 1024:
        function.set_max_dynamic_smem(spec.smem)
    return LoadedKernel(
        spec=spec,
        function=function,
        module=module,
        pdl=programmatic_launch(arch),
        carveout=launch_carveout(spec),
    )


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

    def items(self) -> list[tuple[tuple, LoadedKernel]]:
        """((family name, params, config, device ordinal), loaded kernel) of every entry."""
        return list(self._loaded.items())

    def clear(self) -> None:
        self._loaded.clear()


@functools.cache
def default_function_cache() -> FunctionCache:
    """The process-wide cache the torch ops use; tests may build their own FunctionCache."""
    return FunctionCache()
