"""What a GPU is: DeviceAttributes read from the driver, or from a table of known GPUs.

Kernel configs, performance models and benchmarks take hardware facts from here (SM count, shared
memory limits, L2 size, clocks), never from literals.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace

from spio.errors import CudaDriverError, LibraryNotFoundError

_ARCH = re.compile(r"sm_(\d+)(\d)")


@dataclass(frozen=True, slots=True)
class DeviceAttributes:
    """One GPU's properties, as the CUDA driver reports them.

    Attributes:
        name: the driver's device name, e.g. "NVIDIA H100 80GB HBM3".
        ordinal: device index (0 for table entries of `known_device`).
        arch: NVRTC target of the compute capability, e.g. "sm_90".
        compute_capability: (major, minor), e.g. (9, 0).
        sm_count: streaming multiprocessors.
        max_threads_per_sm: resident threads per SM.
        max_smem_per_block: shared memory a block gets without opting in (48 KiB).
        max_smem_per_block_optin: the most shared memory one block may opt in to.
        max_smem_per_sm: shared memory per SM.
        regs_per_sm, regs_per_block: 32-bit registers per SM and per block.
        l2_bytes: L2 cache size.
        clock_khz: peak SM clock.
        memory_clock_khz: peak memory clock (the data rate is twice this).
        memory_bus_bits: memory bus width.
        total_mem_bytes: device memory.
        warp_size: threads per warp.
    """

    name: str
    ordinal: int
    arch: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_sm: int
    max_smem_per_block: int
    max_smem_per_block_optin: int
    max_smem_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    l2_bytes: int
    clock_khz: int
    memory_clock_khz: int
    memory_bus_bits: int
    total_mem_bytes: int
    warp_size: int = 32

    def __post_init__(self):
        major, minor = self.compute_capability
        expected = f"sm_{major}{minor}"
        if self.arch != expected:
            raise ValueError(
                f"DeviceAttributes({self.name!r}): arch {self.arch!r} does not match compute "
                f"capability {self.compute_capability}; it must be {expected!r}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and value < (0 if f.name == "ordinal" else 1):
                raise ValueError(
                    f"DeviceAttributes({self.name!r}).{f.name} = {value}: must be positive"
                )

    @property
    def dram_bandwidth_gbps(self) -> float:
        """Theoretical peak DRAM bandwidth in GB/s: 2 transfers per memory clock x bus bytes."""
        return 2 * self.memory_clock_khz * 1e3 * (self.memory_bus_bits // 8) / 1e9


def arch_of(compute_capability: tuple[int, int]) -> str:
    """NVRTC's target name for a compute capability: (9, 0) -> "sm_90", (12, 0) -> "sm_120"."""
    major, minor = compute_capability
    return f"sm_{major}{minor}"


@functools.cache
def device_attributes(ordinal: int = 0) -> DeviceAttributes:
    """Attributes of the device with this ordinal, read from the driver (once per process)."""
    from spio.cuda import driver

    count = driver.device_get_count()
    if not isinstance(ordinal, int) or not 0 <= ordinal < count:
        raise ValueError(
            f"device_attributes: ordinal must be in [0, {count}) on this machine, got {ordinal!r}"
        )
    a = driver.DeviceAttribute

    def get(attribute) -> int:
        return driver.device_get_attribute(attribute, ordinal)

    cc = (get(a.COMPUTE_CAPABILITY_MAJOR), get(a.COMPUTE_CAPABILITY_MINOR))
    return DeviceAttributes(
        name=driver.device_get_name(ordinal),
        ordinal=ordinal,
        arch=arch_of(cc),
        compute_capability=cc,
        sm_count=get(a.MULTIPROCESSOR_COUNT),
        max_threads_per_sm=get(a.MAX_THREADS_PER_MULTIPROCESSOR),
        max_smem_per_block=get(a.MAX_SHARED_MEMORY_PER_BLOCK),
        max_smem_per_block_optin=get(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_smem_per_sm=get(a.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        regs_per_sm=get(a.MAX_REGISTERS_PER_MULTIPROCESSOR),
        regs_per_block=get(a.MAX_REGISTERS_PER_BLOCK),
        l2_bytes=get(a.L2_CACHE_SIZE),
        clock_khz=get(a.CLOCK_RATE),
        memory_clock_khz=get(a.MEMORY_CLOCK_RATE),
        memory_bus_bits=get(a.GLOBAL_MEMORY_BUS_WIDTH),
        total_mem_bytes=driver.device_total_mem(ordinal),
        warp_size=get(a.WARP_SIZE),
    )


def _no_gpu_status(e: CudaDriverError) -> bool:
    from spio.cuda import driver

    return e.status in (driver.CUDA_ERROR_STUB_LIBRARY, driver.CUDA_ERROR_NO_DEVICE)


def device_count() -> int:
    """GPUs the driver sees; 0 without a driver, with the stub library, or with no device."""
    from spio.cuda import driver

    try:
        return driver.device_get_count()
    except LibraryNotFoundError:
        return 0
    except CudaDriverError as e:
        if _no_gpu_status(e):
            return 0
        raise


def driver_version() -> tuple[int, int] | None:
    """The CUDA version the installed driver supports, e.g. (12, 4); None without a driver."""
    from spio.cuda import driver

    try:
        v = driver.driver_get_version()
    except LibraryNotFoundError:
        return None
    except CudaDriverError as e:
        if _no_gpu_status(e):
            return None
        raise
    return (v // 1000, (v % 1000) // 10)


def _key(name: str) -> str:
    """Lookup key of a device name: case and punctuation folded, vendor prefixes dropped."""
    s = name.lower().replace("nvidia", "").replace("geforce", "")
    return re.sub(r"[^a-z0-9]", "", s)


def known_devices() -> dict[str, DeviceAttributes]:
    """The table of real GPUs spio knows without a driver, by driver name."""
    from spio.cuda._known_devices import KNOWN

    return {d.name: d for d in KNOWN}


def known_device(name_or_arch: str) -> DeviceAttributes:
    """Attributes of a named GPU (e.g. "H100", "NVIDIA A100-SXM4-80GB", "rtx 4090") or of a
    representative GPU of an arch ("sm_90" -> H100 SXM), for host tests and `spio tune select`.

    Figures are the driver's for that product; total_mem_bytes is the nominal capacity (the
    driver reports slightly less).
    """
    from spio.cuda._known_devices import ALIASES, BY_ARCH, KNOWN

    if not isinstance(name_or_arch, str):
        raise TypeError(
            f"known_device: expected a device name or arch (str), got {type(name_or_arch).__name__}"
        )
    by_key = {_key(d.name): d for d in KNOWN}
    by_key.update({_key(alias): by_key[_key(name)] for alias, name in ALIASES.items()})
    arch = name_or_arch.strip().lower()
    if _ARCH.fullmatch(arch):
        if arch not in BY_ARCH:
            raise ValueError(
                f"known_device: no representative GPU for {arch}; known arches: "
                f"{', '.join(sorted(BY_ARCH))}"
            )
        return by_key[_key(BY_ARCH[arch])]
    found = by_key.get(_key(name_or_arch))
    if found is None:
        names = sorted({d.name for d in KNOWN} | set(ALIASES))
        raise ValueError(
            f"known_device: unknown GPU {name_or_arch!r}; known: {', '.join(names)}; or pass an "
            f"arch ({', '.join(sorted(BY_ARCH))})"
        )
    return replace(found)
