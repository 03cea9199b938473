"""The kernel factory: (family, params, device) -> a selected, compiled, loaded kernel, in one call.

    from spio.select import kernel
    k = kernel("conv2d_gw8_fprop", Conv2dGw8Params.from_tensors(x, w, bias), 0)  # GPU 0
    k.config                      # the config the op would run (model, heuristic or autotune)
    fprop.launch(k.loaded, k.params, k.config, out, x, w, bias, stream)   # the family's launch

It is the path the torch ops take, composed: the config comes from `spio.select.op_config`
(the family's selection rule, `KernelDef.select_key`, through the ops' selector: the config the op
runs for these params, persisted the same way), and the loaded kernel from the ops' function cache
(`spio.kernels.loader`, so the module the op loaded is the one returned, and the other way round),
keyed by the family's `compiled_params` (the params with the run-time launch arguments
canonicalized), so one load serves every batch size of a layer that runs one config (a
bucket). Each family's own launch function computes the grid and arguments from tensors
(matmul's `launch` looks its kernel up itself; the two reductions, whose configs follow from the
first pass's, are launched by that pass's op and take an explicit `config` here);
`Kernel.launch` is the raw launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spio.cuda.device import DeviceAttributes
from spio.kernels.kernel_def import KernelDef
from spio.kernels.loader import FunctionCache, LoadedKernel
from spio.select.selector import Selector, op_config


@dataclass(frozen=True)
class Kernel:
    """A kernel variant selected for `params` and loaded on `device`."""

    kdef: KernelDef
    params: Any
    config: Any
    device: DeviceAttributes
    loaded: LoadedKernel

    def launch(self, grid, args, stream: int = 0, *, dependent: bool = False) -> None:
        """The raw launch (grid and arguments in the entry's order; `LoadedKernel.launch`); the
        family's launch function builds both from tensors."""
        self.loaded.launch(grid, args, stream, dependent=dependent)


def family(name_or_def: str | KernelDef) -> KernelDef:
    """The registered family of that name (a KernelDef is returned as it is)."""
    if isinstance(name_or_def, KernelDef):
        return name_or_def
    from spio.kernels import KERNELS

    if not isinstance(name_or_def, str):
        raise TypeError(
            f"kernel: family must be a registered name (str) or a KernelDef, got "
            f"{type(name_or_def).__name__}; see spio.kernels.KERNELS"
        )
    kdef = KERNELS.get(name_or_def)
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
    device: int | DeviceAttributes,
    *,
    config: Any = None,
    selector: Selector | None = None,
) -> tuple[KernelDef, Any, DeviceAttributes]:
    """(kdef, config, device attributes) for `params`, without compiling or loading: the config
    the op would run (`op_config`), or `config` checked against the family's configs.

    device: a GPU ordinal, or DeviceAttributes (`spio.cuda.known_device(...)` selects for a GPU
        that is not here, e.g. to compile for it with `spio.kernels.loader.compile_spec`).
    """
    kdef = family(name_or_def)
    if not isinstance(params, kdef.params_type):
        raise TypeError(
            f"kernel {kdef.name}: params must be a {kdef.params_type.__name__}, got "
            f"{type(params).__name__}; build them with {kdef.params_type.__name__}(...) or "
            f"its from_tensors"
        )
    dev = _device(device)
    if config is None:
        config = op_config(kdef, params, dev, selector)
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
    device: int | DeviceAttributes,
    *,
    config: Any = None,
    selector: Selector | None = None,
    cache: FunctionCache | None = None,
) -> Kernel:
    """Selects a config for `params` on `device` (unless `config` is given), compiles it
    (through the disk cache) and loads it on that GPU (through the in-memory function cache).

    device: a GPU ordinal, or the DeviceAttributes of a GPU that is here (`device_attributes`;
        attributes of another GPU are refused: `select` and `compile_spec` serve those).
    selector, cache: default to the ones the torch ops use.
    """
    kdef, config, dev = select(name_or_def, params, device, config=config, selector=selector)
    if not isinstance(device, int):
        _require_present(dev)
    if cache is None:
        from spio.kernels.loader import default_function_cache

        cache = default_function_cache()
    loaded = cache.get(kdef, compiled_params(kdef, params), config, dev)
    return Kernel(kdef=kdef, params=params, config=config, device=dev, loaded=loaded)


def _device(device: Any) -> DeviceAttributes:
    if isinstance(device, DeviceAttributes):
        return device
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(
            f"kernel: device must be a GPU ordinal (int) or spio.cuda.DeviceAttributes, got "
            f"{device!r}; e.g. 0, torch.cuda.current_device(), or spio.cuda.known_device('H100') "
            "to select for a GPU that is not here"
        )
    from spio.cuda import device_attributes

    return device_attributes(device)


def _require_present(dev: DeviceAttributes) -> None:
    from spio.cuda import device_attributes

    here = device_attributes(dev.ordinal)
    if (here.name, here.arch) != (dev.name, dev.arch):
        raise ValueError(
            f"kernel: device {dev.name} ({dev.arch}) is not GPU {dev.ordinal} here "
            f"({here.name}, {here.arch}); pass the ordinal of a GPU that is here, or use "
            "spio.select.factory.select (and spio.kernels.loader.compile_spec) for another GPU"
        )
