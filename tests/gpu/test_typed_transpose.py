"""GPU test of a typed-dims kernel: a tiled transpose through a swizzled shared-memory tile.

tests/gpu/data/typed_transpose.cu is compiled by spio.compiler for this GPU's arch with the
matrix shape passed as scope (so sizes are types), loaded and launched with spio.cuda on torch's
current stream, and compared exactly with torch's transpose on fresh random data. The output is
NaN-poisoned with a guard band after it, so unwritten elements and out-of-bounds writes fail.
Shapes cover whole tiles, ragged tails in either dim, a single element and a single row/column.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module, device_attributes  # noqa: E402

pytestmark = pytest.mark.gpu

SOURCE = (Path(__file__).parent / "data" / "typed_transpose.cu").read_text()
TILE = 32
WARPS = 8
GUARD = 256

SHAPES = [(1024, 512), (512, 1024), (33, 65), (100, 7), (7, 100), (1, 1), (1, 97), (97, 1)]


@functools.cache
def _function(rows: int, cols: int):
    arch = device_attributes().arch
    cubin = spio_compile(
        SOURCE, arch, name="typed_transpose.cu", scope={"ROWS": rows, "COLS": cols}
    )
    return Module.load(cubin).function("typed_transpose", signature="pp")


@pytest.mark.parametrize("rows, cols", SHAPES, ids=lambda v: str(v))
def test_typed_transpose(rows, cols, seed):
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, device="cuda", dtype=torch.float32)
    out = torch.full((rows * cols + GUARD,), float("nan"), device="cuda", dtype=torch.float32)
    grid = -(-rows // TILE) * -(-cols // TILE)
    _function(rows, cols).launch(
        grid, (TILE, WARPS), (out, x), stream=torch.cuda.current_stream().cuda_stream
    )
    torch.cuda.synchronize()
    y = out[: rows * cols].view(cols, rows)
    expected = x.t().contiguous()
    unwritten = torch.isnan(y)
    assert not unwritten.any(), (
        f"({rows}, {cols}) seed={seed}: {int(unwritten.sum())} outputs never written, first at "
        f"{unwritten.nonzero()[:8].tolist()}"
    )
    assert torch.isnan(out[rows * cols :]).all(), f"({rows}, {cols}): write past the end"
    mismatch = y != expected
    assert not mismatch.any(), (
        f"({rows}, {cols}) seed={seed}: {int(mismatch.sum())} wrong elements (an exact copy is "
        f"expected), first (c, r) at {mismatch.nonzero()[:8].tolist()}"
    )
