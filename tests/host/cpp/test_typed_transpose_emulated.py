"""Runs tests/gpu/data/typed_transpose.cu on the host (threads + a barrier emulate a CTA).

The GPU test runs the same kernel on a GPU; this one checks its typed-dim indexing, bounds checks
and swizzled tile in CI, which has no GPU. Fresh random data per run (the `seed` fixture).
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = Path(__file__).parents[3]
KERNEL = ROOT / "tests" / "gpu" / "data" / "typed_transpose.cu"
CXX = shutil.which("g++") or shutil.which("clang++")

MAIN = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
    const unsigned seed = static_cast<unsigned>(std::atoi(argv[1]));
    const int rows = ROWS, cols = COLS, guard = 64;
    std::vector<float> x(rows * cols), y(rows * cols + guard, -12345.0f);
    std::srand(seed);
    for (auto& v : x) v = static_cast<float>(std::rand()) / RAND_MAX - 0.5f;
    const unsigned grid = ((rows + 31) / 32) * ((cols + 31) / 32);
    emulate_launch(grid, {32, 8, 1}, [&] { typed_transpose(y.data(), x.data()); });
    int bad = 0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            if (y[c * rows + r] != x[r * cols + c] && bad++ < 8)
                std::printf("y[%d, %d] = %g, expected %g\n", c, r, y[c * rows + r],
                            x[r * cols + c]);
    for (int g = 0; g < guard; ++g)
        if (y[rows * cols + g] != -12345.0f && bad++ < 8) std::printf("write past the end\n");
    return bad != 0;
}
"""


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize("rows, cols", [(64, 96), (33, 65), (1, 1), (7, 40)], ids=str)
def test_typed_transpose_on_host(rows, cols, seed, tmp_path):
    from spio.generators.blocks import expand

    source = KERNEL.read_text()
    header = tmp_path / "generated.h"
    header.write_text(expand(source, KERNEL.name, {"ROWS": rows, "COLS": cols}))
    program = tmp_path / "transpose.cpp"
    program.write_text(
        f'#include "cuda_emulation.h"\n#include "{header}"\n#line 1 "{KERNEL}"\n{source}\n'
        f"#define ROWS {rows}\n#define COLS {cols}\n{MAIN}"
    )
    exe = tmp_path / "transpose"
    build = subprocess.run(
        [
            CXX,
            "-std=c++20",
            "-O1",
            "-pthread",
            f"-I{ROOT / 'spio' / 'include'}",
            f"-I{HERE}",
            str(program),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-6000:]
    run_seed = random.Random(seed).randrange(2**31)
    run = subprocess.run([str(exe), str(run_seed)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"({rows}, {cols}) seed={seed}:\n{run.stdout}"
