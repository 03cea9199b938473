"""GPU test of spio/mbarrier.h: two phases of a cp.async.bulk copy through one mbarrier
(tests/gpu/data/bulk_probe.cu) must deliver every byte exactly; the output is NaN-poisoned so a
missed element fails. Needs an sm_90 GPU.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module  # noqa: E402

pytestmark = pytest.mark.gpu

SOURCE = (Path(__file__).parent / "data" / "bulk_probe.cu").read_text()
FLOATS = 2 * 512


@functools.cache
def _function():
    return Module.load(spio_compile(SOURCE, "sm_90", name="bulk_probe.cu")).function(
        "bulk_probe", signature="pp"
    )


def test_bulk_copy_two_phases(seed):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU (mbarrier transaction counts, cp.async.bulk)")
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(FLOATS, generator=g, device="cuda")
    out = torch.full((FLOATS,), float("nan"), device="cuda")
    _function().launch(1, 128, (out, x), stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    wrong = out != x
    assert not wrong.any(), (
        f"seed={seed}: {int(wrong.sum())} of {FLOATS} floats wrong or missing, first at "
        f"{wrong.nonzero()[:8].flatten().tolist()}"
    )
