"""README.md's "Using spio" snippet on a GPU: the ops run spio's kernels and the training step
runs the transformed model under fp16 autocast with a GradScaler."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_snippet_runs_on_the_gpu():
    text = README.read_text()
    m = re.search(r"^## Using spio\n\n```python\n(.*?)^```", text, re.M | re.S)
    assert m, "README.md has no ```python block right under '## Using spio'"
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(m.group(1), str(README), "exec"), scope)
    assert scope["device"] == "cuda"
    assert scope["c"].is_cuda and scope["z"].is_contiguous(memory_format=torch.channels_last)
    assert type(scope["model"][0]).__name__ == "Conv2dGw8", scope["model"]
    assert torch.isfinite(scope["loss"]), out.getvalue()
