"""Option types of the benchmarks' command lines: bounded integers and comma-separated choices.

Each is an argparse `type=`: a bad value is a usage error (exit 2) whose message says the rule,
instead of argparse's "invalid int value".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path


def bounded_int(low: int, high: int | None = None, why: str = "") -> Callable[[str], int]:
    """An int in low..high (no upper bound when high is None); `why` explains the bounds."""
    rule = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
    reason = f" ({why})" if why else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {rule}{reason}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not {rule}{reason}")
        return value

    return parse


def choice_list(valid: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma-separated, non-empty list of names from `valid` (duplicates dropped, order kept)."""

    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in valid]
        if not names or unknown:
            what = f"unknown {unknown}" if unknown else "empty"
            raise argparse.ArgumentTypeError(
                f"{what}; give a comma-separated list of {', '.join(valid)}"
            )
        return names

    return parse


def name_list(text: str) -> list[str]:
    """A comma-separated, non-empty list of names (checked later against what is installed)."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError("empty; give a comma-separated list of names")
    return names


def output_file(text: str) -> Path:
    """A file to write (its folder is created); an existing directory is refused."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    return path
