"""Kernel argument packing: what launch() hands the driver, checked without a GPU (pack_args)."""

from __future__ import annotations

import struct

import pytest

from spio.cuda import pack_args


class FakeTensor:
    """Duck-typed like a torch tensor: data_ptr() and is_cuda."""

    def __init__(self, ptr: int, is_cuda: bool = True):
        self._ptr = ptr
        self.is_cuda = is_cuda

    def data_ptr(self) -> int:
        return self._ptr


class FakeArray:
    """An object exposing __cuda_array_interface__ (CuPy, Numba, ...)."""

    def __init__(self, ptr: int):
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": (4,),
            "typestr": "<f4",
            "version": 3,
        }


def test_every_kind_packs_at_its_natural_size():
    args = (
        0x7F00_0000_1000,
        FakeTensor(0x7F00_0000_2000),
        FakeArray(0x7F00_0000_3000),
        None,
        -5,
        2**40 + 3,
        1.25,
        -2.5e300,
    )
    expected = struct.pack(
        "<QQQQiqfd",
        0x7F00_0000_1000,
        0x7F00_0000_2000,
        0x7F00_0000_3000,
        0,
        -5,
        2**40 + 3,
        1.25,
        -2.5e300,
    )
    assert pack_args("ppppilfd", args) == expected


def test_limits_of_each_kind_are_accepted():
    assert pack_args("iill", (-(2**31), 2**31 - 1, -(2**63), 2**63 - 1)) == struct.pack(
        "<iiqq", -(2**31), 2**31 - 1, -(2**63), 2**63 - 1
    )
    assert pack_args("p", (2**64 - 1,)) == b"\xff" * 8
    assert pack_args("ff", (3, float("inf"))) == struct.pack("<ff", 3.0, float("inf"))
    assert pack_args("", ()) == b""


def test_int_like_objects_are_accepted():
    class Index:
        def __index__(self):
            return 7

    assert pack_args("ilp", (Index(), Index(), Index())) == struct.pack("<iqQ", 7, 7, 7)


@pytest.mark.parametrize(
    "signature, args, error, match",
    [
        ("ppif", (1, 2, 3), TypeError, r"signature 'ppif' takes 4 arguments, got 3"),
        ("pi", (1, 2, 3), TypeError, r"takes 2 arguments, got 3"),
        ("pi", (1.5, 2), TypeError, r"argument 0 \(signature letter 'p', device pointer\)"),
        ("p", ("0x10",), TypeError, r"argument 0 .* must be an int address"),
        ("p", (True,), TypeError, r"argument 0 .* not a bool"),
        ("p", (FakeTensor(16, is_cuda=False),), TypeError, r"not on a CUDA device"),
        ("p", (-1,), ValueError, r"argument 0 .* address in \[0, 2\*\*64\)"),
        ("p", (2**64,), ValueError, r"address in \[0, 2\*\*64\)"),
        ("pi", (1, 2.0), TypeError, r"argument 1 \(signature letter 'i', int32\) must be an int"),
        ("pi", (1, 2**31), ValueError, r"argument 1 .* must fit int32"),
        ("pi", (1, -(2**31) - 1), ValueError, r"must fit int32"),
        ("l", (2**63,), ValueError, r"argument 0 .* must fit int64"),
        (
            "ff",
            (1.0, "2"),
            TypeError,
            r"argument 1 \(signature letter 'f', float32\) must be a float",
        ),
        ("f", (1e39,), ValueError, r"overflows float32"),
        ("d", (None,), TypeError, r"argument 0 .* float64\) must be a float"),
    ],
)
def test_bad_arguments_name_index_kind_and_rule(signature, args, error, match):
    with pytest.raises(error, match=match):
        pack_args(signature, args)


def test_error_names_the_kernel():
    with pytest.raises(TypeError, match=r"^axpy: argument 1"):
        pack_args("pi", (1, "x"), entry="axpy")


@pytest.mark.parametrize(
    "signature, match",
    [
        ("ppx", r"letter 2 is 'x'; use one of p \(device pointer\), i \(int32\)"),
        ("p" * 257, r"at most 256"),
    ],
)
def test_bad_signature(signature, match):
    with pytest.raises(ValueError, match=match):
        pack_args(signature, ())


def test_signature_must_be_str_and_args_a_sequence():
    with pytest.raises(TypeError, match="signature must be a str"):
        pack_args(b"pp", (1, 2))
    with pytest.raises(TypeError, match="args must be a tuple or list"):
        pack_args("pp", iter((1, 2)))
    assert pack_args("pp", [1, 2]) == struct.pack("<QQ", 1, 2)
