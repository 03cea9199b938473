"""Every kernel family compiles for the Blackwell targets (SPEC §4, §10: sm_100 and sm_120 compile;
only sm_80..sm_90 run on GPUs spio was measured on).

No Blackwell product is in spio's table of known GPUs (`spio.cuda._known_devices` holds only
published per-product figures), so the devices here are an H100's attributes with each arch's
own limits from the CUDA occupancy calculator (`cuda_occupancy.h`, CUDA 13): sm_100 keeps
Hopper's 2048 threads and 228 KiB of shared memory per SM (227 KiB per block); sm_120 has 1536
threads and 100 KiB per SM (99 KiB per block). The configs are enumerated for those limits, so
sm_120's smaller shared memory is exercised too.
"""

from __future__ import annotations

import dataclasses

import pytest

from spio.compiler import kernel_resources, supported_archs
from spio.compiler.resources import cubin_arch
from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.kernels.loader import compile_spec
from spio.testing import sample

KiB = 1024


def _blackwell(arch: str):
    cc, threads, per_block, per_sm = {
        "sm_100": ((10, 0), 2048, 227 * KiB, 228 * KiB),
        "sm_120": ((12, 0), 1536, 99 * KiB, 100 * KiB),
    }[arch]
    return dataclasses.replace(
        known_device("H100"),
        name=f"(test) an {arch} GPU",
        arch=arch,
        compute_capability=cc,
        max_threads_per_sm=threads,
        max_smem_per_block_optin=per_block,
        max_smem_per_sm=per_sm,
    )


def _variants():
    """(family, params, config, device): each family's examples, its heuristic config and a
    sample of the others for each Blackwell arch."""
    out = []
    for arch in ("sm_100", "sm_120"):
        dev = _blackwell(arch)
        for name, kdef in KERNELS.items():
            assert kdef.examples is not None, f"{name}: no examples to compile"
            for params in kdef.examples()[:2]:
                configs = kdef.configs(params, dev)
                assert configs, f"{name} {params}: no config fits {arch}"
                for cfg in dict.fromkeys([kdef.heuristic(params, dev), *sample(configs, 2)]):
                    out.append(pytest.param(kdef, params, cfg, dev, id=f"{arch}-{name}-{cfg}"))
    return out


@pytest.mark.parametrize("kdef, params, cfg, dev", _variants())
def test_compiles_for_blackwell(kdef, params, cfg, dev):
    if dev.arch not in supported_archs():
        pytest.skip(f"this NVRTC does not know {dev.arch}")
    spec = kdef.spec(params, cfg, dev)
    image = compile_spec(spec, dev.arch)
    assert cubin_arch(image) == int(dev.arch[3:])
    res = kernel_resources(image)[spec.entry]
    threads = spec.block[0] * spec.block[1] * spec.block[2]
    assert res.registers * threads <= dev.regs_per_block, f"{kdef.name} {cfg}: {res}"
    assert spec.smem <= dev.max_smem_per_block_optin, f"{kdef.name} {cfg}: {spec.smem}"


def test_sm120_configs_respect_its_shared_memory():
    """sm_120's 99 KiB per block removes the configs that need more, where a family has any."""
    big, small = known_device("H100"), _blackwell("sm_120")
    fewer = []
    for name, kdef in KERNELS.items():
        for params in kdef.examples()[:2]:
            h100, sm120 = kdef.configs(params, big), kdef.configs(params, small)
            assert set(sm120) <= set(h100), name
            if len(sm120) < len(h100):
                fewer.append(name)
    assert "matmul" in fewer, fewer  # its 3-4 stage 256-row tiles need over 99 KiB
