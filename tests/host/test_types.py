"""STYLE D6: the type checker passes on the package (mypy; files and options in pyproject.toml).

Runs `python -m mypy` from the repository root, as a developer would, so the host suite (what CI
runs) fails on a type error. mypy comes with the `test` extra; without it the test skips.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_reports_no_errors():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]' brings it")
    # Incremental: .mypy_cache/ at the root (mypy git-ignores it); a cold run takes ~15-25 s.
    out = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (
        f"`python -m mypy` (run in {ROOT}, [tool.mypy] of pyproject.toml) exited "
        f"{out.returncode}; fix the errors it lists (a `# type: ignore[code]` only where a "
        f"library's types are wrong, with the reason):\n{out.stdout}{out.stderr}"
    )
    assert "Success" in out.stdout, out.stdout
