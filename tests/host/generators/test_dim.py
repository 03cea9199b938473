"""Dims, folds, modules and sized dims: Python-side arithmetic, emitted C++ and error messages."""

import pytest

from spio.generators import Dim, Fold, Module, SizedDim, generate


def test_each_dim_is_its_own_dimension():
    a, b = Dim(), Dim()
    assert a != b and a == a
    assert a / 8 != b / 8


@pytest.mark.parametrize("s1, s2", [(2, 4), (8, 2), (3, 5), (4, 4)])
def test_fold_of_fold_multiplies_strides(s1, s2):
    k = Dim()
    assert k / s1 / s2 == k / (s1 * s2) == Fold(k, s1 * s2)
    assert hash(k / s1 / s2) == hash(k / (s1 * s2))
    assert (k / s1 / s2).base is k and (k / s1 / s2).stride == s1 * s2


def test_fold_method_equals_division():
    k = Dim()
    assert k.fold(8) == k / 8 and k.fold(8).fold(2) == k / 16


def test_fold_by_one_is_identity():
    k = Dim()
    assert k / 1 is k
    assert (k / 8) / 1 == k / 8


@pytest.mark.parametrize("size", [2, 4, 8, 32])
def test_module_of_dim(size):
    k = Dim()
    m = k % size
    assert isinstance(m, Module) and (m.base, m.size, m.stride) == (k, size, 1)


def test_module_of_fold_keeps_the_fold_stride():
    k = Dim()
    m = (k / 8) % 4
    assert (m.base, m.size, m.stride) == (k, 4, 8)
    assert (k / 2 / 4) % 4 == m


def test_module_arithmetic_matches_integer_arithmetic():
    # (K % 16) / 4 is (K / 4) % 4 and (K % 16) % 4 is K % 4, checked on every k in a small domain.
    k = Dim()
    for derived, f in [
        ((k % 16) / 4, lambda v: (v % 16) // 4),
        ((k % 16) % 4, lambda v: v % 4),
        (((k / 2) % 8) / 2, lambda v: ((v // 2) % 8) // 2),
    ]:
        for v in range(256):
            assert (v // derived.stride) % derived.size == f(v), (derived, v)


def test_module_division_must_divide_its_size():
    k = Dim()
    with pytest.raises(ValueError, match="must divide the module size 8"):
        (k % 8) / 3
    with pytest.raises(ValueError, match="new size must divide the module size 8"):
        (k % 8) % 3


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-8, ValueError), (2.0, TypeError),
                                      (True, TypeError), ("8", TypeError)])  # fmt: skip
def test_bad_fold_strides_are_rejected(bad, exc):
    k = Dim("K")
    with pytest.raises(exc, match="K / stride"):
        k / bad


def test_modulo_one_is_rejected():
    with pytest.raises(ValueError, match=">= 2"):
        Dim("K") % 1


def test_fold_needs_a_dim_base():
    k = Dim()
    with pytest.raises(TypeError, match="Fold.base must be a Dim"):
        Fold(k / 8, 2)
    with pytest.raises(ValueError, match="stride must be >= 2"):
        Fold(k, 1)


def test_sized_dims():
    k = Dim()
    assert k(32) == SizedDim(k, 32) and (k / 8)(4).dim == k / 8 and (k % 8)(8).size == 8
    with pytest.raises(ValueError, match="has only 8 values"):
        (k % 8)(16)
    with pytest.raises(ValueError, match="size must be >= 1"):
        k(0)
    with pytest.raises(TypeError, match="must be an int"):
        k(1.5)


def test_numpy_style_integers_are_accepted():
    class Index:  # anything with __index__, e.g. numpy.int64
        def __index__(self):
            return 8

    k = Dim()
    assert k / Index() == k / 8 and k(Index()).size == 8


def test_dim_names_must_be_cpp_identifiers():
    assert Dim("K").name == "K"
    for bad in ["1K", "K-8", "int", "struct", "__K", "_K", "spio"]:
        with pytest.raises(ValueError, match="Dim name"):
            Dim(bad)


def test_emitted_dim_fold_module():
    k = Dim()
    text = generate({"K": k, "K8": k / 8, "K16": k / 8 / 2, "K_MOD_8": k % 8, "KM": (k / 8) % 4})
    lines = text.splitlines()
    assert "struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };" in lines
    assert "using K8 = spio::Fold<K, 8>;" in lines
    assert "using K16 = spio::Fold<K, 16>;" in lines
    assert "using K_MOD_8 = spio::Module<K, 8, 1>;" in lines
    assert "using KM = spio::Module<K, 4, 8>;" in lines
