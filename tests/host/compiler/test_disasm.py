"""SASS through cuobjdump/nvdisasm (NVIDIA's wheels), and the cubin reader checked against it."""

from __future__ import annotations

import re
import subprocess

import pytest

from spio.compiler import compile, disassemble, instruction_counts, kernel_resources
from spio.compiler import locate as loc
from spio.errors import LibraryNotFoundError

SOURCE = (
    'extern "C" __global__ void smem(float* y) {\n'
    "    __shared__ float s[64]; s[threadIdx.x] = y[0]; __syncthreads();\n"
    "    y[threadIdx.x] = s[63 - threadIdx.x];\n"
    "}\n"
    'extern "C" __global__ void plain(float* y) { y[threadIdx.x] = 3.0f; }\n'
    'extern "C" __global__ void spills(float* y, int n) {\n'
    "    float a[64];\n"
    "    #pragma unroll 1\n"
    "    for (int i = 0; i < 64; i++) a[i] = y[i * n];\n"
    "    y[n] = a[n % 64];\n"
    "}\n"
)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_disassemble_and_count(arch):
    sass = disassemble(compile(SOURCE, arch, cache=None))
    assert re.search(r"Function : smem", sass) and re.search(r"Function : plain", sass)
    counts = instruction_counts(sass)
    assert counts["EXIT"] >= 3 and counts["STS"] >= 1 and counts["BAR"] >= 1
    assert counts.get("HMMA", 0) == 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_kernel_resources_match_cuobjdump(arch, tmp_path):
    cubin = compile(SOURCE, arch, cache=None)
    tool = loc.find_tool("cuobjdump")
    assert tool is not None, "cuobjdump missing: pip install nvidia-cuda-cuobjdump (spio[test])"
    image = tmp_path / "k.cubin"
    image.write_bytes(cubin)
    run = subprocess.run(
        [str(tool), "--dump-resource-usage", str(image)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    usage = dict(re.findall(r"Function (\w+):\s*\n\s*(REG:.*)", run.stdout))
    found = kernel_resources(cubin)
    assert set(usage) == set(found)
    for name, line in usage.items():
        fields = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
        res = found[name]
        assert int(fields["REG"]) == res.registers, (arch, name)
        assert int(fields["STACK"]) == res.local_bytes, (arch, name)
        # cuobjdump's SHARED is the whole .nv.shared section: reserved window included.
        assert int(fields["SHARED"]) == res.shared_bytes + res.reserved_shared_bytes, (arch, name)
    assert found["spills"].local_bytes > 0 and found["smem"].shared_bytes == 256


def test_tools_are_found_in_the_wheels(tmp_path, monkeypatch):
    tool = tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvdisasm"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(loc, "site_roots", lambda: (tmp_path / "site",))
    monkeypatch.setattr(loc, "_toolkit_homes", lambda: [])
    assert loc.find_tool("nvdisasm") == tool
    assert loc.find_tool("cuobjdump") is None


def test_no_tool_is_a_library_not_found_error(monkeypatch):
    import spio.compiler.disasm as disasm

    monkeypatch.setattr(disasm, "find_tool", lambda name: None)
    with pytest.raises(LibraryNotFoundError, match="nvidia-cuda-cuobjdump"):
        disassemble(b"\x7fELF")


def test_instruction_counts_strip_predicates_and_modifiers():
    sass = (
        "        /*0000*/                   HMMA.16816.F32 R4, R8, R12, R4 ;\n"
        "        /*0010*/              @!P0 BRA 0x80;\n"
        "        /*0020*/               @P1 LDG.E.128 R0, desc[UR4][R2.64] ;\n"
        "        /*0030*/                   HMMA.1688.F32 R4, R8, R12, R4 ;\n"
    )
    assert instruction_counts(sass) == {"HMMA": 2, "BRA": 1, "LDG": 1}
