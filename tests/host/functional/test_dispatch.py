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


# ---- the eager path: when a call may launch its plan directly ------------------------------


def test_untraced_sees_every_tracer():
    """An op call skips the dispatcher only when nothing records or intercepts it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    assert _dispatch.untraced()

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Seen():
        assert not _dispatch.untraced()
    from torch.overrides import TorchFunctionMode

    class Logged(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Logged():
        assert not _dispatch.untraced()  # a user's function mode sees torch.ops.spio.*
    with torch.device("cpu"):
        assert _dispatch.untraced()  # torch.device's mode only sets factories' default device
        with Logged():
            assert not _dispatch.untraced()
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        assert not _dispatch.untraced()
    seen_in_vmap = []

    def f(x):
        seen_in_vmap.append(_dispatch.untraced())
        return x

    torch.vmap(f)(torch.ones(2, 3))
    assert seen_in_vmap == [False]
    traced = []

    def g(x):
        traced.append(_dispatch.untraced())
        return x * 2

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace is deprecated
        torch.jit.trace(g, torch.ones(2))
    assert traced[0] is False  # (jit.trace then runs g untraced to check the trace)
    assert _dispatch.untraced()


def test_autocast_dtype_is_cuda_autocasts():
    assert _dispatch.autocast_dtype() is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _dispatch.autocast_dtype() is None  # CPU autocast does not change CUDA ops


def test_plain_types_are_tensors_and_parameters_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert type(torch.ones(1)) in _dispatch.PLAIN_TYPES
    assert type(torch.nn.Parameter(torch.ones(1))) in _dispatch.PLAIN_TYPES
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(1))
    assert type(fake) not in _dispatch.PLAIN_TYPES


def test_plan_caches_clear_together():
    from spio.functional import _plans, clear_plans

    cache = _plans.PlanCache("test")
    cache["k"] = object()
    assert cache in _plans.caches() and "test" in repr(cache)
    clear_plans()
    assert len(cache) == 0
