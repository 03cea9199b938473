"""Every header of spio/include/spio compiles alone (STYLE B2), found by glob, not by a list.

Host-capable headers compile with the host compiler (g++ -std=c++20, no CUDA headers). Every
header compiles with NVRTC through spio.compiler for sm_80 and sm_90 (no GPU needed). Headers of
the device-only building blocks (those built on spio/device.h) are compiled only with NVRTC.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).parents[3] / "spio" / "include"
HEADERS = sorted(INCLUDE.glob("spio/*.h"))
CXX = shutil.which("g++") or shutil.which("clang++")


def _device_only(header: Path) -> bool:
    text = header.read_text()
    return header.name in ("device.h", "gpu.h") or '#include "spio/device.h"' in text


HOST_HEADERS = [h for h in HEADERS if not _device_only(h)]


def _name(h: Path) -> str:
    return h.name


def test_headers_found():
    names = {h.name for h in HEADERS}
    core = {"dim.h", "fold.h", "module.h", "coordinates.h", "tensor.h", "cursor.h", "spio.h"}
    assert core <= names, f"missing core headers: {sorted(core - names)}"


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize("header", HOST_HEADERS, ids=_name)
def test_header_compiles_alone_host(header: Path, tmp_path: Path):
    src = tmp_path / "one_header.cpp"
    src.write_text(
        f'#include "spio/{header.name}"\n#include "spio/{header.name}"\nint main() {{}}\n'
    )
    run = subprocess.run(
        [
            CXX,
            "-std=c++20",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            f"-I{INCLUDE}",
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, f"{header.name} does not compile alone on the host:\n{run.stderr}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("header", HEADERS, ids=_name)
def test_header_compiles_alone_nvrtc(header: Path, arch: str):
    from spio.compiler import compile

    source = (
        f'#include "spio/{header.name}"\n#include "spio/{header.name}"\n'
        'extern "C" __global__ void spio_header_probe() {}\n'
    )
    image = compile(source, arch, name=f"{header.stem}_alone.cu", cache=None)
    assert len(image) > 0
