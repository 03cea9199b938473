"""`spio.tune` depends downward only: never on the benchmarks, the CLI, the ops or the layers.

Timing lives in `spio.timing`, below both `spio.bench` and `spio.tune` (docs/architecture.md).
Checked on the source, imports inside functions included, since most of them are lazy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spio.tune

TUNE_DIR = Path(spio.tune.__file__).resolve().parent
FORBIDDEN = ("spio.bench", "spio.cli", "spio.functional", "spio.layers")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("path", sorted(TUNE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_tune_does_not_import_upward(path):
    bad = [m for m in _imports(path) if m.startswith(FORBIDDEN)]
    assert not bad, (
        f"spio/tune/{path.name} imports {sorted(set(bad))}; spio.tune sits below the benchmarks, "
        "the ops and the CLI (time GPU work with spio.timing)"
    )


def test_the_checker_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from spio.bench.timing import bench\n    import spio.layers\n")
    assert _imports(f) == ["spio.bench.timing", "spio.bench.timing.bench", "spio.layers"]


def test_bench_timing_is_the_shared_timing():
    import spio.bench.timing as old
    import spio.timing as new

    assert (old.bench, old.Timing, old.copy_bandwidth_gbps) == (
        new.bench,
        new.Timing,
        new.copy_bandwidth_gbps,
    )
