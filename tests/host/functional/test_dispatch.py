"""Where an op runs (spio.functional._dispatch): GPUs older than sm_80 and CPU tensors take the
documented PyTorch fallback, or raise FallbackDisabledError under SPIO_DISABLE_FALLBACK=1.

No GPU here: the tensors are stand-ins with a CUDA device and the compute capability query is
replaced, so these tests check the rule, not the driver's answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from spio.errors import FallbackDisabledError
from spio.functional import _dispatch
from spio.settings import override


def _on(index: int | None):
    return SimpleNamespace(device=torch.device("cuda", index) if index is not None else
                           torch.device("cuda"))  # fmt: skip


@pytest.fixture
def capabilities(monkeypatch):
    """GPU 0 is a Turing card (7.5), GPU 1 an A100 (8.0), GPU 2 an H100 (9.0)."""
    table = {0: (7, 5), 1: (8, 0), 2: (9, 0)}
    monkeypatch.setattr(_dispatch, "_capability", lambda index: table[index])
    return table


@pytest.mark.parametrize("index, runs_spio", [(0, False), (1, True), (2, True), (None, False)])
def test_compute_capability_rule(capabilities, index, runs_spio):
    # A bare "cuda" device means GPU 0, the Turing card here.
    reason = _dispatch.fallback_reason(_on(index))
    assert (reason is None) == runs_spio, reason
    if not runs_spio:
        assert reason == "the GPU has compute capability 7.5, below 8.0"


def test_any_unsupported_tensor_decides(capabilities):
    # The bias on the old GPU, or on the CPU, sends the whole call to PyTorch; None is skipped.
    assert _dispatch.fallback_reason(_on(2), None, _on(1)) is None
    assert "7.5" in _dispatch.fallback_reason(_on(2), _on(0))
    assert "on cpu" in _dispatch.fallback_reason(_on(2), torch.zeros(1))


def test_old_gpu_falls_back_or_raises(capabilities):
    with override(disable_fallback=False):
        assert _dispatch.use_fallback("conv2d_gw8", _on(0)) is True
        assert _dispatch.use_fallback("conv2d_gw8", _on(2)) is False
    with override(disable_fallback=True):
        assert _dispatch.use_fallback("conv2d_gw8", _on(2)) is False
        with pytest.raises(FallbackDisabledError) as e:
            _dispatch.use_fallback("conv2d_gw8", _on(0))
    text = str(e.value)
    assert "conv2d_gw8" in text and "compute capability 7.5" in text
    assert "SPIO_DISABLE_FALLBACK" in text and "8.0 or newer" in text
