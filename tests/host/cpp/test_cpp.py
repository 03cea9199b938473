"""Compiles and runs spio's C++ property tests (tests/host/cpp/test_*.cpp) as host programs.

Each program checks the typed-dimension algebra over small exhaustive domains with the EXPECT
harness in expect.h and exits non-zero on any failure (or when it checked nothing).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
INCLUDE = Path(__file__).parents[3] / "spio" / "include"
PROGRAMS = sorted(HERE.glob("test_*.cpp"))
CXX = shutil.which("g++") or shutil.which("clang++")

pytestmark = pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")


def test_programs_found():
    assert len(PROGRAMS) >= 5, f"expected the C++ property tests next to {__file__}"


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.stem)
def test_cpp_properties(program: Path, tmp_path: Path):
    exe = tmp_path / program.stem
    build = subprocess.run(
        [
            CXX,
            "-std=c++20",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{INCLUDE}",
            f"-I{HERE}",
            str(program),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"{program.name} does not compile:\n{build.stderr[-6000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{program.name} failed:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    assert " 0 failures" in run.stdout
