"""Every Markdown file the docs, the code and the scripts name exists in the repository.

A name such as `spio bench --help`'s "Grid: ... (BASELINE.md)" once pointed at a file that lived
outside the repo; a reader had nothing to open. A name resolves against the repository root or
the naming file's folder (Markdown links are relative to it).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMING = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "spio").rglob("*.py"),
        *(ROOT / "scripts").glob("*.sh"),
        *(ROOT / "benchmarks").rglob("*.py"),
    ]
)
# Named before they exist, each with who adds it; the test fails once one is no longer named.
PENDING: dict[str, str] = {}
# A path to a .md file, not part of a longer word or path (`../shared/X.md` is matched whole).
MD_NAME = re.compile(r"(?<![\w/.-])(?:[\w.-]+/)*[\w.-]+\.md\b")


def _names(path: Path) -> list[str]:
    return [m.group(0) for m in MD_NAME.finditer(path.read_text(encoding="utf-8"))]


def test_files_are_found():
    assert ROOT / "README.md" in NAMING and ROOT / "docs" / "baseline.md" in NAMING


def _resolves(path: Path, name: str) -> bool:
    """name is a file of the repo, from its root or from the folder of path (which names it)."""
    beside = (path.parent / name).resolve()
    return (ROOT / name).is_file() or (beside.is_file() and beside.is_relative_to(ROOT))


def test_named_markdown_files_exist():
    named = {(path, name) for path in NAMING for name in _names(path)}
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path, name in sorted(named)
        if not _resolves(path, name) and name not in PENDING
    ]
    assert not missing, f"names of Markdown files that the repo does not hold: {missing}"
    stale = set(PENDING) - {name for path, name in named if not _resolves(path, name)}
    assert not stale, f"no longer missing (or no longer named), drop from PENDING: {stale}"
