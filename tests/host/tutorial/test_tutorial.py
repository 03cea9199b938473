"""The tutorial is a test suite: every docs/tutorial/NN_topic.cpp lesson compiles and runs.

Each lesson declares its dims and tensors in `/*@spio ... @spio*/` blocks. On the host the blocks
are expanded by spio.generators into a header that g++ force-includes (-include), the lesson is
built with -std=c++20 and run, and must exit 0. Each lesson also compiles with NVRTC for sm_90
through spio.compiler (which expands the blocks itself); host-only main() sits behind
`#if !defined(__CUDACC_RTC__)`, so on the device side the static_asserts and kernels are checked.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
INCLUDE = ROOT / "spio" / "include"
LESSONS = sorted((ROOT / "docs" / "tutorial").glob("[0-9][0-9]_*.cpp"))
CXX = shutil.which("g++") or shutil.which("clang++")


def _id(p: Path) -> str:
    return p.stem


def test_lessons_found():
    stems = [p.stem for p in LESSONS]
    assert stems[:5] == [
        "01_dims",
        "02_tensors_and_cursors",
        "03_folding",
        "04_projection",
        "05_compound_index",
    ], stems


@pytest.mark.parametrize("lesson", LESSONS, ids=_id)
def test_lesson_declares_its_specs(lesson: Path):
    assert re.search(r"/\*@spio.*?@spio\*/", lesson.read_text(), re.S), (
        f"{lesson.name}: a lesson declares its dims and tensors in a /*@spio ... @spio*/ block"
    )


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize("lesson", LESSONS, ids=_id)
def test_lesson_runs_on_host(lesson: Path, tmp_path: Path):
    from spio.generators.blocks import expand

    source = lesson.read_text()
    header = expand(source, lesson.name, None)
    assert header is not None, f"{lesson.name} has no @spio block"
    generated = tmp_path / f"{lesson.stem}_generated.h"
    generated.write_text(header)
    exe = tmp_path / lesson.stem
    build = subprocess.run(
        [
            CXX,
            "-std=c++20",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{INCLUDE}",
            "-include",
            str(generated),
            str(lesson),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"{lesson.name} does not build:\n{build.stderr[-6000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{lesson.name} failed (exit {run.returncode}):\n{run.stdout}"


@pytest.mark.parametrize("lesson", LESSONS, ids=_id)
def test_lesson_compiles_with_nvrtc(lesson: Path):
    from spio.compiler import compile

    image = compile(lesson.read_text(), "sm_90", name=lesson.name, cache=None)
    assert len(image) > 0
