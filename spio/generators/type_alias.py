"""`Type(dtype.half)`: a named element type, `using T = __half;` (kernels pick fp16/bf16 by it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spio.generators.dtype import Dtype
from spio.generators.spec import Names, Section


@dataclass(frozen=True, slots=True)
class Type:
    """A C++ type alias of a dtype. Also accepted wherever a dtype is (e.g. a Tensor's elements).

    Attributes:
        dtype: the aliased element type.
    """

    dtype: Dtype
    section: ClassVar[Section] = "constants"

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, Dtype):
            raise TypeError(
                f"Type(dtype): dtype must be a spio.generators.dtype value such as dtype.half, got "
                f"{type(self.dtype).__name__} {self.dtype!r}"
            )

    def deps(self) -> tuple:
        return ()

    def emit(self, name: str, names: Names) -> str:
        return f"using {name} = {self.dtype.cpp};"

    def inline(self, names: Names) -> str:
        return self.dtype.cpp


def as_dtype(value: object, what: str) -> Dtype:
    """The Dtype of `value` (a Dtype or a Type), or a TypeError naming `what`."""
    if isinstance(value, Dtype):
        return value
    if isinstance(value, Type):
        return value.dtype
    raise TypeError(
        f"{what} must be a dtype (dtype.float, dtype.half, dtype.half8, ...) or a Type, got "
        f"{type(value).__name__} {value!r}"
    )
