"""`Constant(4)`: a typed compile-time value, `constexpr int BLOCK_P = 4;`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from spio.generators import dtype as dt
from spio.generators.dtype import Dtype
from spio.generators.spec import Names, Section

# The dtypes a Constant can have, and the Python values each accepts.
_INT_RANGES = {
    dt.int32: (-(2**31) + 1, 2**31 - 1),  # -2**31 has no literal spelling without a cast
    dt.uint32: (0, 2**32 - 1),
    dt.int64: (-(2**63) + 1, 2**63 - 1),
}
_SUFFIX = {dt.int32: "", dt.uint32: "u", dt.int64: "LL"}


def literal(value: object, dtype: Dtype, who: str) -> str:
    """The C++ literal of `value` as `dtype` (int32, uint32, int64, float, double or bool)."""
    if dtype == dt.bool:
        if not isinstance(value, bool):
            raise TypeError(f"{who}: a bool constant needs True or False, got {value!r}")
        return "true" if value else "false"
    if dtype in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{who}: a {dtype.name} constant needs an int, got {value!r}")
        lo, hi = _INT_RANGES[dtype]
        if not lo <= value <= hi:
            raise ValueError(
                f"{who}: {value} is outside {dtype.name} range [{lo}, {hi}]; pass dtype.int64 "
                "for larger values"
            )
        return f"{value}{_SUFFIX[dtype]}"
    if dtype in (dt.float, dt.double):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{who}: a {dtype.name} constant needs a number, got {value!r}")
        x = float(value)
        if not math.isfinite(x):
            raise ValueError(f"{who}: {x} has no C++ literal; use a finite value")
        text = repr(x)  # shortest round-trip decimal: '0.1', '1e-05', '3.0'
        return text + ("f" if dtype == dt.float else "")
    raise ValueError(
        f"{who}: dtype {dtype!r} is not a scalar constant type; use dtype.int32, uint32, int64, "
        "float, double or bool"
    )


def _infer(value: object) -> Dtype:
    if isinstance(value, bool):
        return dt.bool
    if isinstance(value, int):
        lo, hi = _INT_RANGES[dt.int32]
        return dt.int32 if lo <= value <= hi else dt.int64
    if isinstance(value, float):
        return dt.float
    raise TypeError(
        f"Constant(value): value must be an int, float or bool, got {type(value).__name__} "
        f"{value!r}; for text use Macro"
    )


@dataclass(frozen=True, slots=True, init=False)
class Constant:
    """A compile-time constant with an explicit C++ type.

    The type follows the value unless given: bool -> bool, int -> int (long long beyond 32 bits),
    float -> float. `Constant(0.5, dtype.double)` and `Constant(7, dtype.uint32)` choose it.

    Attributes:
        value: the Python value.
        dtype: its C++ type.
    """

    value: int | float | bool
    dtype: Dtype
    section: ClassVar[Section] = "constants"

    def __init__(self, value: int | float | bool, dtype: Dtype | None = None):
        if dtype is None:
            dtype = _infer(value)
        elif not isinstance(dtype, Dtype):
            raise TypeError(
                f"Constant dtype must be a dtype value such as dtype.int32, got {dtype!r}"
            )
        literal(value, dtype, "Constant")  # validates
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "dtype", dtype)

    def deps(self) -> tuple:
        return ()

    def emit(self, name: str, names: Names) -> str:
        return f"constexpr {self.dtype.cpp} {name} = {self.inline(names)};"

    def inline(self, names: Names) -> str:
        return literal(self.value, self.dtype, "Constant")
