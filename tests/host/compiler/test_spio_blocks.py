"""@spio blocks through compile(): expansion, scope, #line mapping, caching of the generated
header."""

from __future__ import annotations

import pytest

from spio.compiler import compile
from spio.compiler.compile import GENERATED_HEADER, prepare
from spio.errors import CompileError
from spio.generators import Constant
from spio.settings import override

SOURCE = """\
/*@spio
I = Dim()
BLOCK = Constant(4)
@spio*/
static_assert(BLOCK == 4, "BLOCK comes from the @spio block");
static_assert(WARPS == 2, "WARPS comes from the scope");
extern "C" __global__ void blocks(int* y) {
    I i(3);
    y[threadIdx.x] = (i + I(1)).get() * BLOCK * WARPS;
}
"""


def test_blocks_and_scope_become_the_generated_header(disk):
    cubin = compile(SOURCE, "sm_80", scope={"WARPS": Constant(2)}, cache=disk)
    assert cubin[:4] == b"\x7fELF"
    p = prepare(SOURCE, "sm_80", scope={"WARPS": Constant(2)})
    assert "constexpr int BLOCK = 4;" in p.generated and "WARPS = 2" in p.generated
    assert dict(p.headers)[GENERATED_HEADER] == p.generated
    assert p.text.startswith(f'#include "{GENERATED_HEADER}"\n#line 1 "kernel.cu"\n')


def test_scope_value_changes_the_key_and_the_binary(disk):
    a = compile(SOURCE, "sm_80", scope={"WARPS": Constant(2)}, cache=disk)
    with pytest.raises(CompileError, match="WARPS comes from the scope"):
        compile(SOURCE, "sm_80", scope={"WARPS": Constant(3)}, cache=disk)
    b = compile(
        SOURCE.replace("Constant(4)", "Constant(8)").replace("== 4", "== 8"),
        "sm_80",
        scope={"WARPS": Constant(2)},
        cache=disk,
    )
    assert a != b
    with override(assert_no_compile=True):
        assert compile(SOURCE, "sm_80", scope={"WARPS": Constant(2)}, cache=disk) == a


def test_errors_point_at_the_callers_line(disk):
    bad = SOURCE.replace("y[threadIdx.x] =", "y[threadIdx.x] = undefined_thing +")
    with pytest.raises(CompileError) as info:
        compile(bad, "sm_80", scope={"WARPS": Constant(2)}, name="blocks.cu", cache=disk)
    err = info.value
    assert "blocks.cu(9)" in err.log  # line 9 of the caller's file, despite the header in front
    assert err.error_lines() == [9]
    assert "    9 |     y[threadIdx.x] = undefined_thing +" in str(err)


def test_generated_header_name_is_reserved():
    with pytest.raises(ValueError, match=GENERATED_HEADER):
        compile(
            SOURCE,
            "sm_80",
            headers={GENERATED_HEADER: ""},
            scope={"WARPS": Constant(2)},
            cache=None,
        )


def test_save_source_writes_the_generated_header(disk):
    with override(cache_save_source=True):
        compile(SOURCE, "sm_80", scope={"WARPS": Constant(2)}, cache=disk)
    cubin = next(disk.root.glob("kernels/*/*.cubin"))
    assert "constexpr int BLOCK = 4;" in cubin.with_suffix(".h").read_text()
    assert cubin.with_suffix(".cu").read_text().endswith(SOURCE)
