"""Real GPUs spio knows without a driver: what cuDeviceGetAttribute reports for each product.

Figures from the products' published specifications and the driver's per-arch limits, checked
against what the driver reports on the GPUs spio's GPU suite ran on (H100 SXM, H200:
tests/gpu/test_launch.py); where the two differ, the driver's value is the one to hold. Shared
memory and thread limits are per compute capability; SM counts, L2, clocks and memory per product.
The memory clock is the driver's (half the data rate): peak GB/s = 2 x clock x bus bytes.
total_mem_bytes is the nominal capacity; the driver reports slightly less (reserved memory).
"""

from __future__ import annotations

from spio.cuda.device import DeviceAttributes

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# Per compute capability: (max threads/SM, smem/block opt-in, smem/SM). Every arch here has
# 48 KiB of smem per block without opt-in and 64 Ki registers per SM and per block.
_LIMITS = {
    (8, 0): (2048, 163 * KiB, 164 * KiB),
    (8, 6): (1536, 99 * KiB, 100 * KiB),
    (8, 9): (1536, 99 * KiB, 100 * KiB),
    (9, 0): (2048, 227 * KiB, 228 * KiB),
}


def _gpu(
    name: str,
    cc: tuple[int, int],
    sm_count: int,
    l2_bytes: int,
    clock_mhz: int,
    memory_clock_mhz: int,
    memory_bus_bits: int,
    total_mem_bytes: int,
) -> DeviceAttributes:
    threads, optin, per_sm = _LIMITS[cc]
    return DeviceAttributes(
        name=name,
        ordinal=0,
        arch=f"sm_{cc[0]}{cc[1]}",
        compute_capability=cc,
        sm_count=sm_count,
        max_threads_per_sm=threads,
        max_smem_per_block=48 * KiB,
        max_smem_per_block_optin=optin,
        max_smem_per_sm=per_sm,
        regs_per_sm=64 * 1024,
        regs_per_block=64 * 1024,
        l2_bytes=l2_bytes,
        clock_khz=clock_mhz * 1000,
        memory_clock_khz=memory_clock_mhz * 1000,
        memory_bus_bits=memory_bus_bits,
        total_mem_bytes=total_mem_bytes,
        warp_size=32,
    )


KNOWN: tuple[DeviceAttributes, ...] = (
    #    driver name                 cc      SMs  L2         clock  mem clk bus   memory
    _gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 * MiB, 1980, 2619, 5120, 80 * GiB),
    _gpu("NVIDIA H100 PCIe", (9, 0), 114, 50 * MiB, 1755, 1593, 5120, 80 * GiB),
    # H200: 60 MiB of L2 (not the H100's 50) and a 6016-bit bus as the driver reports them
    # (measured: driver 580, SXM): 2 x 3201 MHz x 752 B = 4.8 TB/s, NVIDIA's figure.
    _gpu("NVIDIA H200", (9, 0), 132, 60 * MiB, 1980, 3201, 6016, 141 * GiB),
    _gpu("NVIDIA A100-SXM4-80GB", (8, 0), 108, 40 * MiB, 1410, 1593, 5120, 80 * GiB),
    _gpu("NVIDIA A100-SXM4-40GB", (8, 0), 108, 40 * MiB, 1410, 1215, 5120, 40 * GiB),
    _gpu("NVIDIA A10", (8, 6), 72, 6 * MiB, 1695, 6251, 384, 24 * GiB),
    _gpu("NVIDIA GeForce RTX 3090", (8, 6), 82, 6 * MiB, 1695, 9751, 384, 24 * GiB),
    _gpu("NVIDIA L4", (8, 9), 58, 48 * MiB, 2040, 6251, 192, 24 * GiB),
    _gpu("NVIDIA L40S", (8, 9), 142, 96 * MiB, 2520, 9001, 384, 48 * GiB),
    _gpu("NVIDIA GeForce RTX 4090", (8, 9), 128, 72 * MiB, 2520, 10501, 384, 24 * GiB),
)

# Short names people type -> driver names.
ALIASES: dict[str, str] = {
    "H100": "NVIDIA H100 80GB HBM3",
    "H100 SXM": "NVIDIA H100 80GB HBM3",
    "H100 SXM5": "NVIDIA H100 80GB HBM3",
    "A100": "NVIDIA A100-SXM4-80GB",
    "A100 80GB": "NVIDIA A100-SXM4-80GB",
    "A100 40GB": "NVIDIA A100-SXM4-40GB",
    "RTX 4090": "NVIDIA GeForce RTX 4090",
    "4090": "NVIDIA GeForce RTX 4090",
    "RTX 3090": "NVIDIA GeForce RTX 3090",
    "3090": "NVIDIA GeForce RTX 3090",
}

# The GPU that stands for an arch when only the arch is known.
BY_ARCH: dict[str, str] = {
    "sm_80": "NVIDIA A100-SXM4-80GB",
    "sm_86": "NVIDIA A10",
    "sm_89": "NVIDIA L40S",
    "sm_90": "NVIDIA H100 80GB HBM3",
}
