"""Measured samples, one JSON object per line: append-only, resumable, readable. A path ending in
`.gz` is gzip-compressed (each append adds a gzip member; the repository's datasets are stored so,
about a tenth of the size), any other plain text."""

from __future__ import annotations

import gzip
import json
import sys
import zlib
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
    lines = [
        json.dumps({"format": FORMAT_VERSION, **s.__dict__}, sort_keys=True) + "\n" for s in samples
    ]
    if not lines:
        return 0
    if path.suffix == ".gz":
        _mend_cut_gzip(path)
        with path.open("ab") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as f:
            f.write("".join(lines).encode())
    else:
        with path.open("a") as f:
            f.write("".join(lines))
            f.flush()
    return len(lines)


def _mend_cut_gzip(path: Path) -> None:
    """A gzipped dataset cut inside its last member (an interrupted append) is rewritten with the
    whole rows before the cut: a member appended after the cut would not be read back. A file
    that is not gzip at all raises (`_lines`), and is left as it is."""
    if not path.exists():
        return
    try:
        gzip.decompress(path.read_bytes())
    except EOFError:
        text = "".join(line + "\n" for line in _lines(path) if _whole(line))
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
        print(f"spio: {path} was cut short; rewritten with its whole rows", file=sys.stderr)
    except (gzip.BadGzipFile, zlib.error) as e:
        raise _not_gzip(path, e) from e


def _whole(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def read(path: Path, kernel: str | None = None, device: str | None = None) -> list[Sample]:
    """Reads samples, skipping a truncated last line (an interrupted collect) and other formats."""
    return list(_iter(path, kernel, device))


def _iter(path: Path, kernel: str | None, device: str | None) -> Iterator[Sample]:
    if not path.exists():
        return
    for line in _lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by an interrupted run
        if row.pop("format", None) not in READABLE_FORMATS:
            continue
        s = Sample(**row)
        if (kernel is None or s.kernel == kernel) and (device is None or s.device == device):
            yield s


def _lines(path: Path) -> list[str]:
    """The file's lines; of a gzipped file cut short (an interrupted append), those before
    the cut."""
    if path.suffix != ".gz":
        return path.read_text().splitlines()
    lines: list[str] = []
    with gzip.open(path, "rt") as f:
        try:
            for line in f:
                lines.append(line.rstrip("\n"))
        except EOFError:
            pass  # cut short: the last, partial line is dropped as undecodable JSON
        except (gzip.BadGzipFile, zlib.error) as e:
            raise _not_gzip(path, e) from e
    return lines


def _not_gzip(path: Path, e: Exception) -> ValueError:
    return ValueError(
        f"{path}: a dataset named .gz must be gzip-compressed, and this one is not readable as "
        f"gzip ({e}); rename a plain-text dataset to .jsonl, or gzip it"
    )
