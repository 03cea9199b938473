"""`Macro(value)`: a preprocessor definition, `#define NAME value` (for `#if` and pragmas)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spio.generators.spec import Names, Section


@dataclass(frozen=True, slots=True)
class Macro:
    """`#define NAME value`. Prefer Constant; use a macro only where the preprocessor needs it.

    Attributes:
        value: an int, a bool (emitted 1 or 0) or one line of text emitted as written.
    """

    value: int | bool | str
    section: ClassVar[Section] = "constants"

    def __post_init__(self) -> None:
        if isinstance(self.value, str):
            if "\n" in self.value or "\r" in self.value:
                raise ValueError("Macro value must be one line; split it into several macros")
        elif not isinstance(self.value, int):
            raise TypeError(
                f"Macro value must be an int, bool or str, got {type(self.value).__name__} "
                f"{self.value!r}"
            )

    def deps(self) -> tuple:
        return ()

    def emit(self, name: str, names: Names) -> str:
        return f"#define {name} {self.inline(names)}".rstrip()

    def inline(self, names: Names) -> str:
        if isinstance(self.value, bool):
            return "1" if self.value else "0"
        return str(self.value)
