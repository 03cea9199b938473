"""Tensor layouts: strides, padding, storage size, swizzles, emitted C++ and errors."""

import math
import random

import pytest

from spio.generators import Dim, Tensor, Type, Xor, dtype, generate


def _row_major(sizes):
    return tuple(math.prod(sizes[i + 1 :]) for i in range(len(sizes)))


def test_row_major_strides_random_shapes(seed):
    rng = random.Random(seed)
    for _ in range(50):
        sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 5))]
        dims = [Dim() for _ in sizes]
        t = Tensor(tuple(d(s) for d, s in zip(dims, sizes, strict=True)), dtype.float)
        assert t.strides == _row_major(sizes), sizes
        assert t.storage_size == math.prod(sizes)
        assert t.nbytes == 4 * math.prod(sizes)


def test_padding_by_an_outer_stride():
    i, k = Dim(), Dim()
    t = Tensor((i(16), k(32)), dtype.half, strides={i: 40})
    assert t.strides == (40, 1) and t.storage_size == 16 * 40 and t.nbytes == 2 * 16 * 40
    assert t.stride(i) == 40 and t.size(k) == 32


def test_dims_outside_a_given_stride_follow_it():
    n, h, c = Dim(), Dim(), Dim()
    t = Tensor((n(2), h(3), c(5)), dtype.float, strides={h: 8})
    assert t.strides == (24, 8, 1) and t.storage_size == 48


def test_zero_stride_broadcasts():
    n, c = Dim(), Dim()
    bias = Tensor((n(4), c(8)), dtype.float, strides={n: 0})
    assert bias.strides == (0, 1) and bias.storage_size == 8
    assert Tensor((n(4),), dtype.float, strides={n: 0}).storage_size == 1


def test_folded_layout(decl):
    k, i = Dim(), Dim()
    t = Tensor(((k / 8)(4), i(16), (k % 8)(8)), dtype.half)
    assert t.strides == (128, 8, 1) and t.storage_size == 512
    text = generate({"K": k, "I": i, "K8": k / 8, "A": t})
    assert decl(text, "A") == (
        "using A = spio::Tensor<__half, spio::Extent<K8, 4, 128>, spio::Extent<I, 16, 8>, "
        "spio::Extent<spio::Module<K, 8, 1>, 8, 1>>;"
    )


def test_emitted_tensor_lists_dtype_extents_and_strides(decl):
    n, c = Dim(), Dim()
    t = Tensor((n(4), (c / 8)(8)), dtype.uint4, strides={n: 64})
    text = generate({"N": n, "C": c, "C8": c / 8, "X": t})
    assert (
        decl(text, "X")
        == "using X = spio::Tensor<uint4, spio::Extent<N, 4, 64>, spio::Extent<C8, 8, 1>>;"
    )


def test_long_tensor_declarations_wrap_one_argument_per_line():
    dims = [Dim() for _ in range(6)]
    t = Tensor(tuple(d(3) for d in dims), dtype.bfloat16x8)
    names = {f"DIM_NUMBER_{i}": d for i, d in enumerate(dims)}
    text = generate({**names, "WIDE": t})
    body = text[text.index("using WIDE") :]
    assert all(len(line) <= 100 for line in text.splitlines())
    assert body.count("\n    spio::Extent<") == 6 and body.rstrip().endswith("1>>;")
    assert '#include "spio/vector.h"' in text  # spio::Bf16x8 is declared there


def test_tensor_of_a_type_spec_spells_the_type():
    t = Tensor((Dim("I")(4),), Type(dtype.bfloat16))
    assert t.dtype == dtype.bfloat16
    assert "spio::Tensor<__nv_bfloat16, spio::Extent<I, 4, 1>>" in generate({"A": t})


def test_swizzle_is_emitted_after_the_extents():
    m, k = Dim(), Dim()
    t = Tensor((m(64), (k / 8)(8)), dtype.uint4, swizzle=Xor(m, k / 8, 3))
    assert t.storage_size == 512 and t.swizzle == (Xor(m, k / 8, 3, 0),)
    text = generate({"M": m, "K": k, "K8": k / 8, "S": t})
    assert "spio::Extent<K8, 8, 1>, spio::Xor<M, K8, 3>>;" in text
    t2 = Tensor((m(128), (k / 8)(4)), dtype.uint4, swizzle=Xor(m, k / 8, 2, shift=1))
    assert "spio::Xor<M, K8, 2, 1>>;" in generate({"M": m, "K": k, "K8": k / 8, "S": t2})


def test_swizzle_errors():
    m, k, j = Dim("M"), Dim("K"), Dim("J")
    with pytest.raises(ValueError, match="col J is not one of the tensor's dims"):
        Tensor((m(8), k(8)), dtype.uint4, swizzle=Xor(m, j, 3))
    with pytest.raises(ValueError, match="col size 4 must be a multiple of 2\\*\\*bits = 8"):
        Tensor((m(8), k(4)), dtype.uint4, swizzle=Xor(m, k, 3))
    with pytest.raises(ValueError, match="row and col are both"):
        Xor(m, m, 1)
    with pytest.raises(TypeError, match="without size"):
        Xor(m(8), k, 1)


def test_bad_dims():
    n = Dim("N")
    with pytest.raises(TypeError, match=r"dims\[0\] \(N\) has no size; .* N\(16\)"):
        Tensor((n,), dtype.float)
    with pytest.raises(TypeError, match="tuple of sized dims"):
        Tensor(n(4), dtype.float)
    with pytest.raises(ValueError, match="at least one dim"):
        Tensor((), dtype.float)
    with pytest.raises(ValueError, match=r"dims\[0\] and dims\[1\] are both N"):
        Tensor((n(4), n(4)), dtype.float)
    with pytest.raises(TypeError, match="Tensor dtype must be a dtype"):
        Tensor((n(4),), "float")


def test_bad_strides():
    n, c, j = Dim("N"), Dim("C"), Dim("J")
    with pytest.raises(ValueError, match=r"strides: J is not one of the tensor's dims \(N, C\)"):
        Tensor((n(4), c(8)), dtype.float, strides={j: 3})
    with pytest.raises(ValueError, match=r"strides\[N\] must be >= 0, got -1"):
        Tensor((n(4), c(8)), dtype.float, strides={n: -1})
    with pytest.raises(TypeError, match=r"strides\[N\] must be an int"):
        Tensor((n(4), c(8)), dtype.float, strides={n: 8.0})
    with pytest.raises(TypeError, match="has a size; key by the dim alone"):
        Tensor((n(4), c(8)), dtype.float, strides={n(4): 8})
    with pytest.raises(TypeError, match="must be a dict"):
        Tensor((n(4), c(8)), dtype.float, strides=(8, 1))
    # A fold's stride is keyed by the fold, which equals any other spelling of it.
    c8 = Tensor((n(4), (c / 8)(8)), dtype.float, strides={c / 4 / 2: 2})
    assert c8.strides == (16, 2)


def test_tensors_are_values():
    n = Dim()
    assert Tensor((n(4),), dtype.float) == Tensor([n(4)], dtype.float)
    assert Tensor((n(4),), dtype.float) != Tensor((n(4),), dtype.half)
    assert hash(Tensor((n(4),), dtype.float, strides={n: 2})) == hash(
        Tensor((n(4),), dtype.float, strides={n: 2})
    )
