"""Constant, Type and Macro: explicit C++ types and literals."""

import pickle

import pytest

from spio.generators import Constant, Macro, Type, dtype, generate


@pytest.mark.parametrize(
    "spec, expected",
    [
        (Constant(4), "constexpr int X = 4;"),
        (Constant(-7), "constexpr int X = -7;"),
        (Constant(2**40), "constexpr long long X = 1099511627776LL;"),
        (Constant(7, dtype.uint32), "constexpr unsigned X = 7u;"),
        (Constant(0.1), "constexpr float X = 0.1f;"),
        (Constant(1e-5), "constexpr float X = 1e-05f;"),
        (Constant(3, dtype.float), "constexpr float X = 3.0f;"),
        (Constant(0.5, dtype.double), "constexpr double X = 0.5;"),
        (Constant(True), "constexpr bool X = true;"),
        (Constant(False), "constexpr bool X = false;"),
        (Type(dtype.half), "using X = __half;"),
        (Type(dtype.bfloat16), "using X = __nv_bfloat16;"),
        (Type(dtype.float), "using X = float;"),
        (Macro(3), "#define X 3"),
        (Macro(True), "#define X 1"),
        (Macro("__launch_bounds__(256)"), "#define X __launch_bounds__(256)"),
        (Macro(""), "#define X"),
    ],
    ids=str,
)
def test_emitted(spec, expected, decl):
    assert decl(generate({"X": spec}), "X") == expected


def test_float_literals_round_trip(seed):
    import random
    import struct

    rng = random.Random(seed)
    for _ in range(200):
        x = struct.unpack("f", struct.pack("f", rng.uniform(-1e6, 1e6)))[0]  # an exact fp32 value
        text = Constant(x).inline(None)  # no names needed for a literal
        assert text.endswith("f") and struct.pack("f", float(text[:-1])) == struct.pack("f", x)


def test_constants_of_different_types_differ():
    assert Constant(1) != Constant(True) and Constant(1) != Constant(1.0)


@pytest.mark.parametrize(
    "make, exc, message",
    [
        (lambda: Constant("4"), TypeError, "int, float or bool, got str"),
        (lambda: Constant(None), TypeError, "int, float or bool"),
        (lambda: Constant(float("nan")), ValueError, "no C\\+\\+ literal"),
        (lambda: Constant(float("inf"), dtype.double), ValueError, "no C\\+\\+ literal"),
        (lambda: Constant(-1, dtype.uint32), ValueError, "outside uint32 range"),
        (lambda: Constant(2**31, dtype.int32), ValueError, "pass dtype.int64"),
        (lambda: Constant(1.5, dtype.int32), TypeError, "int32 constant needs an int"),
        (lambda: Constant(1, dtype.bool), TypeError, "True or False"),
        (lambda: Constant(1, dtype.half), ValueError, "not a scalar constant type"),
        (lambda: Constant(1, "int"), TypeError, "dtype must be a dtype value"),
        (lambda: Type("float"), TypeError, "dtype.half"),
        (lambda: Macro(1.5), TypeError, "int, bool or str"),
        (lambda: Macro("a\nb"), ValueError, "one line"),
    ],
)
def test_bad_values(make, exc, message):
    with pytest.raises(exc, match=message):
        make()


def test_specs_pickle():
    for spec in (Constant(4), Type(dtype.half), Macro("x")):
        assert pickle.loads(pickle.dumps(spec)) == spec
