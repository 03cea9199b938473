"""`Xor(row, col, bits, shift=0)`: an XOR swizzle of a tensor's column dim by its row dim.

Spelled `spio::Xor<Row, Col, Bits, Shift>` in the tensor type (swizzle.h). The index of the `col`
extent becomes `col ^ ((row >> shift) & (2**bits - 1))`: within each row the columns are permuted,
so the 8 rows an ldmatrix reads at one logical column land in distinct 16-byte bank groups.

    SmemA = Tensor((M(64), K8(8)), dtype.uint4, swizzle=Xor(M, K8, 3))       # 128-byte rows
    SmemB = Tensor((N(128), K8(4)), dtype.uint4, swizzle=Xor(N, K8, 2, 1))   # 64-byte rows
"""

from __future__ import annotations

from dataclasses import dataclass

from spio.generators.dim import Dim, DimLike, Fold, Module
from spio.generators.spec import Names, check_count


@dataclass(frozen=True, slots=True)
class Xor:
    """Swizzle: column index ^= (row index >> shift) % 2**bits.

    Attributes:
        row: the dim whose index permutes the columns (as written in the tensor's dims).
        col: the swizzled dim; its size in the tensor must be a multiple of 2**bits.
        bits: how many low bits of the shifted row index are XORed in, >= 1.
        shift: how far the row index is shifted right first, >= 0.
    """

    row: DimLike
    col: DimLike
    bits: int
    shift: int = 0

    def __post_init__(self) -> None:
        for what, d in (("row", self.row), ("col", self.col)):
            if not isinstance(d, Dim | Fold | Module):
                raise TypeError(
                    f"Xor.{what} must be a dim, fold or module without size (e.g. K / 8), got "
                    f"{type(d).__name__} {d!r}"
                )
        if self.row == self.col:
            raise ValueError(f"Xor: row and col are both {self.row.describe()}; use two dims")
        object.__setattr__(self, "bits", check_count(self.bits, "Xor.bits"))
        object.__setattr__(self, "shift", check_count(self.shift, "Xor.shift", minimum=0))

    def describe(self) -> str:
        return f"Xor({self.row.describe()}, {self.col.describe()}, {self.bits}, {self.shift})"

    def spell(self, names: Names) -> str:
        args = [names.spell(self.row), names.spell(self.col), str(self.bits)]
        if self.shift:
            args.append(str(self.shift))
        return f"spio::Xor<{', '.join(args)}>"
