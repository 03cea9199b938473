"""kernel_resources(): registers / smem / local memory from the cubin, checked against ptxas -v."""

from __future__ import annotations

import pytest

from spio.compiler import compile, kernel_resources, supported_archs
from spio.compiler.resources import cubin_arch, parse_ptxas_log
from spio.compiler.toolchain import toolchain

KERNELS = {
    "plain": 'extern "C" __global__ void plain(float* y) { y[threadIdx.x] = 1.0f; }',
    "static_smem": (
        'extern "C" __global__ void static_smem(float* y) {\n'
        "    __shared__ float s[33]; __shared__ double d[3];\n"
        "    s[threadIdx.x % 33] = y[0]; d[threadIdx.x % 3] = 1.0; __syncthreads();\n"
        "    y[threadIdx.x] = s[32 - threadIdx.x % 33] + d[2];\n"
        "}"
    ),
    "dynamic_smem": (
        'extern "C" __global__ void dynamic_smem(float* y) {\n'
        "    extern __shared__ float d[]; d[threadIdx.x] = y[threadIdx.x]; __syncthreads();\n"
        "    y[threadIdx.x] = d[63 - threadIdx.x];\n"
        "}"
    ),
    "local_array": (
        'extern "C" __global__ void local_array(float* y, int n) {\n'
        "    float a[64];  // indexed at run time (loop not unrolled): local memory\n"
        "    #pragma unroll 1\n"
        "    for (int i = 0; i < 64; i++) a[i] = y[i * n];\n"
        "    y[n] = a[n % 64];\n"
        "}"
    ),
}


def _compile_with_report(source: str, arch: str, *options: str) -> tuple[bytes, str]:
    """The cubin and ptxas's own verbose report of the same compile (the oracle)."""
    _, lib = toolchain()
    result = lib.compile_program(
        source, "k.cu", [f"--gpu-architecture={arch}", "--ptxas-options=-v", *options]
    )
    assert result.ok, result.log
    return result.image, result.log


@pytest.mark.parametrize("arch", [a for a in supported_archs() if int(a[3:]) >= 80] + ["sm_90a"])
def test_cubin_numbers_match_ptxas_report(arch):
    source = "\n".join(KERNELS.values())
    cubin, log = _compile_with_report(source, arch)
    report = parse_ptxas_log(log)
    found = kernel_resources(cubin)
    assert set(found) == set(report) == set(KERNELS)
    for name, res in found.items():
        ref = report[name]
        assert (res.registers, res.shared_bytes, res.local_bytes) == (
            ref.registers,
            ref.shared_bytes,
            ref.stack_bytes,
        ), f"{arch} {name}"
    assert found["static_smem"].shared_bytes >= 33 * 4 + 3 * 8
    assert found["plain"].shared_bytes == found["dynamic_smem"].shared_bytes == 0
    assert found["local_array"].local_bytes >= 64 * 4
    assert found["plain"].local_bytes == 0
    assert cubin_arch(cubin) == int(arch[3:].rstrip("a"))


def test_spills_under_a_register_cap():
    source = (
        'extern "C" __global__ void heavy(float* y, int n) {\n'
        "    float a[48];\n"
        "    #pragma unroll\n"
        "    for (int i = 0; i < 48; i++) a[i] = y[i * n + threadIdx.x];\n"
        "    float s = 0;\n"
        "    #pragma unroll\n"
        "    for (int i = 0; i < 48; i++) s += a[i] * a[47 - i];\n"
        "    y[threadIdx.x] = s;\n"
        "}"
    )
    roomy = kernel_resources(compile(source, "sm_80", cache=None))["heavy"]
    cubin, log = _compile_with_report(source, "sm_80", "--maxrregcount=24")
    capped, report = kernel_resources(cubin)["heavy"], parse_ptxas_log(log)["heavy"]
    assert roomy.local_bytes == 0 and roomy.registers > 24
    assert capped.registers <= 24 and report.spill_store_bytes > 0
    assert capped.local_bytes == report.stack_bytes > 0  # the spills live in the stack frame
    assert "uses local memory" in str(capped) and "uses local memory" not in str(roomy)


def test_device_functions_are_not_kernels():
    source = (
        "__device__ __noinline__ float helper(float x) { return x * 3.0f; }\n"
        'extern "C" __global__ void entry(float* y) { y[0] = helper(y[1]); }\n'
    )
    assert set(kernel_resources(compile(source, "sm_80", cache=None))) == {"entry"}


def test_ptx_and_garbage_are_rejected_with_a_reason():
    ptx = compile(KERNELS["plain"], "sm_80", ptx=True, cache=None)
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF cubin"):
        kernel_resources(ptx)
    with pytest.raises(ValueError, match="ptx=False"):
        kernel_resources(b"")
