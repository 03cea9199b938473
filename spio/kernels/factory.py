"""The kernel factory: (family, params, device) -> a selected, compiled, loaded kernel, in one call.

    from spio.kernels.factory import kernel
    k = kernel("conv2d_gw8_fprop", Conv2dGw8Params.from_tensors(x, w, bias), device=0)
    k.config                      # the selected config (model, heuristic or autotune winner)
    fprop.launch(k.loaded, k.params, k.config, out, x, w, bias, stream)   # the family's launch

It is the path the torch ops take, composed: the same selector (`spio.kernels.select`, so the
config is the one the op would pick for these params, persisted the same way) and the same
function cache (`spio.kernels.loader`, so the module the op loaded is the one returned, and the
other way round). Loaded kernels are keyed by the family's `compiled_params` (the params with the
run-time launch arguments canonicalized), so one load serves every batch size of a layer. Each
family's own `launch` function computes the grid and arguments (some passes launch two kernels:
conv2d_gw8 wgrad and the layernorm_2d backward add their reduction); `Kernel.launch` is the raw
launch for callers that build them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.kernels.loader import FunctionCache, LoadedKernel


@dataclass(frozen=True)
class Kernel:
    """A kernel variant selected for `params` and loaded on `device`."""

    kdef: KernelDef
    params: Any
    config: Any
    device: Any  # spio.cuda.DeviceAttributes
    loaded: LoadedKernel

    def launch(self, grid, args, stream: int = 0) -> None:
        """The raw launch (grid and arguments in the entry's order); the family's `launch`
        function builds both from tensors."""
        self.loaded.launch(grid, args, stream)


def family(name_or_def: str | KernelDef) -> KernelDef:
    """The registered family of that name (a KernelDef is returned as it is)."""
    if isinstance(name_or_def, KernelDef):
        return name_or_def
    from spio.kernels import KERNELS

    kdef = KERNELS.get(name_or_def) if isinstance(name_or_def, str) else None
    if kdef is None:
        raise ValueError(
            f"kernel: unknown family {name_or_def!r}; registered: {', '.join(sorted(KERNELS))}"
        )
    return kdef


def compiled_params(kdef: KernelDef, params: Any) -> Any:
    """The params a compiled variant of `kdef` depends on: the loaded-kernel cache key."""
    return params if kdef.compiled_params is None else kdef.compiled_params(params)


def select(
    name_or_def: str | KernelDef,
    params: Any,
    device: Any = 0,
    *,
    config: Any = None,
    selector: Any = None,
) -> tuple[KernelDef, Any, Any]:
    """(kdef, config, device attributes) for `params`, without compiling or loading: the
    selector's pick, or `config` checked against the family's configs for these params."""
    kdef = family(name_or_def)
    if not isinstance(params, kdef.params_type):
        raise TypeError(
            f"kernel {kdef.name}: params must be a {kdef.params_type.__name__}, got "
            f"{type(params).__name__}; build them with {kdef.params_type.__name__}(...) or "
            f"its from_tensors"
        )
    dev = _device(device)
    if config is None:
        if selector is None:
            from spio.kernels.select import default_selector

            selector = default_selector()
        config = selector.select(kdef, params, dev)
    elif config not in kdef.configs(params, dev):
        raise ValueError(
            f"kernel {kdef.name}: {config} is not a valid config for {params} on {dev.name}; "
            f"pass one of spio.kernels.KERNELS[{kdef.name!r}].configs(params, device), or leave "
            "config out to have one selected"
        )
    return kdef, config, dev


def kernel(
    name_or_def: str | KernelDef,
    params: Any,
    device: Any = 0,
    *,
    config: Any = None,
    selector: Any = None,
    cache: FunctionCache | None = None,
) -> Kernel:
    """Selects a config for `params` on `device` (unless `config` is given), compiles it
    (through the disk cache) and loads it (through the in-memory function cache).

    device: a GPU ordinal or `spio.cuda.DeviceAttributes` (`known_device(...)` for a GPU that
        is not here only selects and compiles: use `select` and `spio.kernels.loader.compile_spec`).
    selector, cache: default to the ones the torch ops use.
    """
    kdef, config, dev = select(name_or_def, params, device, config=config, selector=selector)
    if cache is None:
        from spio.kernels.loader import default_function_cache

        cache = default_function_cache()
    loaded = cache.get(kdef, compiled_params(kdef, params), config, dev)
    return Kernel(kdef=kdef, params=params, config=config, device=dev, loaded=loaded)


def _device(device: Any) -> Any:
    if isinstance(device, bool) or not isinstance(device, int):
        if hasattr(device, "arch") and hasattr(device, "name"):
            return device
        raise TypeError(
            f"kernel: device must be a GPU ordinal (int) or spio.cuda.DeviceAttributes, "
            f"got {device!r}"
        )
    from spio.cuda import device_attributes

    return device_attributes(device)
