"""README.md's "Using spio" snippet runs as written, on the CPU here (the ops' PyTorch fallback
and float32 training without autocast); tests/gpu/test_readme.py runs it on a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def using_spio_snippet() -> str:
    """The python block under README's "## Using spio" heading."""
    m = re.search(r"^## Using spio\n\n```python\n(.*?)^```", README.read_text(), re.M | re.S)
    assert m, "README.md has no ```python block right under '## Using spio'"
    return m.group(1)


def test_readme_snippet_runs_on_the_cpu(tmp_path: Path):
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the snippet takes its CPU path here too.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "SPIO_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", using_spio_snippet()],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "replaced 1 modules" in out.stdout and "-> Conv2dGw8" in out.stdout, out.stdout
    assert re.search(r"^loss \d+\.\d{3}$", out.stdout, re.M), out.stdout
