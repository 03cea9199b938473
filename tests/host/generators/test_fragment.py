"""MmaA / MmaB / MmaC fragment specs."""

import pytest

from spio.generators import Dim, MmaA, MmaB, MmaC, Type, dtype, generate
from spio.generators.fragment import check_mma


def test_emitted_fragments(decl):
    i, k, j = Dim(), Dim(), Dim()
    text = generate({
        "I": i, "K": k, "J": j,
        "A": MmaA(dtype.half, 16, i, k), "B": MmaB(Type(dtype.bfloat16), 8, k, j), "C": MmaC(i, j),
        "AK": MmaA(dtype.half, 16, i, k / 16),
    })  # fmt: skip
    assert decl(text, "A") == "using A = spio::MmaA<__half, 16, I, K>;"
    assert decl(text, "B") == "using B = spio::MmaB<__nv_bfloat16, 8, K, J>;"
    assert decl(text, "C") == "using C = spio::MmaC<I, J>;"
    assert decl(text, "AK") == "using AK = spio::MmaA<__half, 16, I, spio::Fold<K, 16>>;"
    assert '#include "spio/fragment.h"' in text
    # fragments come after folds and before tensors
    assert text.index("struct K") < text.index("using A =")


def test_bad_fragments():
    i, k = Dim("I"), Dim("K")
    with pytest.raises(ValueError, match="dtype.half or dtype.bfloat16"):
        MmaA(dtype.float, 16, i, k)
    with pytest.raises(ValueError, match="k must be 16 .* or 8"):
        MmaB(dtype.half, 32, k, i)
    with pytest.raises(TypeError, match="MmaC row must be a dim"):
        MmaC(3, i)
    with pytest.raises(TypeError, match="MmaA col must be a dim"):
        MmaA(dtype.half, 16, i, k(16))


def test_check_mma():
    i, k, j = Dim("I"), Dim("K"), Dim("J")
    check_mma(MmaC(i, j), MmaA(dtype.half, 16, i, k), MmaB(dtype.half, 16, k, j))
    with pytest.raises(ValueError, match="A.col is K but B.row is J"):
        check_mma(MmaC(i, j), MmaA(dtype.half, 16, i, k), MmaB(dtype.half, 16, j, k))
    with pytest.raises(ValueError, match="one instruction shape"):
        check_mma(MmaC(i, j), MmaA(dtype.half, 16, i, k), MmaB(dtype.half, 8, k, j))
