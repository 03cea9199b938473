"""Dimensions: `Dim()`, its folds (`K / 8`), its modules (`K % 8`) and sized dims (`K(32)`).

A `Dim` is a dimension type of its own (`struct K : spio::Dim<K>`); two `Dim()` are two different
dimensions, whatever their names. Folds and modules are values derived from one base dim:

    K / 8          Fold(K, 8)         spio::Fold<K, 8>       value v means K(8 v)
    K / 8 / 2      Fold(K, 16)        folds of folds multiply (same type as K / 16)
    K % 8          Module(K, 8, 1)    spio::Module<K, 8, 1>  value in [0, 8), means K(v)
    (K / 8) % 4    Module(K, 4, 8)    spio::Module<K, 4, 8>  value in [0, 4), means K(8 v)

Equal derivations are equal values (`K / 8 / 2 == K / 16`), so a fold declared once as
`K16 = K / 16` is spelled `K16` wherever `K / 16` appears. Calling a dim with a size, `K(32)`,
gives a `SizedDim` for tensor and index declarations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar

from spio.generators.spec import Names, Section, check_count, check_identifier

# While an @spio block runs, its namespace, so error messages can call an unnamed Dim by the
# variable it is bound to (read only; the Dim itself never learns a name).
_MESSAGE_NAMES: ContextVar[Mapping[str, object] | None] = ContextVar(
    "spio_generators_message_names", default=None
)


@contextlib.contextmanager
def message_names(namespace: Mapping[str, object]) -> Iterator[None]:
    """Within the block, unnamed Dims describe themselves by their name in `namespace`."""
    token = _MESSAGE_NAMES.set(namespace)
    try:
        yield
    finally:
        _MESSAGE_NAMES.reset(token)


class _DimOps:
    """Operations shared by Dim, Fold and Module: sizing and derivation."""

    __slots__ = ()

    def __call__(self, size: int) -> SizedDim:
        """This dimension with a size: `K(32)` for tensor and index declarations."""
        return SizedDim(self, size)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, eq=False)
class Dim(_DimOps):
    """A dimension: its own C++ type. Compared by identity (each `Dim()` is a new dimension).

    Attributes:
        name: optional C++ name. A named Dim that a spec uses but the mapping given to `generate`
            leaves out is declared under this name; an unnamed one must be in the mapping.
    """

    name: str | None = None
    section: ClassVar[Section] = "dims"

    def __post_init__(self) -> None:
        if self.name is not None:
            check_identifier(self.name, "Dim name")

    @property
    def base(self) -> Dim:
        """The dim itself (folds and modules point here)."""
        return self

    @property
    def stride(self) -> int:
        """1: a dim counts its own units."""
        return 1

    def __truediv__(self, stride: int) -> DimLike:
        n = check_count(stride, f"{self.describe()} / stride: the stride")
        return self if n == 1 else Fold(self, n)

    fold = __truediv__  # K.fold(8) is K / 8

    def __mod__(self, size: int) -> Module:
        n = check_count(size, f"{self.describe()} % size: the size", minimum=2)
        return Module(self, n, 1)

    def describe(self) -> str:
        """A short description for error messages: the name, else the block variable, else Dim()."""
        if self.name is not None:
            return self.name
        namespace = _MESSAGE_NAMES.get()
        if namespace is not None:
            for key, value in namespace.items():
                if value is self and not key.startswith("_"):
                    return key
        return "Dim()"

    def deps(self) -> tuple:
        return ()

    def emit(self, name: str, names: Names) -> str:
        return f"struct {name} : spio::Dim<{name}> {{ using spio::Dim<{name}>::Dim; }};"

    def inline(self, names: Names) -> str:
        raise ValueError(f"{self.describe()} has no name to be spelled by; bind it in the specs")

    def __repr__(self) -> str:
        return f"Dim({self.name!r})" if self.name is not None else "Dim()"


@dataclass(frozen=True, slots=True)
class Fold(_DimOps):
    """`base / stride`: a dimension whose value v means base(stride * v).

    Attributes:
        base: the Dim it folds.
        stride: base units per unit of the fold, >= 2.
    """

    base: Dim
    stride: int
    section: ClassVar[Section] = "folds"

    def __post_init__(self) -> None:
        if not isinstance(self.base, Dim):
            raise TypeError(
                f"Fold.base must be a Dim, got {type(self.base).__name__}; write K / 8, which also "
                "folds folds (K / 8 / 2 == K / 16)"
            )
        n = check_count(self.stride, f"Fold of {self.base.describe()}: stride", minimum=2)
        object.__setattr__(self, "stride", n)

    def __truediv__(self, stride: int) -> DimLike:
        n = check_count(stride, f"{self.describe()} / stride: the stride")
        return self if n == 1 else Fold(self.base, self.stride * n)

    fold = __truediv__  # K.fold(8) is K / 8

    def __mod__(self, size: int) -> Module:
        n = check_count(size, f"{self.describe()} % size: the size", minimum=2)
        return Module(self.base, n, self.stride)

    def describe(self) -> str:
        return f"{self.base.describe()} / {self.stride}"

    def deps(self) -> tuple:
        return (self.base,)

    def emit(self, name: str, names: Names) -> str:
        return f"using {name} = {self.inline(names)};"

    def inline(self, names: Names) -> str:
        return f"spio::Fold<{names.spell(self.base)}, {self.stride}>"


@dataclass(frozen=True, slots=True)
class Module(_DimOps):
    """`(base / stride) % size`: a dimension with values in [0, size), v meaning base(stride * v).

    Attributes:
        base: the Dim it comes from.
        size: number of values, >= 2.
        stride: base units per unit, >= 1.
    """

    base: Dim
    size: int
    stride: int
    section: ClassVar[Section] = "folds"

    def __post_init__(self) -> None:
        if not isinstance(self.base, Dim):
            raise TypeError(
                f"Module.base must be a Dim, got {type(self.base).__name__}; write K % 8 or "
                "(K / 8) % 4"
            )
        what = f"Module of {self.base.describe()}"
        object.__setattr__(self, "size", check_count(self.size, f"{what}: size", minimum=2))
        object.__setattr__(self, "stride", check_count(self.stride, f"{what}: stride"))

    def __truediv__(self, stride: int) -> DimLike:
        n = check_count(stride, f"{self.describe()} / stride: the stride")
        if n == 1:
            return self
        if self.size % n or self.size == n:
            raise ValueError(
                f"{self.describe()} / {n}: the stride must divide the module size {self.size} "
                f"and be smaller than it; fold the base first, e.g. ({self.base.describe()} / "
                f"{self.stride * n}) % k"
            )
        return Module(self.base, self.size // n, self.stride * n)

    fold = __truediv__  # K.fold(8) is K / 8

    def __mod__(self, size: int) -> Module:
        n = check_count(size, f"{self.describe()} % size: the size", minimum=2)
        if self.size % n:
            raise ValueError(
                f"{self.describe()} % {n}: the new size must divide the module size {self.size}"
            )
        return self if n == self.size else Module(self.base, n, self.stride)

    def describe(self) -> str:
        inner = self.base.describe()
        if self.stride != 1:
            inner = f"({inner} / {self.stride})"
        return f"{inner} % {self.size}"

    def deps(self) -> tuple:
        return (self.base,)

    def emit(self, name: str, names: Names) -> str:
        return f"using {name} = {self.inline(names)};"

    def inline(self, names: Names) -> str:
        return f"spio::Module<{names.spell(self.base)}, {self.size}, {self.stride}>"


DimLike = Dim | Fold | Module


@dataclass(frozen=True, slots=True)
class SizedDim:
    """A dimension with a size, `K(32)`: one axis of a tensor or compound index declaration.

    Not a spec by itself. A Module's size may not exceed the module's range.
    """

    dim: DimLike
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.dim, Dim | Fold | Module):
            raise TypeError(
                f"SizedDim.dim must be a Dim, fold or module, got {type(self.dim).__name__}"
            )
        n = check_count(self.size, f"{self.dim.describe()}(size): the size")
        if isinstance(self.dim, Module) and n > self.dim.size:
            raise ValueError(
                f"({self.dim.describe()})({n}): a module of size {self.dim.size} has only "
                f"{self.dim.size} values; use a size <= {self.dim.size}"
            )
        object.__setattr__(self, "size", n)

    def describe(self) -> str:
        return f"{self.dim.describe()}({self.size})"
