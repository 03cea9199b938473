"""GPU test of spio/tma.h and spio.cuda.tensor_map: one box of a tensor copied into shared memory
by the tensor memory accelerator (tests/gpu/data/tma_probe.cu writes the shared-memory image out
as it lies) must match the box cut from the tensor on the host, zero-filled where it reaches past
the tensor's edge, with the 128-byte swizzle's chunk permutation when asked for. The output is
NaN-poisoned. Needs an sm_90 GPU.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module  # noqa: E402
from spio.cuda.tensor_map import tiled  # noqa: E402

pytestmark = pytest.mark.gpu

SOURCE = (Path(__file__).parent / "data" / "tma_probe.cu").read_text()


@functools.cache
def _function():
    return Module.load(spio_compile(SOURCE, "sm_90", name="tma_probe.cu")).function(
        "tma_probe_2d", signature="ptiii"
    )


def _expected(x: torch.Tensor, r0: int, c0: int, box: tuple[int, int], swizzle: int):
    """The box at rows r0.., columns c0.. of x (zero past its edges), as shared memory holds it:
    row-major, and with the 128-byte swizzle 16-byte chunk c of row r at chunk c ^ (r % 8)."""
    rows, cols = box
    want = torch.zeros(rows, cols, dtype=x.dtype, device=x.device)
    part = x[r0 : r0 + rows, c0 : c0 + cols]
    want[: part.shape[0], : part.shape[1]] = part
    if swizzle == 128:
        assert cols * x.element_size() == 128, "the model covers 128-byte box rows only"
        per_chunk = 16 // x.element_size()
        chunks = want.view(rows, cols // per_chunk, per_chunk)
        swizzled = torch.empty_like(chunks)
        for r in range(rows):
            for c in range(chunks.shape[1]):
                swizzled[r, c ^ (r % 8)] = chunks[r, c]
        want = swizzled.view(rows, cols)
    return want


@pytest.mark.parametrize(
    "dtype, shape, box, swizzle, r0, c0",
    [
        (torch.float16, (200, 64), (64, 64), 0, 0, 0),
        (torch.float16, (200, 64), (64, 64), 128, 64, 0),
        (torch.float16, (200, 64), (64, 64), 128, 160, 0),  # 40 rows inside, 24 zero-filled
        (torch.bfloat16, (96, 200), (32, 64), 128, 8, 136),  # 64 columns inside, none past
        (torch.bfloat16, (96, 200), (32, 64), 128, 8, 160),  # 40 columns inside, 24 past
        (torch.float32, (50, 40), (16, 32), 128, 40, 8),  # 10 rows and 32 columns inside
        (torch.float16, (130, 72), (128, 8), 0, 0, 64),  # narrow box: 16-byte rows
    ],  # fmt: skip
)
def test_tma_box(dtype, shape, box, swizzle, r0, c0, seed):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (the probe is built for sm_90)")
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(*shape, generator=g, device="cuda").to(dtype)
    name = str(dtype).removeprefix("torch.")
    m = tiled(x.data_ptr(), name, x.shape, x.stride(), box, swizzle=swizzle)
    out = torch.full((m.box_bytes // 4,), float("nan"), device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    _function().launch(1, 128, (out, m, c0, r0, m.box_bytes), stream=stream)
    torch.cuda.synchronize()
    got = out.view(dtype).view(box)
    want = _expected(x, r0, c0, box, swizzle)
    wrong = got.view(torch.int16 if x.element_size() == 2 else torch.int32) != want.view(
        torch.int16 if x.element_size() == 2 else torch.int32
    )
    assert not wrong.any(), (
        f"seed={seed} {name} {shape} box {box} swizzle {swizzle} at ({r0}, {c0}): "
        f"{int(wrong.sum())} of {wrong.numel()} elements differ, first at "
        f"{wrong.nonzero()[:8].tolist()}"
    )
