"""spio.select.factory: (family, params, device) -> selected, compiled, loaded kernel in one call.

No GPU here: loading is replaced by compiling (the cubin stands in for the module), and the
device is an H100's attributes (`known_device`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spio.compiler.compile import prepare
from spio.cuda import known_device
from spio.kernels import KERNELS, loader
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.kernels.layernorm_2d_params import LayerNorm2dParams
from spio.kernels.loader import FunctionCache, compile_spec
from spio.kernels.matmul_params import MatmulParams
from spio.select import Selector, factory
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
    """A real FunctionCache whose 'load' only compiles (no driver here: the H100 is 'here')."""
    loads = []
    monkeypatch.setattr(factory, "_require_present", lambda dev: None)

    def load(spec, arch):
        loads.append(spec)
        return loader.LoadedKernel(spec=spec, function=compile_spec(spec, arch), module=None)

    monkeypatch.setattr(loader, "load_spec", load)
    return FunctionCache(), loads


def test_selects_compiles_and_loads_once_per_layer(tmp_path, compiling_cache):
    cache, loads = compiling_cache
    p = Conv2dGw8Params(n=8, c=64, h=28, w=28, r=3, s=3, dtype="float16", has_bias=True)
    with override(cache_dir=tmp_path):
        k = factory.kernel("conv2d_gw8_fprop", p, H100, selector=Selector(tmp_path), cache=cache)
        assert k.config in KERNELS["conv2d_gw8_fprop"].configs(p, H100)
        assert k.loaded.function[:4] == b"\x7fELF"  # the compiled cubin stood in for the module
        # Another batch size of the same layer, given that config, reuses the loaded kernel.
        k32 = factory.kernel(
            "conv2d_gw8_fprop", replace(p, n=32), H100, config=k.config, cache=cache
        )
        assert k32.loaded is k.loaded and len(loads) == 1 and len(cache) == 1
        assert k32.params.n == 32 and k32.device is H100


def _fresh(tmp_path, monkeypatch):
    """One selector for the ops and the factory, as in a process (its store in tmp_path)."""
    import spio.select.selector as select

    sel = Selector(store_dir=tmp_path / "sel")
    monkeypatch.setattr(select, "default_selector", lambda: sel)
    return sel


def test_the_config_is_the_one_the_op_runs(tmp_path, monkeypatch):
    """Each op's selection rule (the ops' plans select with `op_config`): conv fprop/dgrad and
    wgrad for the layer at its batch's bucket (a power of two, at most 256), matmul for the
    bucketed token count, the layernorm forward and backward at their rows' bucket."""
    from spio.kernels.conv2d_gw8.params import SELECT_BATCH
    from spio.select import op_config

    with override(cache_dir=tmp_path):
        sel = _fresh(tmp_path, monkeypatch)
        conv = Conv2dGw8Params(n=1, c=256, h=14, w=14, r=3, s=3, dtype="float16")
        for name in ("conv2d_gw8_fprop", "conv2d_gw8_dgrad"):
            op_config(KERNELS[name], conv, H100)  # the op saw N = 1 first: it fixes nothing
            later = factory.select(name, replace(conv, n=200), H100)[1]
            assert later == op_config(KERNELS[name], replace(conv, n=256), H100)
            assert sel.sources[(name, replace(conv, n=256), H100.name)] == "model"
        wgrad = factory.select("conv2d_gw8_wgrad", replace(conv, n=256), H100)[1]
        assert wgrad == op_config(KERNELS["conv2d_gw8_wgrad"], replace(conv, n=129), H100)
        assert (KERNELS["conv2d_gw8_wgrad"].name, replace(conv, n=SELECT_BATCH), H100.name) in (
            sel.sources
        )
        small = factory.select("conv2d_gw8_wgrad", replace(conv, n=3), H100)[1]
        assert small == op_config(KERNELS["conv2d_gw8_wgrad"], replace(conv, n=4), H100)
        assert (KERNELS["conv2d_gw8_wgrad"].name, replace(conv, n=4), H100.name) in sel.sources

        ln = LayerNorm2dParams(c=384, dtype="float16", m=8 * 56 * 56)  # bucket 2**15
        bwd = factory.select("layernorm_2d_bwd", ln, H100)[1]
        assert bwd == op_config(KERNELS["layernorm_2d_bwd"], replace(ln, m=20000), H100)
        assert ("layernorm_2d_bwd", replace(ln, m=2**15), H100.name) in sel.sources
        fwd = factory.select("layernorm_2d_fwd", ln, H100)[1]
        assert factory.select("layernorm_2d_fwd", replace(ln, m=17000), H100)[1] == fwd
        assert ("layernorm_2d_fwd", replace(ln, m=2**15), H100.name) in sel.sources

        mm = MatmulParams(300, 11008, 4096)
        picked = factory.select("matmul", mm, H100)[1]
        assert (KERNELS["matmul"].name, mm.bucketed(), H100.name) in sel.sources
        assert (KERNELS["matmul"].name, mm, H100.name) not in sel.sources
        assert picked == factory.select("matmul", replace(mm, m=512), H100)[1]


def test_default_selector_and_cache_are_the_ops(monkeypatch):
    seen = {}

    class Recorder:
        def select(self, kdef, params, dev):
            seen["select"] = (kdef.name, params, dev)
            return kdef.heuristic(params, dev)

        def get(self, kdef, params, config, dev):
            seen["get"] = (kdef.name, params, config, dev)
            return "loaded"

    import spio.select.selector as select

    monkeypatch.setattr(select, "default_selector", lambda: Recorder())
    monkeypatch.setattr(loader, "default_function_cache", lambda: Recorder())
    monkeypatch.setattr(factory, "_require_present", lambda dev: None)
    p = MatmulParams(1000, 4096, 4096)
    k = factory.kernel("matmul", p, H100)
    assert seen["select"] == ("matmul", p.bucketed(), H100)
    assert seen["get"] == ("matmul", p.variant(), k.config, H100) and k.loaded == "loaded"


def test_derived_configs_need_an_explicit_config(tmp_path):
    p = KERNELS["conv2d_gw8_wgrad_reduce"].examples()[0]
    with pytest.raises(ValueError, match="derived from the conv2d_gw8_wgrad pass"):
        factory.select("conv2d_gw8_wgrad_reduce", p, H100)
    cfg = KERNELS["conv2d_gw8_wgrad_reduce"].configs(p, H100)[0]
    assert factory.select("conv2d_gw8_wgrad_reduce", p, H100, config=cfg)[1] == cfg
    ln = KERNELS["layernorm_2d_bwd_reduce"].examples()[0]
    with pytest.raises(ValueError, match="derived from the layernorm_2d_bwd pass"):
        factory.select("layernorm_2d_bwd_reduce", ln, H100)


def test_a_gpu_that_is_not_here_is_refused_for_loading(monkeypatch):
    import spio.cuda

    monkeypatch.setattr(spio.cuda, "device_attributes", lambda i: known_device("A100"))
    with pytest.raises(ValueError, match="is not GPU 0 here .*A100.*factory.select"):
        factory.kernel("matmul", MatmulParams(64, 64, 64), H100)


def test_bad_arguments_are_clear_errors():
    p = MatmulParams(64, 64, 64)
    with pytest.raises(ValueError, match="unknown family 'matmull'.*registered: .*matmul"):
        factory.select("matmull", p, H100)
    with pytest.raises(TypeError, match="family must be a registered name"):
        factory.select(3, p, H100)
    with pytest.raises(TypeError, match="params must be a LayerNorm2dParams, got MatmulParams"):
        factory.select("layernorm_2d_fwd", p, H100)
    for bad in ("cuda:0", True):
        with pytest.raises(TypeError, match=r"device must be a GPU ordinal .*known_device"):
            factory.select("matmul", p, bad)
    cfg = KERNELS["matmul"].configs(p, H100)[0]
    wrong = replace(cfg, warps_m=1, warps_n=1)  # one warp: outside the enumerated 2..8
    assert wrong not in KERNELS["matmul"].configs(p, H100)
    with pytest.raises(ValueError, match="not a valid config .* leave config out"):
        factory.select("matmul", p, H100, config=wrong)
    assert factory.select("matmul", p, H100, config=cfg)[1] == cfg


def test_the_selection_buckets_are_powers_of_two_up_to_a_cap():
    """`pow2_bucket`: the one rounding every family's selection rule uses (conv2d_gw8's batch,
    layernorm_2d's rows, matmul's token count)."""
    from spio.kernels.conv2d_gw8.params import SELECT_BATCH, select_batch
    from spio.kernels.kernel_def import pow2_bucket
    from spio.kernels.layernorm_2d import SELECT_ROWS, select_rows

    assert [pow2_bucket(n) for n in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [
        1, 1, 2, 4, 4, 8, 1024, 1024, 2048
    ]  # fmt: skip
    assert [pow2_bucket(n, 256) for n in (1, 129, 256, 257, 10**6)] == [1, 256, 256, 256, 256]
    assert select_batch(10**5) == SELECT_BATCH and select_rows(10**9) == SELECT_ROWS
    assert MatmulParams(300, 64, 64).bucketed().m == 512
    assert MatmulParams(1, 64, 64).bucketed().m == 1
