"""What must not compile (STYLE G4): each promised compile error, with its message.

Every snippet is compiled twice, by the host compiler (g++ -fsyntax-only) and by NVRTC through
spio.compiler for sm_90, and must fail with the library's static_assert text (or, where the
language rejects it before any spio code runs, the compiler's own diagnostic). A positive control
checks that the shared prelude compiles, so a failure here is the snippet's and not the prelude's.

Decisions recorded here: a single dim the tensor lacks is an error, while a coordinates subscript
projects (ignores foreign dims); dims never convert implicitly from int.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).parents[3] / "spio" / "include"
CXX = shutil.which("g++") or shutil.which("clang++")

PRELUDE = """#include "spio/spio.h"
struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };
struct J : spio::Dim<J> { using spio::Dim<J>::Dim; };
struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };
struct L : spio::Dim<L> { using spio::Dim<L>::Dim; };
using K8 = spio::Fold<K, 8>;
using X = spio::Tensor<float, spio::Extent<I, 4>, spio::Extent<K, 8>>;
SPIO_HOST_DEVICE void probe(float* p) {
    (void)p;
"""
EPILOGUE = "\n}\n"

# (id, snippet, regex the diagnostics must contain)
CASES = [
    (
        "compare_different_dims",
        "bool b = I(1) == J(1); (void)b;",
        "cannot compare values of different dimensions",
    ),
    (
        "order_different_dims",
        "bool b = I(1) < J(1); (void)b;",
        "cannot compare values of different dimensions",
    ),
    (
        "subtract_different_dims",
        "auto d = I(1) - J(1); (void)d;",
        "cannot subtract values of different dimensions",
    ),
    (
        "coordinates_equal_single_dim",
        "bool b = (I(1) + J(1)) == I(2); (void)b;",
        "coordinates and a single dim value do not compare",
    ),
    (
        "coordinates_equal_different_bases",
        "bool b = (I(1) + J(1)) == (I(1) + L(1)); (void)b;",
        "same set of base dims",
    ),
    ("fold_zero_stride", "spio::Fold<I, 0> f(1); (void)f;", "Stride must be positive"),
    ("fold_negative_stride", "spio::Fold<K8, -2> f(1); (void)f;", "Stride must be positive"),
    ("fold_member_zero", "auto f = I(8).fold<0>(); (void)f;", "Stride must be positive"),
    ("module_zero_size", "spio::Module<I, 0> m(1); (void)m;", "Size must be positive"),
    ("convert_to_other_base", "auto j = I(1).to<J>(); (void)j;", "must have the same base dim"),
    ("compound_assign_coarser", "K8 a(1); a += K(1);", "needs a \\+ b to have a's type"),
    (
        "subscript_missing_dim",
        "auto c = X(p)[L(1)]; (void)c;",
        "the tensor has no dim with this base",
    ),
    (
        "subscript_with_int",
        "auto c = X(p)[3]; (void)c;",
        "subscript with a dim value",
    ),
    (
        "step_missing_dim",
        "auto c = X(p)[I(1)]; c.step(J(2));",
        "the tensor has no dim with this base",
    ),
    ("size_missing_dim", "auto s = X::size<L>(); (void)s;", "the tensor has no dim of D's base"),
    (
        "coordinates_get_missing",
        "auto j = (I(1) + K(2)).get<J>(); (void)j;",
        "no entry has D's base dim",
    ),
    (
        "compound_index_get_missing",
        "auto j = spio::CompoundIndex<spio::Extent<I, 4>>(1).get<J>(); (void)j;",
        "no extent has D's base dim",
    ),
    (
        "tensor_duplicate_dim",
        "using T = spio::Tensor<float, spio::Extent<I, 4>, spio::Extent<I, 2>>; T t(p); (void)t;",
        "each dim may have only one Extent",
    ),
    (
        "tensor_same_stride_fold_and_module",
        "using T = spio::Tensor<float, spio::Extent<K8, 4>, "
        "spio::Extent<spio::Module<K, 4, 8>, 4>>; T t(p); (void)t;",
        "two extents of one base dim have the same stride",
    ),
    (
        "tensor_part_not_extent",
        "using T = spio::Tensor<float, int>; T t(p); (void)t;",
        "every Part must be a spio::Extent",
    ),
    (
        "extent_zero_size",
        "using T = spio::Tensor<float, spio::Extent<I, 0>>; T t(p); (void)t;",
        "Size must be positive; drop the extent",
    ),
    (
        "swizzle_dim_not_in_tensor",
        "using T = spio::Tensor<float, spio::Extent<I, 8>, spio::Extent<K8, 8>, "
        "spio::Xor<I, L, 3>>; T t(p); (void)t;",
        "needs extents whose dims are exactly",
    ),
    (
        "swizzle_too_many_bits",
        "using T = spio::Tensor<float, spio::Extent<I, 8>, spio::Extent<K8, 4>, "
        "spio::Xor<I, K8, 3>>; T t(p); (void)t;",
        "must be a multiple of 2\\^Bits",
    ),
    (
        "swizzle_same_base",
        "using S = spio::Xor<K, K8, 3>; S s; (void)s;",
        "Row and Col must have different base dims",
    ),
    # Language-level rejections (no spio message possible): the compilers' own wording.
    ("dim_plus_int", "auto d = I(1) + 1; (void)d;", r"no match for .operator\+|no operator \"\+\""),
    (
        "implicit_int_to_dim",
        "I i = 3; (void)i;",
        r"conversion from .int. to non-scalar type|no suitable constructor|cannot be used to "
        r"initialize|no viable conversion",
    ),
]


def _source(snippet: str) -> str:
    return PRELUDE + "    " + snippet + EPILOGUE


def _gxx(source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "snippet.cpp"
    src.write_text(source)
    return subprocess.run(
        [CXX, "-std=c++20", "-fsyntax-only", f"-I{INCLUDE}", str(src)],
        capture_output=True,
        text=True,
    )


def _nvrtc(source: str):
    """None when the source compiles, else the NVRTC log; skips when NVRTC is not installed."""
    from spio.compiler import compile
    from spio.errors import CompileError, LibraryNotFoundError

    try:
        compile(source, "sm_90", name="snippet.cu", cache=None)
    except CompileError as e:
        return e.log
    except LibraryNotFoundError as e:
        pytest.skip(f"NVRTC is not available: {e}")
    return None


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
def test_prelude_compiles_gxx(tmp_path):
    run = _gxx(_source(""), tmp_path)
    assert run.returncode == 0, run.stderr


def test_prelude_compiles_nvrtc():
    assert _nvrtc(_source("")) is None


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize("snippet, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_gxx(snippet, message, tmp_path):
    run = _gxx(_source(snippet), tmp_path)
    assert run.returncode != 0, f"g++ accepted: {snippet}"
    assert re.search(message, run.stderr), f"expected /{message}/ in:\n{run.stderr[-4000:]}"


@pytest.mark.parametrize("snippet, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_nvrtc(snippet, message):
    log = _nvrtc(_source(snippet))
    assert log is not None, f"NVRTC accepted: {snippet}"
    assert re.search(message, log), f"expected /{message}/ in:\n{log[-4000:]}"
