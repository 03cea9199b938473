"""The import graph between spio's top-level packages and modules: no cycle, and every import
points down the documented order (CLAUDE.md "Layout", docs/architecture.md "Pipeline").

Read from the source, nothing imported: every `.py` file under spio/ with `ast` (imports inside
functions and `if TYPE_CHECKING:` blocks included, relative imports resolved, and
`importlib.import_module` of a literal name), and the `import`/`cimport` lines of the Cython
`.pyx`/`.pxd` files. A unit is a top-level package (`spio.kernels`) or module (`spio.settings`);
imports within a unit are not edges.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SPIO = Path(__file__).resolve().parents[2] / "spio"

# Lowest first. A unit imports only units of a lower rank; units of one rank import neither each
# other. `errors`, `settings` and `logs` are importable from everywhere and import nothing of spio
# above them. `timing` (GPU timing for tune and bench) and `testing` (test oracles: tolerances,
# assert_close) are torch helpers just above the driver. `bench` and `cli` are the top: the
# benchmarks may time the ops and layers as users call them, and the CLI runs everything.
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("settings",),
    ("logs",),
    ("generators",),
    ("compiler",),
    ("cuda",),
    ("timing", "testing"),
    ("kernels",),
    ("tune",),
    ("select",),
    ("functional",),
    ("layers",),
    ("bench",),
    ("cli",),
]
RANK = {unit: i for i, units in enumerate(LAYERS) for unit in units}
# spio/__init__.py: a lazy facade. It imports nothing of spio statically (its public names load
# on first attribute access), so any unit may `import spio` (for `__version__`).
FACADE = "spio"


@dataclass(frozen=True)
class Edge:
    """One import of another unit: `where` is 'spio/<file>:<line>'."""

    src: str
    dst: str
    name: str
    where: str

    def __str__(self) -> str:
        return f"{self.where}: {self.src} imports {self.name}"


def unit_of(path: Path, root: Path) -> str:
    """The unit a file of the package at `root` belongs to ('kernels', 'settings', 'spio')."""
    parts = path.relative_to(root).parts
    if parts == ("__init__.py",):
        return FACADE
    return parts[0].split(".")[0] if len(parts) == 1 else parts[0]


def _package_of(path: Path, root: Path) -> list[str]:
    """The package a module of `root` lives in, as parts: spio/kernels/x.py -> spio, kernels."""
    return ["spio", *path.relative_to(root).parent.parts]


def _absolute(module: str | None, level: int, path: Path, root: Path) -> str:
    if level == 0:
        return module or ""
    package = _package_of(path, root)
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imported(path: Path, root: Path) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of every import of spio in a file; for `from m import a`, 'm.a' (which
    is a module when `a` is one, and a name in `m` otherwise)."""
    text = path.read_text()
    if path.suffix in (".pyx", ".pxd"):
        pattern = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+c?import\s+(.*)|c?import\s+(.*))$")
        for line, source in enumerate(text.splitlines(), 1):
            m = pattern.match(source)
            if m is None:
                continue
            if m[4] is not None:
                for name in m[4].split(","):
                    yield name.split(" as ")[0].strip(), line
            else:
                base = _absolute(m[2] or None, len(m[1]), path, root)
                names = [n.split(" as ")[0].strip(" ()\\") for n in m[3].split(",")]
                yield from ((f"{base}.{n}" if n else base, line) for n in names)
        return
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, path, root)
            yield from ((f"{base}.{a.name}", node.lineno) for a in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value, node.lineno
            elif isinstance(arg, ast.JoinedStr) and arg.values:  # f"spio.bench.{family}"
                head = arg.values[0]
                if isinstance(head, ast.Constant) and isinstance(head.value, str):
                    yield head.value.rstrip("."), node.lineno


def _is_import_module(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("import_module", "__import__")


def _target(name: str, root: Path) -> str | None:
    """The unit `name` refers to, or None outside spio. 'spio.kernels.x' -> 'kernels';
    'spio.settings' -> 'settings'; 'spio' or 'spio.__version__' -> the facade."""
    parts = name.split(".")
    if parts[0] != "spio":
        return None
    if len(parts) == 1:
        return FACADE
    top = parts[1]
    if top in RANK or (root / top).is_dir() or (root / f"{top}.py").is_file():
        return top
    return FACADE  # a name of spio/__init__.py, e.g. `from spio import __version__`


def source_files(root: Path) -> list[Path]:
    return sorted(p for ext in ("*.py", "*.pyx", "*.pxd") for p in root.rglob(ext))


def edges(root: Path) -> list[Edge]:
    """Every import from one unit of the package at `root` into another."""
    out = []
    for path in source_files(root):
        src = unit_of(path, root)
        for name, line in _imported(path, root):
            dst = _target(name, root)
            if dst is not None and dst != src:
                where = f"spio/{path.relative_to(root).as_posix()}:{line}"
                out.append(Edge(src, dst, name, where))
    return sorted(out, key=lambda e: (e.where.rsplit(":", 1)[0], int(e.where.rsplit(":", 1)[1])))


def cycles(found: list[Edge]) -> list[list[str]]:
    """The strongly connected groups of more than one unit (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in found:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def cycle_report(found: list[Edge]) -> str:
    """'' when the unit graph is acyclic; else each cycle, one line per pair of units: every
    import (file:line) of a pair against LAYERS, the first import of the others."""
    lines = []
    for group in cycles(found):
        lines.append(f"cycle between {', '.join(group)}:")
        pairs: dict[tuple[str, str], list[Edge]] = {}
        for e in found:
            if e.src in group and e.dst in group:
                pairs.setdefault((e.src, e.dst), []).append(e)
        for (src, dst), among in sorted(pairs.items()):
            if src in RANK and dst in RANK and RANK[dst] >= RANK[src]:
                lines += [f"  {src} -> {dst} (against the import order): {e}" for e in among]
            else:
                more = f" (+{len(among) - 1} more)" if len(among) > 1 else ""
                lines.append(f"  {src} -> {dst}: {among[0]}{more}")
    return "\n".join(lines)


def direction_report(found: list[Edge], root: Path) -> str:
    """'' when every import points down LAYERS; else each offending import, file and line."""
    lines = []
    units = {unit_of(p, root) for p in source_files(root)}
    unplaced = sorted(units - set(RANK) - {FACADE})
    if unplaced:
        lines.append(
            f"units not placed in LAYERS of {Path(__file__).name}: {unplaced}; add each at the "
            "rank its imports allow and document it in CLAUDE.md and docs/architecture.md"
        )
    for e in found:
        if e.src == FACADE:
            lines.append(f"{e}: spio/__init__.py must import nothing of spio (load it lazily)")
        elif e.dst != FACADE and e.src in RANK and e.dst in RANK and RANK[e.dst] >= RANK[e.src]:
            how = "the same rank as" if RANK[e.dst] == RANK[e.src] else "above"
            lines.append(f"{e}: {e.dst} is {how} {e.src} in the import order")
    return "\n".join(lines)


# -- the package --------------------------------------------------------------------------------


def test_no_cycle_between_packages():
    report = cycle_report(edges(SPIO))
    if report:
        pytest.fail(f"imports between spio's packages form a cycle:\n{report}", pytrace=False)


def test_imports_point_down_the_documented_order():
    report = direction_report(edges(SPIO), SPIO)
    if report:
        order = " -> ".join("/".join(units) for units in LAYERS)
        pytest.fail(f"imports against the order {order}:\n{report}", pytrace=False)


def test_kernels_do_not_import_tune_or_select():
    bad = [str(e) for e in edges(SPIO) if e.src == "kernels" and e.dst in ("tune", "select")]
    if bad:
        pytest.fail("spio.kernels imports the layers above it:\n" + "\n".join(bad), pytrace=False)


# -- the checker --------------------------------------------------------------------------------


def test_the_checker_sees_every_kind_of_import(tmp_path):
    root = tmp_path / "spio"
    (root / "kernels").mkdir(parents=True)
    (root / "cuda").mkdir()
    (root / "__init__.py").write_text("")
    (root / "settings.py").write_text("")
    (root / "kernels" / "__init__.py").write_text("")
    (root / "kernels" / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from spio.tune.model import PerfModel\n"
        "def f():\n"
        "    import spio.select\n"
        "    from .. import settings\n"
        "    from . import loader\n"
        "    import importlib\n"
        "    importlib.import_module(f'spio.bench.{f}')\n"
        "    from spio import __version__\n"
    )
    (root / "cuda" / "x.pyx").write_text(
        "from libc.stdint cimport uint64_t\nfrom spio.errors import CudaDriverError\n"
        "from .driver cimport (\n    CUstream,\n)\ncimport spio.layers.y\n"
    )
    got = {(e.src, e.dst, e.where) for e in edges(root)}
    assert got == {
        ("kernels", "tune", "spio/kernels/m.py:3"),
        ("kernels", "select", "spio/kernels/m.py:5"),
        ("kernels", "settings", "spio/kernels/m.py:6"),
        ("kernels", "bench", "spio/kernels/m.py:9"),
        ("kernels", FACADE, "spio/kernels/m.py:10"),
        ("cuda", "errors", "spio/cuda/x.pyx:2"),
        ("cuda", "layers", "spio/cuda/x.pyx:6"),
    }


def test_a_planted_cycle_fails_naming_the_file_and_line(tmp_path):
    root = tmp_path / "spio"
    shutil.copytree(SPIO, root, ignore=shutil.ignore_patterns("*.so", "__pycache__", "models"))
    loader = root / "kernels" / "loader.py"
    lines = loader.read_text().splitlines()
    line = len(lines) + 2
    loader.write_text("\n".join([*lines, "", "def _planted():", "    import spio.select", ""]))
    found = edges(root)
    report = cycle_report(found)
    assert "cycle between" in report and "kernels" in report and "select" in report, report
    planted = f"spio/kernels/loader.py:{line + 1}: kernels imports spio.select"
    assert f"kernels -> select (against the import order): {planted}" in report, report
    direction = direction_report(found, root)
    assert f"spio/kernels/loader.py:{line + 1}: kernels imports spio.select: select is above" in (
        direction
    )


def test_an_unplaced_package_is_named(tmp_path):
    root = tmp_path / "spio"
    (root / "newpkg").mkdir(parents=True)
    (root / "newpkg" / "__init__.py").write_text("import spio.settings\n")
    assert "units not placed in LAYERS" in direction_report(edges(root), root)
    assert "'newpkg'" in direction_report(edges(root), root)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": "b", "b": "c"}, []),
        ({"a": "b", "b": "a"}, [["a", "b"]]),
        ({"a": "b", "b": "c", "c": "a", "d": "a"}, [["a", "b", "c"]]),
    ],
)
def test_cycles(graph, expected):
    found = [Edge(s, d, f"spio.{d}", "x:1") for s, d in graph.items()]
    assert cycles(found) == expected
