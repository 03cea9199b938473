"""spio.kernels.factory: (family, params, device) -> selected, compiled, loaded kernel in one call.

No GPU here: loading is replaced by compiling (the cubin stands in for the module), and the
device is an H100's attributes (`known_device`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spio.compiler.compile import prepare
from spio.cuda import known_device
from spio.kernels import KERNELS, factory, loader
from spio.kernels.conv2d_gw8_params import Conv2dGw8Params
from spio.kernels.layernorm_2d_params import LayerNorm2dParams
from spio.kernels.loader import FunctionCache, compile_spec
from spio.kernels.matmul_params import MatmulParams
from spio.kernels.select import Selector
from spio.settings import override

H100 = known_device("H100")


def _compile_key(spec, arch="sm_90"):
    return prepare(
        spec.source_text(), arch, options=spec.options, name=spec.source, scope=spec.specs
    ).key


def _other_launch_arguments(p):
    """The same layer with other run-time launch arguments (batch, rows, matrix sizes)."""
    if isinstance(p, Conv2dGw8Params):
        return replace(p, n=p.n * 3 + 5)
    if isinstance(p, LayerNorm2dParams):
        return replace(p, m=p.m * 3 + 7)
    assert isinstance(p, MatmulParams), type(p)
    return replace(p, m=p.m + 17, n=p.n + 8, k=p.k + 64)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compiled_params_drop_only_what_the_compiled_code_does_not_depend_on(name):
    # One loaded kernel serves every params with the same compiled_params, so their sources and
    # options must compile identically: the same disk-cache key.
    kdef = KERNELS[name]
    assert kdef.compiled_params is not None, f"{name}: no compiled_params"
    p = kdef.examples()[0]
    q = _other_launch_arguments(p)
    assert kdef.compiled_params(p) == kdef.compiled_params(q) != p
    cfg = kdef.heuristic(p, H100)
    keys = {_compile_key(kdef.spec(x, cfg, H100)) for x in (p, q, kdef.compiled_params(p))}
    assert len(keys) == 1, f"{name}: the batch/shape arguments change the compiled code"


@pytest.fixture
def compiling_cache(monkeypatch):
    """A real FunctionCache whose 'load' only compiles (no driver here)."""
    loads = []

    def load(spec, arch):
        loads.append(spec)
        return loader.LoadedKernel(spec=spec, function=compile_spec(spec, arch), module=None)

    monkeypatch.setattr(loader, "load_spec", load)
    return FunctionCache(), loads


def test_selects_compiles_and_loads_once_per_layer(tmp_path, compiling_cache):
    cache, loads = compiling_cache
    p = Conv2dGw8Params(n=8, c=64, h=28, w=28, r=3, s=3, dtype="float16", has_bias=True)
    with override(cache_dir=tmp_path):
        selector = Selector(store_dir=tmp_path / "sel")
        k = factory.kernel("conv2d_gw8_fprop", p, H100, selector=selector, cache=cache)
        assert k.config == selector.select(KERNELS["conv2d_gw8_fprop"], p, H100)
        assert k.config in KERNELS["conv2d_gw8_fprop"].configs(p, H100)
        assert k.loaded.function[:4] == b"\x7fELF"  # the compiled cubin stood in for the module
        # Another batch size of the same layer, given that config, reuses the loaded kernel.
        k32 = factory.kernel(
            "conv2d_gw8_fprop", replace(p, n=32), H100, config=k.config, cache=cache
        )
        assert k32.loaded is k.loaded and len(loads) == 1 and len(cache) == 1
        assert k32.params.n == 32 and k32.device is H100


def test_default_selector_and_cache_are_the_ops(monkeypatch):
    seen = {}

    class Recorder:
        def select(self, kdef, params, dev):
            seen["select"] = (kdef.name, params, dev)
            return kdef.heuristic(params, dev)

        def get(self, kdef, params, config, dev):
            seen["get"] = (kdef.name, params, config, dev)
            return "loaded"

    import spio.kernels.select as select

    monkeypatch.setattr(select, "default_selector", lambda: Recorder())
    monkeypatch.setattr(loader, "default_function_cache", lambda: Recorder())
    p = MatmulParams(1000, 4096, 4096)
    k = factory.kernel("matmul", p, H100)
    assert seen["select"] == ("matmul", p, H100)
    assert seen["get"] == ("matmul", p.variant(), k.config, H100) and k.loaded == "loaded"


def test_bad_arguments_are_clear_errors():
    p = MatmulParams(64, 64, 64)
    with pytest.raises(ValueError, match="unknown family 'matmull'.*registered: .*matmul"):
        factory.kernel("matmull", p, H100)
    with pytest.raises(TypeError, match="params must be a LayerNorm2dParams, got MatmulParams"):
        factory.kernel("layernorm_2d_fwd", p, H100)
    with pytest.raises(TypeError, match="device must be a GPU ordinal"):
        factory.kernel("matmul", p, "cuda:0")
    with pytest.raises(TypeError, match="device must be a GPU ordinal"):
        factory.kernel("matmul", p, True)
    cfg = KERNELS["matmul"].configs(p, H100)[0]
    wrong = replace(cfg, warps_m=1, warps_n=1)  # one warp: outside the enumerated 2..8
    assert wrong not in KERNELS["matmul"].configs(p, H100)
    with pytest.raises(ValueError, match="not a valid config .* leave config out"):
        factory.select("matmul", p, H100, config=wrong)
    assert factory.select("matmul", p, H100, config=cfg)[1] == cfg
