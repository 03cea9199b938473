"""The import rules of CLAUDE.md: lower layers never import torch; `import spio` has no side
effects."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize(
    "module",
    ["spio", "spio.generators", "spio.compiler", "spio.cuda", "spio.settings", "spio.errors"],
)
def test_lower_layers_do_not_import_torch(module):
    assert _run(f"import {module}, sys; print('torch' in sys.modules)") == "False"


def test_import_spio_has_no_side_effects():
    # No driver loaded, no NVRTC located, no spio env read into module constants.
    code = (
        "import os, sys; before = set(sys.modules); import spio, spio.cuda, spio.compiler;"
        "maps = open('/proc/self/maps').read();"
        "print('libcuda' in maps, 'libnvrtc' in maps)"
    )
    assert _run(code) == "False False"
