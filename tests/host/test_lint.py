"""STYLE D6: ruff check (line length included) and ruff format pass on the Python sources.

Runs the same commands as CLAUDE.md from the repository root, so the host suite (what CI runs)
fails on a lint or formatting error. ruff comes with the `test` extra; without it the test skips.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["spio", "tests", "benchmarks", "scripts"]


@pytest.mark.parametrize(
    ("command", "fix"),
    [
        (["check"], "`ruff check --fix` fixes some; wrap long lines by hand"),
        (["format", "--check"], "`ruff format " + " ".join(PATHS) + "` rewrites them"),
    ],
    ids=["check", "format"],
)
def test_ruff(command, fix):
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed: pip install -e '.[test]' brings it")
    cmd = [sys.executable, "-m", "ruff", *command, *PATHS]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (
        f"`ruff {' '.join(command)}` (run in {ROOT}, [tool.ruff] of pyproject.toml) exited "
        f"{out.returncode}; {fix}:\n{out.stdout}{out.stderr}"
    )
