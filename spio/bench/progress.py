"""Progress bars of the benchmarks' long loops (grid points, config sweeps).

One rule for all of them: a tqdm bar on stderr unless SPIO_PROGRESS=0 (logs of scripted runs),
so the tables on stdout stay clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from spio.settings import settings

T = TypeVar("T")


def progress(items: Sequence[T], desc: str, unit: str, *, leave: bool = True) -> Iterable[T]:
    """`items` behind a progress bar (`desc`, counted in `unit`s); `items` itself when
    SPIO_PROGRESS=0 or tqdm is not importable. `leave=False` erases the bar when the loop ends
    (for inner loops whose results are printed after them)."""
    if not settings().progress:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, unit=unit, leave=leave)
