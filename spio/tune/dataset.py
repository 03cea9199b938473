"""Measured samples, one JSON object per line: append-only, resumable, readable."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 2  # 2 added `timings`; older spio skips these rows rather than misread them
READABLE_FORMATS = (1, 2)  # format 1 rows read with timings=1


@dataclass(frozen=True)
class Sample:
    """One measurement: a config of a kernel family on a layer shape, timed on a named GPU."""

    kernel: str
    device: str  # DeviceAttributes.name
    arch: str  # "sm_90"
    params: dict[str, Any]
    config: dict[str, Any]
    latency_us: float
    timings: int = 1  # medians taken, latency_us their min: 2 for the rows collect re-timed

    def shape_key(self) -> str:
        """Identifies the layer shape (params), for splitting train/test by shape."""
        return json.dumps(self.params, sort_keys=True)

    def pair_key(self) -> tuple[str, str, str, str]:
        return (self.kernel, self.device, self.shape_key(), json.dumps(self.config, sort_keys=True))


def append(path: Path, samples: Iterable[Sample]) -> int:
    """Appends samples (one line each, flushed) and returns how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a") as f:
        for s in samples:
            row = {"format": FORMAT_VERSION, **s.__dict__}
            f.write(json.dumps(row, sort_keys=True) + "\n")
            n += 1
        f.flush()
    return n


def read(path: Path, kernel: str | None = None, device: str | None = None) -> list[Sample]:
    """Reads samples, skipping a truncated last line (an interrupted collect) and other formats."""
    return list(_iter(path, kernel, device))


def _iter(path: Path, kernel: str | None, device: str | None) -> Iterator[Sample]:
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by an interrupted run
        if row.pop("format", None) not in READABLE_FORMATS:
            continue
        s = Sample(**row)
        if (kernel is None or s.kernel == kernel) and (device is None or s.device == device):
            yield s
