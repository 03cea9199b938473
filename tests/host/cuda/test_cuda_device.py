"""DeviceAttributes and the table of known GPUs (no driver needed)."""

from __future__ import annotations

import dataclasses

import pytest

from spio.cuda import DeviceAttributes, known_device, known_devices
from spio.cuda.device import arch_of

KiB = 1024


@pytest.mark.parametrize(
    "cc, arch",
    [
        ((8, 0), "sm_80"),
        ((8, 6), "sm_86"),
        ((8, 9), "sm_89"),
        ((9, 0), "sm_90"),
        ((10, 0), "sm_100"),
        ((12, 0), "sm_120"),
    ],
)
def test_arch_string_of_compute_capability(cc, arch):
    assert arch_of(cc) == arch


def test_arch_must_match_compute_capability():
    h100 = known_device("H100")
    with pytest.raises(ValueError, match=r"arch 'sm_80' does not match .* must be 'sm_90'"):
        dataclasses.replace(h100, arch="sm_80")
    with pytest.raises(ValueError, match=r"sm_count = 0: must be positive"):
        dataclasses.replace(h100, sm_count=0)


def test_attributes_are_frozen_and_slotted():
    h100 = known_device("H100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        h100.sm_count = 1  # type: ignore[misc]
    assert not hasattr(h100, "__dict__")
    assert hash(h100) == hash(known_device("NVIDIA H100 80GB HBM3"))


@pytest.mark.parametrize("device", list(known_devices().values()), ids=lambda d: d.name)
def test_table_is_consistent(device: DeviceAttributes):
    # Limits the hardware guarantees for every arch spio runs on (sm_80+).
    assert device.compute_capability >= (8, 0)
    assert device.warp_size == 32
    assert device.max_smem_per_block == 48 * KiB
    assert device.max_smem_per_block < device.max_smem_per_block_optin < device.max_smem_per_sm
    assert device.max_smem_per_sm - device.max_smem_per_block_optin == 1 * KiB  # reserved/block
    assert device.max_threads_per_sm in (1536, 2048)
    assert device.regs_per_sm == device.regs_per_block == 65536
    assert 4 * 2**20 <= device.l2_bytes <= 128 * 2**20
    assert 1_000_000 <= device.clock_khz <= 3_000_000
    # Peak DRAM bandwidth from clock and bus lands in the range of real GPUs (300 GB/s .. 5 TB/s).
    assert 250 <= device.dram_bandwidth_gbps <= 5000


@pytest.mark.parametrize(
    "query, name",
    [
        ("H100", "NVIDIA H100 80GB HBM3"),
        ("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3"),
        ("H100 PCIe", "NVIDIA H100 PCIe"),
        ("h200", "NVIDIA H200"),
        ("A100", "NVIDIA A100-SXM4-80GB"),
        ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        ("RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
        ("l40s", "NVIDIA L40S"),
        ("sm_90", "NVIDIA H100 80GB HBM3"),
        ("sm_80", "NVIDIA A100-SXM4-80GB"),
        ("SM_89", "NVIDIA L40S"),
        ("sm_86", "NVIDIA A10"),
    ],
)
def test_lookup_by_name_alias_or_arch(query, name):
    assert known_device(query).name == name


def test_published_figures_of_two_gpus():
    # Spot checks against the data sheets: H100 SXM 3.35 TB/s, A100 40GB 1.555 TB/s.
    h100, a100 = known_device("H100"), known_device("A100 40GB")
    assert (h100.sm_count, h100.arch, h100.max_smem_per_block_optin) == (132, "sm_90", 227 * KiB)
    assert round(h100.dram_bandwidth_gbps) == 3352
    assert (a100.sm_count, a100.l2_bytes, round(a100.dram_bandwidth_gbps)) == (
        108,
        40 * 2**20,
        1555,
    )


def test_h200_figures_are_the_drivers():
    # What the driver reports on an H200 (SXM, driver 580): 60 MiB of L2, a 6016-bit bus at
    # 3201 MHz, i.e. NVIDIA's 4.8 TB/s; tests/gpu/test_launch.py checks every field on the GPU.
    h200 = known_device("H200")
    assert (h200.sm_count, h200.l2_bytes, h200.memory_bus_bits) == (132, 60 * 2**20, 6016)
    assert round(h200.dram_bandwidth_gbps / 100) == 48


def test_unknown_device_lists_what_is_known():
    with pytest.raises(ValueError, match=r"unknown GPU 'V100'; known: .*H100.*sm_90"):
        known_device("V100")
    with pytest.raises(ValueError, match=r"no representative GPU for sm_75; known arches"):
        known_device("sm_75")
    with pytest.raises(TypeError, match="expected a device name or arch"):
        known_device(90)  # type: ignore[arg-type]
