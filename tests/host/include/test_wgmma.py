"""Host tests of spio/wgmma.h (Hopper warpgroup MMA): no GPU needed.

tests/gpu/data/wgmma_probe.cu (one warpgroup, D = A B through chains of wgmma m64nNk16 for N =
16, 32, 64, 128, 256) compiles for sm_90a to wgmma PTX and HGMMA SASS with no local memory; the
header defines nothing (SPIO_WGMMA 0) for sm_80 and plain sm_90, and rejects a bad N or type at
compile time.
The values are checked on an H100/H200 by tests/gpu/test_wgmma.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from spio.compiler import compile as spio_compile
from spio.compiler import kernel_resources
from spio.compiler.locate import find_tool
from spio.errors import CompileError

PROBE = (Path(__file__).parents[2] / "gpu" / "data" / "wgmma_probe.cu").read_text()
TYPES = ("__half", "__nv_bfloat16")
KERNELS = (
    "wgmma_probe_64", "wgmma_probe_128", "wgmma_probe_256", "wgmma_probe_sw128_16",
    "wgmma_probe_sw128_32", "wgmma_probe_sw128_64",
    "wgmma_probe_sw128_128", "bulk_wgmma_probe_128", "tma_wgmma_probe_128",
)  # fmt: skip


def _probe(type_name: str, ptx: bool = False) -> bytes:
    return spio_compile(
        PROBE, arch="sm_90a", options=(f"-DSPIO_T={type_name}",), name="wgmma_probe.cu", ptx=ptx
    )


@pytest.mark.parametrize("type_name", TYPES)
def test_probe_ptx_and_no_local_memory(type_name):
    ptx = _probe(type_name, ptx=True).decode()
    kind = "f16" if type_name == "__half" else "bf16"
    for n in (16, 32, 64, 128, 256):
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind}" in ptx
    for op in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
               "wgmma.wait_group.sync.aligned 0", "fence.proxy.async.shared::cta"):  # fmt: skip
        assert op in ptx, op
    resources = kernel_resources(_probe(type_name))
    for name in KERNELS:
        assert resources[name].local_bytes == 0, f"{name} uses local memory: {resources[name]}"


@pytest.mark.skipif(
    find_tool("cuobjdump") is None, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
def test_probe_sass_has_hgmma(tmp_path):
    cubin = tmp_path / "wgmma_probe.cubin"
    cubin.write_bytes(_probe("__half"))
    sass = subprocess.run(
        [str(find_tool("cuobjdump")), "-sass", str(cubin)], capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    # Per shape: two wgmma (K = 32, no swizzle; not N = 16 and 32), for N = 16, 32, 64 and 128
    # four (K = 64, 128-byte swizzle), for N = 128 two more (the bulk-copied operands) and four
    # more (TMA-loaded, K = 64); each chain opens with D = A B.
    for n, count in ((16, 4), (32, 4), (64, 6), (128, 12), (256, 2)):
        assert len(re.findall(rf"HGMMA\.64x{n}x16\.F32 ", sass)) == count, f"N = {n}:\n{sass}"
    assert "WARPGROUP" in sass, sass
    opcodes = set(re.findall(r"\b([A-Z][A-Z0-9]+)(?:\.[A-Za-z0-9_.]+)?\s", sass))
    assert not {"STL", "LDL"} & opcodes, f"local memory traffic in the SASS:\n{sass}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_header_defines_nothing_below_sm90a(arch):
    source = (
        '#include "spio/wgmma.h"\n'
        'static_assert(SPIO_WGMMA == 0, "wgmma.h must define nothing without sm_90a");\n'
        "__global__ void f() {}\n"
    )
    spio_compile(source, arch=arch, name="no_wgmma.cu")
    with pytest.raises(CompileError, match="needs sm_90a"):
        spio_compile(PROBE, arch=arch, options=("-DSPIO_T=__half",), name="wgmma_probe.cu")


@pytest.mark.parametrize(
    "snippet, message",
    [
        (
            "float d[24]; spio::warpgroup::mma_async<__half, 48>(d, 0, 0, false);",
            "N must be 16, 32, 64, 128 or 256",
        ),
        (
            "float d[32]; spio::warpgroup::mma_async<float, 64>(d, 0, 0, false);",
            "T must be __half or __nv_bfloat16",
        ),
        ("spio::warpgroup::wait_group<8>();", "N is a count of pending batches"),
    ],  # fmt: skip
)
def test_rejected_at_compile_time(snippet, message):
    source = f'#include "spio/wgmma.h"\n__global__ void f() {{ {snippet} }}\n'
    with pytest.raises(CompileError, match=message):
        spio_compile(source, arch="sm_90a", name="rejected.cu")
