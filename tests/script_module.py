"""Loading a script of benchmarks/ or scripts/ as a module for host tests, and unloading it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> Iterator[ModuleType]:
    """Yields the script at `path` imported under its file name, then removes it from
    sys.modules; a module-scoped fixture does `yield from load_script(PATH)`."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        del sys.modules[spec.name]
