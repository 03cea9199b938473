"""Programmatic dependent launch (PDL) without a GPU: who launches with it, and what the kernels
compile to.

- The loader's policy (`programmatic_launch`): sm_90+ cubins, a CUDA 12.3+ driver, SPIO_PDL on.
- `LoadedKernel.launch(..., dependent=True)` reaches `Function.launch(..., pdl=...)` only when
  the loaded kernel allows it; the two reduce launchers ask for it, the first passes do not.
- NVRTC: the reduce kernels compile for sm_80 and sm_90; on sm_90 `griddepcontrol.wait`
  (SASS ACQBULK) comes before every load of the partials and none of those loads takes the
  non-coherent path (LDG...CONSTANT); layernorm_2d_bwd triggers its dependents (PREEXIT) on
  sm_90 only. The binding itself (cuLaunchKernelEx and its attribute) is tested against the
  fake libcuda in test_cuda_fake_driver.py.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from spio.cuda import known_device
from spio.kernels import layernorm_2d as k
from spio.kernels import loader
from spio.kernels import matmul_splitk_reduce as sk
from spio.kernels import matmul_tail_sum as ts
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.kernels.layernorm_2d_params import LayerNorm2dParams
from spio.kernels.matmul_params import MatmulParams
from spio.settings import override

H100 = known_device("H100")


# ---- policy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, driver, knob, expected",
    [
        ("sm_90", (12, 4), True, True),
        ("sm_90a", (13, 0), True, True),
        ("sm_100", (12, 8), True, True),
        ("sm_120", (12, 8), True, True),
        ("sm_90", (12, 4), False, False),  # SPIO_PDL=0
        ("sm_90", (12, 2), True, False),  # no PDL edges in captured graphs before CUDA 12.3
        ("sm_90", None, True, False),  # no driver
        ("sm_89", (12, 4), True, False),  # griddepcontrol needs sm_90
        ("sm_80", (13, 0), True, False),
    ],
)
def test_programmatic_launch_policy(monkeypatch, arch, driver, knob, expected):
    import spio.cuda

    monkeypatch.setattr(spio.cuda, "driver_version", lambda: driver)
    with override(pdl=knob):
        assert loader.programmatic_launch(arch) is expected


def test_pdl_knob_defaults_on():
    with override(pdl=None):
        from spio.settings import settings

        assert settings().pdl is True


def _loaded(pdl: bool, calls: list) -> loader.LoadedKernel:
    spec = SimpleNamespace(block=(128, 1, 1), smem=512)

    def bind(grid, block, smem, *, pdl, carveout):
        assert carveout == -1
        return lambda args, stream: calls.append((grid, block, args, smem, stream, pdl))

    fn = SimpleNamespace(bind=bind)
    return loader.LoadedKernel(spec=spec, function=fn, module=None, pdl=pdl)


@pytest.mark.parametrize("allowed", [True, False])
def test_loaded_kernel_launches_dependent_with_pdl_only_when_allowed(allowed):
    calls = []
    kern = _loaded(allowed, calls)
    kern.launch((3, 1, 1), (1, 2), stream=7)
    kern.launch((3, 1, 1), (1, 2), stream=7, dependent=True)
    kern.bind((4, 1, 1), dependent=True)((5,), 8)
    assert calls == [
        ((3, 1, 1), (128, 1, 1), (1, 2), 512, 7, False),
        ((3, 1, 1), (128, 1, 1), (1, 2), 512, 7, allowed),
        ((4, 1, 1), (128, 1, 1), (5,), 512, 8, allowed),
    ]
    assert loader.LoadedKernel(spec=None, function=None, module=None).pdl is False


class _Recorder:
    """A loaded kernel that records its bound launches: (grid, dependent, args, stream)."""

    def __init__(self, seen: list, block: int = 128) -> None:
        self.seen = seen
        self.spec = SimpleNamespace(block=(block, 1, 1), smem=0, title=f"fake {block}")
        self.function = SimpleNamespace(max_active_blocks=lambda threads, smem: 2)

    def bind(self, grid, dependent=False):
        return lambda args, stream: self.seen.append((grid, dependent, args, stream))

    def launch(self, grid, args, stream=0, dependent=False):
        self.seen.append((grid, dependent, args, stream))


def test_reduce_launchers_ask_for_a_dependent_launch():
    seen = []
    p = LayerNorm2dParams(c=64, m=100, dtype="float16")
    cfg = k.ReduceConfig(32, 128)
    k.launch_reduce(_Recorder(seen), p, cfg, dweight_part=0x100, dbias_part=0x200, dweight=0x300,
                    dbias=0x400, parts=5, stream=11)  # fmt: skip
    assert seen[-1] == (k.reduce_grid(p, cfg), True, (0x100, 0x200, 0x300, 0x400, 5), 11)

    cp = Conv2dGw8Params(n=2, c=64, h=8, w=8, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
    rcfg = rd.config_for(16)
    rd.reduce_launch(_Recorder(seen), cp, rcfg, 0x10, 0x20, 0x30, 0x40, 16, 9)
    assert seen[-1] == (rd.reduce_grid(cp, rcfg), True, (0x10, 0x20, 0x30, 0x40, 16), 9)


def test_bound_two_pass_launches_make_the_second_pass_dependent():
    """The ops' bound launches of the two-pass gradients (conv wgrad + reduce, layernorm backward
    + reduce): the first pass plain, the reduction dependent (PDL where allowed), its
    config the batch-independent one."""
    from spio.kernels.conv2d_gw8 import wgrad as wg

    seen = []
    cp = Conv2dGw8Params(n=2, c=64, h=8, w=8, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
    wcfg = wg.heuristic(cp, H100)
    run = wg.WgradLaunch(_Recorder(seen), _Recorder(seen), cp, wcfg, H100)
    workspace = SimpleNamespace(data_ptr=lambda: 0x1000)
    run(0x20, 0x30, workspace, 0x40, 0x50, 3)
    (main_grid, main_dep, main_args, _), (red_grid, red_dep, red_args, red_stream) = seen
    assert main_grid == wg.grid(cp, wcfg, H100) and not main_dep
    assert main_args[:4] == (0x1000, 0x1000 + 4 * run.slices * 64 * 8 * 9, 0x40, 0x50)
    assert red_dep and red_stream == 3
    assert red_grid == rd.reduce_grid(cp, rd.reduce_config(cp, wcfg, H100))
    assert red_args == (0x20, 0x30, 0x1000, main_args[1], run.slices)

    seen.clear()
    p = LayerNorm2dParams(c=64, m=100, dtype="float16")
    bcfg = k.BWD.heuristic(p, H100)
    main = _Recorder(seen, block=bcfg.block_threads)
    from spio.kernels.loader import default_function_cache

    rcfg = k.backward_reduce_config(main, p, H100)
    key = (k.BWD_REDUCE.name, p.static(), rcfg, H100.ordinal)
    default_function_cache()._loaded[key] = _Recorder(seen)  # stands in for the loaded reduce
    try:
        launch = k.BackwardLaunch(main, p, bcfg, H100)
        launch(1, 2, 3, 4, 5, 6, 7, 8, SimpleNamespace(data_ptr=lambda: 0x2000), 9)
    finally:
        default_function_cache()._loaded.pop(key)
    (_, main_dep, _, _), (red_grid, red_dep, red_args, _) = seen
    assert not main_dep and red_dep and red_grid == k.reduce_grid(p, rcfg)
    assert red_args == (0x2000, 0x2000 + 4 * launch.parts * 64, 7, 8, launch.parts)


# ---- NVRTC: what the kernels compile to -----------------------------------------------------

LN = LayerNorm2dParams(c=512, m=128 * 49, dtype="float16")
LN_BIAS_ONLY = LayerNorm2dParams(c=96, m=1000, dtype="bfloat16", wdtype="float32",
                                 has_weight=False)  # fmt: skip
CONV = Conv2dGw8Params(n=8, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
CONV_K7 = Conv2dGw8Params(n=8, c=512, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, has_bias=False)


def _reduce_specs():
    out = []
    for p in (LN, LN_BIAS_ONLY):
        out.append(pytest.param(k.reduce_spec(p, k.reduce_heuristic(p, H100), H100),
                                id=f"ln-c{p.c}"))  # fmt: skip
    for p in (CONV, CONV_K7):
        out.append(pytest.param(rd.reduce_spec(p, rd.config_for(64)), id=f"conv-c{p.c}k{p.r}"))
    for n, bias in ((4096, True), (70, False)):  # the matmul split-K sum, float4 and scalar
        p = MatmulParams(16, n, 4096, "bfloat16", "bfloat16", b_transposed=True, has_bias=bias)
        out.append(pytest.param(sk.spec(p, sk.config_for(p, 4)), id=f"matmul-splitk-n{n}"))
    return out


def _sass(spec, arch: str) -> list[str]:
    from spio.compiler import disasm

    text = disasm.disassemble(loader.compile_spec(spec, arch))
    return [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", text)]


def _needs_cuobjdump():
    from spio.compiler.locate import find_tool

    if find_tool("cuobjdump") is None and find_tool("nvdisasm") is None:
        pytest.skip("needs cuobjdump or nvdisasm to read the SASS (pip install spio[test])")


def _sm90_reduce_specs():
    """The reductions above and the Hopper matmul's split-tail sum (sm_90a only: it maps the
    partials with wgmma's accumulator layout)."""
    p = MatmulParams(777, 5000, 3000, "float16", "float16", b_transposed=True, has_bias=True)
    tail = [
        pytest.param(ts.spec(p, ts.TailSumConfig(n)), id=f"matmul-tail-n{n}") for n in (128, 256)
    ]
    return _reduce_specs() + tail


@pytest.mark.parametrize("spec", _sm90_reduce_specs())
def test_reduce_waits_before_reading_partials_on_sm90(spec):
    _needs_cuobjdump()
    sass = _sass(spec, "sm_90")
    waits = [i for i, ins in enumerate(sass) if "ACQBULK" in ins]
    loads = [i for i, ins in enumerate(sass) if re.search(r"\bLDG\b", ins)]
    assert waits, f"{spec.entry}: no griddepcontrol.wait (ACQBULK) in the sm_90 SASS"
    assert loads, f"{spec.entry}: no global loads found; the SASS check is out of date"
    assert waits[0] < loads[0], f"{spec.entry}: a global load precedes griddepcontrol.wait"
    # Partials are fp32 (32- or 128-bit loads); a 16-bit load is the matmul sum's bias, an input
    # that no PDL producer writes (everything before the main kernel completed before it began).
    nc = [ins for ins in sass if "LDG" in ins and "CONSTANT" in ins and ".U16" not in ins]
    assert not nc, f"{spec.entry}: non-coherent loads of data a PDL producer writes: {nc}"


@pytest.mark.parametrize("spec", _reduce_specs())
def test_reduce_compiles_for_sm80_without_grid_dependency_control(spec):
    _needs_cuobjdump()
    sass = _sass(spec, "sm_80")
    assert not [ins for ins in sass if "ACQBULK" in ins or "PREEXIT" in ins]
    assert [ins for ins in sass if "LDG" in ins]


@pytest.mark.parametrize("arch, triggers", [("sm_90", True), ("sm_80", False)])
def test_layernorm_backward_triggers_its_dependents_on_sm90(arch, triggers):
    _needs_cuobjdump()
    dev = known_device(arch)
    spec = k.backward_spec(LN, k.BWD.heuristic(LN, dev), dev)
    sass = _sass(spec, arch)
    assert any("PREEXIT" in ins for ins in sass) is triggers
    assert not any("ACQBULK" in ins for ins in sass)  # the first pass never waits
