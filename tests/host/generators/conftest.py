"""Helpers for generator tests: pick one declaration out of a generated header."""

import re

import pytest


def declaration(header: str, name: str) -> str:
    """The declaration of `name` in `header` (struct, using, constexpr or #define), on one line."""
    pattern = re.compile(
        rf"^(?:struct {name} :.*$|(?:using {name} =|constexpr [\w ]+ {name} =)[^;]*;"
        rf"|#define {name}\b.*$)",
        re.M,
    )
    found = [m.group(0) for m in pattern.finditer(header)]
    if len(found) != 1:
        raise AssertionError(f"expected one declaration of {name}, found {len(found)}:\n{header}")
    return re.sub(r"<\s+", "<", re.sub(r"\s*\n\s*", " ", found[0]))


@pytest.fixture
def decl():
    return declaration
