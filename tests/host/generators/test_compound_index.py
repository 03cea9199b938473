"""CompoundIndex: sizes, emitted C++ and errors."""

import itertools

import pytest

from spio.generators import CompoundIndex, Dim, generate


def test_size_and_emitted_type(decl):
    p, q = Dim(), Dim()
    idx = CompoundIndex((p / 16)(4), (q / 16)(3))
    assert idx.size == 12
    text = generate({"P": p, "Q": q, "P16": p / 16, "Block": idx})
    assert decl(text, "Block") == (
        "using Block = spio::CompoundIndex<spio::Extent<P16, 4>, "
        "spio::Extent<spio::Fold<Q, 16>, 3>>;"
    )


def test_row_major_decomposition_matches_sizes():
    # The C++ type decomposes row-major (last dim fastest); the Python size is the product, so a
    # grid of idx.size blocks covers every combination exactly once.
    sizes = (2, 3, 4)
    idx = CompoundIndex(*(Dim()(s) for s in sizes))
    combos = list(itertools.product(*(range(s) for s in sizes)))
    assert idx.size == len(combos) == 24


def test_errors():
    p, q = Dim("P"), Dim("Q")
    with pytest.raises(TypeError, match="separate arguments"):
        CompoundIndex((p(4), q(4)))
    with pytest.raises(TypeError, match=r"dims\[1\] \(Q\) has no size"):
        CompoundIndex(p(4), q)
    with pytest.raises(ValueError, match="at least one dim"):
        CompoundIndex()
    with pytest.raises(ValueError, match="both P / 16"):
        CompoundIndex((p / 16)(2), (p / 8 / 2)(2))
