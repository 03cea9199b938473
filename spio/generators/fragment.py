"""Tensor-core fragment types of mma.sync m16n8k16 / m16n8k8 with typed row and col dims.

    AFrag = MmaA(dtype.half, 16, I, K)    # using AFrag = spio::MmaA<__half, 16, I, K>;
    BFrag = MmaB(dtype.half, 16, K, J)    # using BFrag = spio::MmaB<__half, 16, K, J>;
    CFrag = MmaC(I, J)                    # using CFrag = spio::MmaC<I, J>;  (fp32 accumulators)

A is 16 x k (rows x reduction), B is k x 8 (reduction x cols), C is 16 x 8. The C++ side
(fragment.h, device only) checks that A's col dim is B's row dim and so on when they meet in
`spio::mma(c, a, b)`; `check_mma` makes the same check here, at generation time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spio.generators import dtype as dt
from spio.generators.dim import Dim, DimLike, Fold, Module
from spio.generators.dtype import Dtype
from spio.generators.spec import Names, Section, check_count
from spio.generators.type_alias import as_dtype

INCLUDE = "spio/fragment.h"
_INPUTS = (dt.half, dt.bfloat16)


def _dim(value: object, who: str) -> DimLike:
    if not isinstance(value, Dim | Fold | Module):
        raise TypeError(f"{who} must be a dim, fold or module (e.g. I or K / 16), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class _Operand:
    """An A or B operand: element type, k (16 or 8) and typed row/col dims."""

    dtype: Dtype
    k: int
    row: DimLike
    col: DimLike
    section: ClassVar[Section] = "fragments"
    template: ClassVar[str] = ""  # the C++ template, also the name in messages

    def __post_init__(self) -> None:
        who = self.template
        d = as_dtype(self.dtype, f"{who} dtype")
        if d not in _INPUTS:
            raise ValueError(
                f"{who}: dtype must be dtype.half or dtype.bfloat16 (mma.sync inputs), got {d!r}"
            )
        k = check_count(self.k, f"{who} k")
        if k not in (8, 16):
            raise ValueError(f"{who}: k must be 16 (m16n8k16) or 8 (m16n8k8), got {k}")
        _dim(self.row, f"{who} row")
        _dim(self.col, f"{who} col")
        object.__setattr__(self, "dtype", d)  # a Type becomes its dtype
        object.__setattr__(self, "k", k)

    def deps(self) -> tuple:
        return (self.row, self.col)

    def emit(self, name: str, names: Names) -> str:
        return f"using {name} = {self.inline(names)};"

    def inline(self, names: Names) -> str:
        r, c = names.spell(self.row), names.spell(self.col)
        return f"spio::{self.template}<{self.dtype.cpp}, {self.k}, {r}, {c}>"


class MmaA(_Operand):
    """The A operand (16 x k; col is the reduction dim). `spio::MmaA<T, k, Row, Col>`."""

    __slots__ = ()
    template: ClassVar[str] = "MmaA"


class MmaB(_Operand):
    """The B operand (k x 8; row is the reduction dim). `spio::MmaB<T, k, Row, Col>`."""

    __slots__ = ()
    template: ClassVar[str] = "MmaB"


@dataclass(frozen=True, slots=True)
class MmaC:
    """The fp32 accumulator (16 x 8). `spio::MmaC<Row, Col>`."""

    row: DimLike
    col: DimLike
    section: ClassVar[Section] = "fragments"

    def __post_init__(self) -> None:
        _dim(self.row, "MmaC row")
        _dim(self.col, "MmaC col")

    def deps(self) -> tuple:
        return (self.row, self.col)

    def emit(self, name: str, names: Names) -> str:
        return f"using {name} = {self.inline(names)};"

    def inline(self, names: Names) -> str:
        return f"spio::MmaC<{names.spell(self.row)}, {names.spell(self.col)}>"


def check_mma(c: MmaC, a: MmaA, b: MmaB) -> None:
    """Raises ValueError unless c += a * b is consistent: same k and dtype, matching dims."""
    if a.k != b.k or a.dtype != b.dtype:
        raise ValueError(
            f"mma: A is {a.dtype!r} k={a.k} but B is {b.dtype!r} k={b.k}; use one instruction shape"
        )
    pairs = (("A.col", a.col, "B.row", b.row), ("A.row", a.row, "C.row", c.row),
             ("B.col", b.col, "C.col", c.col))  # fmt: skip
    for n1, d1, n2, d2 in pairs:
        if d1 != d2:
            raise ValueError(
                f"mma: {n1} is {d1.describe()} but {n2} is {d2.describe()}; they index the same "
                "axis, so they must be the same dim (check the operand order)"
            )
