"""The Spec protocol every generator spec implements, and the name table used while emitting.

A spec is a plain value (a dimension, a tensor layout, a constant...). It has no name of its own:
names come from the keys of the mapping given to `generate` (for `@spio` blocks, the variable
names). While emitting, a spec spells the specs it refers to through `Names`, which gives the
declared name of a spec, or its inline C++ spelling when it has none (an unnamed fold is written
`spio::Fold<K, 8>` in place).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, SupportsIndex, cast

Section = Literal["dims", "folds", "fragments", "tensors", "indices", "constants"]

# Output order of the header's sections (STYLE D3); each section is sorted by name.
SECTIONS: tuple[Section, ...] = ("dims", "folds", "fragments", "tensors", "indices", "constants")


class Spec(Protocol):
    """What `generate` needs from a spec.

    Attributes:
        section: the header section the declaration goes to.
    """

    section: ClassVar[Section]

    def deps(self) -> tuple[Spec, ...]:
        """The specs this one refers to by name (dims, folds...), in a deterministic order."""
        ...

    def emit(self, name: str, names: Names) -> str:
        """The C++ declaration of this spec under `name` (one or more lines, no final newline)."""
        ...

    def inline(self, names: Names) -> str:
        """The C++ spelling of this spec where it has no name (e.g. `spio::Fold<K, 8>`)."""
        ...


@dataclass(frozen=True, slots=True)
class Names:
    """The declared name of each named spec; `spell` falls back to the spec's inline spelling."""

    by_spec: Mapping[Spec, str]

    def spell(self, spec: Spec) -> str:
        """The C++ spelling of `spec`: its declared name, or its inline spelling."""
        name = self.by_spec.get(spec)
        return name if name is not None else spec.inline(self)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# C++20 keywords and alternative tokens, plus names that would break the generated header.
_RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires return
    short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    xor xor_eq spio std
    """.split()
)


def check_identifier(name: object, what: str) -> str:
    """Returns `name` if it can name a C++ declaration in the generated header, else raises.

    Raises:
        TypeError: `name` is not a str.
        ValueError: not an identifier, a C++ keyword, or reserved (`__x`, `_X`).
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__} {name!r}")
    if not _IDENTIFIER.match(name):
        raise ValueError(
            f"{what} {name!r} is not a C++ identifier; use letters, digits and _ "
            "(not starting with a digit)"
        )
    if name in _RESERVED:
        raise ValueError(f"{what} {name!r} is a C++ keyword or a namespace name; choose another")
    if name.startswith("__") or (name.startswith("_") and name[1:2].isupper()):
        raise ValueError(
            f"{what} {name!r} is reserved in C++ (starts with __ or _ and a capital); drop the _"
        )
    return name


def check_count(value: object, what: str, minimum: int = 1) -> int:
    """Returns `value` as an int if it is an integer >= `minimum` (bool is not an integer here).

    Raises:
        TypeError: not an integer (floats are rejected: sizes and strides are exact).
        ValueError: below `minimum`.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got bool {value!r}")
    try:
        n = operator.index(cast(SupportsIndex, value))  # numpy integers are fine; floats are not
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None
    if n < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {n}")
    return n
