"""compile(): real NVRTC compiles for every supported arch, PTX, options, errors, bad arguments."""

from __future__ import annotations

import io
import pickle
import re
import subprocess
import sys

import pytest

from spio.compiler import (
    compile,
    describe,
    kernel_resources,
    nvrtc_version,
    supported_archs,
)
from spio.compiler.compile import prepare
from spio.compiler.nvrtc import NvrtcError
from spio.compiler.resources import cubin_arch
from spio.errors import CompileError
from spio.settings import override

SPIO_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")


def test_nvrtc_version_and_archs():
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0
    archs = supported_archs()
    assert all(re.fullmatch(r"sm_\d+", a) for a in archs)
    assert {"sm_80", "sm_90"} <= set(archs)
    info = describe()
    assert info["version"] == f"{major}.{minor}"
    assert set(info) >= {"version", "library", "include", "found via"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_tiny_kernel(arch, tiny, disk):
    cubin = compile(tiny(arch), arch, cache=disk)
    assert cubin[:4] == b"\x7fELF"
    assert cubin_arch(cubin) == int(arch[3:])
    assert set(kernel_resources(cubin)) == {"tiny"}


def test_every_supported_arch_from_sm_80(tiny):
    archs = [a for a in supported_archs() if int(a[3:]) >= 80]
    if "sm_90" in archs:
        archs.append("sm_90a")  # Hopper arch-specific features (wgmma, setmaxnreg)
    wanted = [a for a in SPIO_ARCHS if a in supported_archs()]
    assert wanted[:4] == ["sm_80", "sm_86", "sm_89", "sm_90"], "NVRTC lacks a required target"
    for arch in archs:
        cubin = compile(tiny(), arch, cache=None)
        assert cubin_arch(cubin) == int(arch[3:].rstrip("af")), arch


def test_ptx_output(tiny, disk):
    ptx = compile(tiny(), "sm_90", ptx=True, cache=disk)
    text = ptx.decode()
    assert ".target sm_90" in text
    assert ".entry tiny" in text
    assert not text.endswith("\0")
    assert disk.path(prepare(tiny(), "sm_90", ptx=True).key, ptx=True).is_file()


def test_compile_error_has_log_numbered_source_and_options(broken):
    with pytest.raises(CompileError) as info:
        compile(broken, "sm_80", options=("-DFOO=1",), name="broken.cu", cache=None)
    err = info.value
    assert 'identifier "undefined_thing" is undefined' in err.log
    assert err.error_lines() == [4]
    assert err.name == "broken.cu"
    assert err.source == broken
    assert err.options[-1] == "-DFOO=1" and "-std=c++20" in err.options
    text = str(err)
    assert "    4 |     y[0] = undefined_thing;" in text
    assert "broken.cu(4)" in text
    again = pickle.loads(pickle.dumps(err))
    assert (again.log, again.source, again.options, again.name) == (
        err.log,
        err.source,
        err.options,
        err.name,
    )
    assert str(again) == text
    out = io.StringIO()
    err.dump(out)
    assert "    3 | extern" in out.getvalue()


def test_default_and_setting_options(tiny):
    base = prepare(tiny(), "sm_80", options=("-DA=1", "-DB=2"))
    opts = base.options
    assert opts[:2] == ("-std=c++20", "--gpu-architecture=sm_80")
    assert opts[-2:] == ("-DA=1", "-DB=2")  # the caller's options last, in order
    assert any(o.endswith("spio/include") for o in opts)
    assert "-lineinfo" not in opts and "-G" not in opts and "--use_fast_math" not in opts
    with override(lineinfo=True):
        lined = prepare(tiny(), "sm_80", options=("-DA=1", "-DB=2"))
    with override(debug=True):
        debug = prepare(tiny(), "sm_80", options=("-DA=1", "-DB=2"))
    assert "-lineinfo" in lined.options and "-G" in debug.options
    assert len({base.key, lined.key, debug.key}) == 3
    assert prepare(tiny(), "sm_80", ptx=True).options[1] == "--gpu-architecture=compute_80"


def test_debug_and_lineinfo_compile(tiny):
    with override(lineinfo=True, debug=True):
        assert compile(tiny(), "sm_80", cache=None)[:4] == b"\x7fELF"


def test_a_debug_compile_leaves_later_compiles_unchanged(tiny):
    """NVRTC 12.9 keeps state from a -G compile: later compiles in that process without -G came
    out different (the Hopper matmul's 64-wide variant, another register allocation), so a
    debug compile runs in a child process; the same variant compiles to the same bytes before
    and after one."""
    from spio.cuda import known_device
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.matmul_params import MatmulParams

    h100 = known_device("H100")
    spec = k90.spec(MatmulParams(64, 64, 64, b_transposed=True), k90.MatmulSm90Config(64, 4), h100)

    def variant() -> bytes:
        return compile(
            spec.source_text(), h100.arch + spec.arch_suffix, name=spec.source,
            scope=spec.specs, cache=None,
        )  # fmt: skip

    before = variant()
    with override(debug=True):
        assert compile(tiny(), "sm_80", cache=None)[:4] == b"\x7fELF"
    assert variant() == before


def test_user_options_reach_nvrtc(tiny):
    src = tiny() + "#ifndef SPIO_TEST_FLAG\n#error flag missing\n#endif\n"
    compile(src, "sm_80", options=("-DSPIO_TEST_FLAG",), cache=None)
    with pytest.raises(CompileError, match="flag missing"):
        compile(src, "sm_80", cache=None)


def test_in_memory_headers(disk):
    src = '#include "answer.h"\nextern "C" __global__ void k(int* y) { y[0] = ANSWER; }\n'
    a = compile(src, "sm_80", headers={"answer.h": "#define ANSWER 42\n"}, cache=disk)
    b = compile(src, "sm_80", headers={"answer.h": "#define ANSWER 43\n"}, cache=disk)
    assert a != b
    assert disk.stats().compiles == 2


@pytest.mark.parametrize("arch", ["sm_9000", "sm90", "compute_90", "90", "sm_90x", ""])
def test_bad_arch_lists_supported(arch, tiny):
    with pytest.raises(ValueError, match=r"arch=.*use one of .*sm_80.*sm_90"):
        compile(tiny(), arch, cache=None)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"source": b"bytes"}, "source must be str"),
        ({"arch": 90}, "arch must be a str"),
        ({"options": "-DX=1"}, "options must be a sequence of str"),
        ({"options": ("-DX", 3)}, "options must be a sequence of str"),
        ({"headers": {"a.h": 1}}, "headers must map"),
        ({"name": ""}, "name must be a non-empty str"),
        ({"scope": [1]}, "scope must map"),
    ],
)
def test_bad_arguments_are_type_errors(kwargs, message, tiny):
    args = {"source": tiny(), "arch": "sm_80", **kwargs}
    with pytest.raises(TypeError, match=message):
        compile(args.pop("source"), args.pop("arch"), cache=None, **args)


def test_invalid_option_names_the_problem(tiny):
    with pytest.raises(NvrtcError, match="nvrtcCompileProgram"):
        compile(tiny(), "sm_80", options=("--no-such-option",), cache=None)


def test_compiling_does_not_import_torch():
    plain = "import spio.compiler, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    code = (
        "import sys, spio.compiler as c;"
        "c.compile('extern \"C\" __global__ void k(float* y) { y[0] = 1; }', 'sm_80', cache=None);"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
