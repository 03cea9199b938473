"""Benchmark output: an aligned table on stdout, a CSV file, and a PNG plot with a roofline."""

from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Callable, Sequence
from pathlib import Path


def print_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """Formats rows as an aligned text table (returned and printed)."""
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())

    def fmt(v):
        return (
            f"{v:.3g}"
            if isinstance(v, float) and abs(v) < 100
            else (f"{v:.0f}" if isinstance(v, float) else str(v))
        )

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def write_csv(rows: Sequence[dict], path: Path) -> None:
    """Writes rows to path atomically (a temporary file renamed over it), so a run killed while
    writing leaves the previous complete file. The columns are every row's keys in first-seen
    order; a row without one leaves its cell empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def plotting_unavailable() -> str | None:
    """Why `--plot` cannot write a PNG here (matplotlib, the `bench` extra, is missing), or None.
    The benchmarks check it when parsing their arguments, before measuring anything."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return (
            "--plot needs matplotlib, which is not installed here: pip install 'spio[bench]' "
            "(or pip install matplotlib), or leave out --plot"
        )
    return None


def parse_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] | None = None,
) -> argparse.Namespace:
    """A benchmark's `parser.parse_args(argv)`, then its own `check` of option combinations
    (which calls `parser.error`), then a refusal of `--plot` (usage error, exit 2) when it could
    not be honoured, so a long run does not end without its plot."""
    args = parser.parse_args(argv)
    if check is not None:
        check(parser, args)
    why = plotting_unavailable() if getattr(args, "plot", None) else None
    if why:
        parser.error(why)
    return args


def plot(
    rows: Sequence[dict],
    x: str,
    series: Sequence[str],
    path: Path,
    *,
    ylabel: str,
    roofline: float | None = None,
    roofline_label: str = "copy bandwidth",
    title: str = "",
) -> bool:
    """Grouped bars of `series` per row labelled by `x`, with an optional horizontal roofline.

    Returns False (and writes nothing) when matplotlib is not installed; the benchmarks refuse
    `--plot` up front in that case (`plotting_unavailable`).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [str(r[x]) for r in rows]
    n = len(series)
    width = 0.8 / max(n, 1)
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows) * n), 5))
    for i, s in enumerate(series):
        ax.bar(
            [j + i * width for j in range(len(rows))], [float(r[s]) for r in rows], width, label=s
        )
    if roofline:
        ax.axhline(roofline, color="k", linestyle="--", label=roofline_label)
    ax.set_xticks([j + width * (n - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels(labels, rotation=75, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
