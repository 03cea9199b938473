"""`CompoundIndex(P16(4), Q16(4))`: splits a linear index (blockIdx.x, threadIdx.x) into dims."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from spio.generators.dim import SizedDim
from spio.generators.spec import Names, Section
from spio.generators.tensor import sized_dims, wrap_using


@dataclass(frozen=True, slots=True, init=False)
class CompoundIndex:
    """Row-major decomposition of a linear index into sized dims (the last varies fastest).

    `spio::CompoundIndex<spio::Extent<P16, 4>, spio::Extent<Q16, 4>>`; `size` is the product.

    Attributes:
        dims: the sized dims, outermost first.
    """

    dims: tuple[SizedDim, ...]
    section: ClassVar[Section] = "indices"

    def __init__(self, *dims: SizedDim):
        """Declares an index over `dims`, e.g. `CompoundIndex((P / 16)(4), (Q / 16)(4))`."""
        if len(dims) == 1 and isinstance(dims[0], tuple | list):
            raise TypeError(
                "CompoundIndex takes the sized dims as separate arguments: "
                "CompoundIndex(P(4), Q(4)), not CompoundIndex((P(4), Q(4)))"
            )
        object.__setattr__(self, "dims", sized_dims(dims, "CompoundIndex"))

    @property
    def size(self) -> int:
        """The number of linear indices: the product of the sizes (e.g. the grid size)."""
        return math.prod(d.size for d in self.dims)

    def deps(self) -> tuple:
        return tuple(d.dim for d in self.dims)

    def emit(self, name: str, names: Names) -> str:
        return wrap_using(name, "spio::CompoundIndex", self._args(names))

    def inline(self, names: Names) -> str:
        return f"spio::CompoundIndex<{', '.join(self._args(names))}>"

    def _args(self, names: Names) -> list[str]:
        return [f"spio::Extent<{names.spell(d.dim)}, {d.size}>" for d in self.dims]
