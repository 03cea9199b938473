"""The on-disk cache of compiled kernels: key -> cubin (or PTX), atomic and verified.

Layout under the root (`settings().cache_dir` for the default instance):

    kernels/<key[:2]>/<key>.cubin      the entry: 48-byte header + payload (.ptx for PTX)
    kernels/<key[:2]>/<key>.cu .h .options     with SPIO_CACHE_SAVE_SOURCE=1
    kernels/<key[:2]>/<key>.sass       with SPIO_DISASM=1, when cuobjdump/nvdisasm exists
    locks/<key[:2]>.lock               held while one process compiles a key of that stripe

Entry header: MAGIC (8 bytes) | sha256(payload) (32) | len(payload) (8, little-endian).
A load checks all three; anything else (truncated, corrupted, foreign file) is a miss, and the
bad file is removed so the recompile can replace it. Writes go to a temp file in the same dir and
are published with `os.replace`, so a reader sees either no entry or a whole one, and two
processes writing the same key race harmlessly (both write identical bytes). Reads never lock.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spio.logs import logger
from spio.settings import settings

# Bump when the key recipe, the entry format or the compile pipeline changes meaning.
FORMAT_VERSION = "spio-nvrtc-cache-1"
MAGIC = b"SPIOBIN1"
_HEADER = struct.Struct("<8s32sQ")

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"


@functools.cache
def include_checksum(root: Path = INCLUDE_DIR) -> str:
    """sha256 over the relative path and bytes of every file under `root` (computed once)."""
    h = hashlib.sha256()
    if root.is_dir():
        for p in sorted(q for q in root.rglob("*") if q.is_file()):
            rel = p.relative_to(root).as_posix()
            if "__pycache__" in rel:
                continue
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


_MAX_FINGERPRINT_FILES = 20_000


def tree_fingerprint(root: Path) -> str:
    """sha256 over (relative path, size, mtime) of every file under `root`: cheap (no reads).

    Keys the headers a compile may include from directories spio does not own (the CUDA headers,
    the caller's -I dirs): an edited or reinstalled header changes the key. A false change (a
    touched file) costs a recompile, never a stale binary. Trees over 20,000 files are keyed on
    their path alone, with a warning.
    """
    h = hashlib.sha256(str(root).encode())
    if not root.is_dir():
        return h.hexdigest()
    files = []
    for dirpath, _, names in os.walk(root):
        files += [os.path.join(dirpath, n) for n in names]
        if len(files) > _MAX_FINGERPRINT_FILES:
            logger("spio.compiler").warning(
                "spio cache: %s has over %d files; keying on its path only",
                root,
                _MAX_FINGERPRINT_FILES,
            )
            return h.hexdigest()
    for f in sorted(files):
        try:
            st = os.stat(f)
        except OSError:
            continue
        h.update(f"{os.path.relpath(f, root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


@functools.cache
def fixed_tree_fingerprint(root: Path) -> str:
    """`tree_fingerprint` computed once per process, for trees that do not change while spio
    runs (the CUDA headers of the NVRTC in use)."""
    return tree_fingerprint(root)


def cache_key(
    *,
    nvrtc_version: tuple[int, int],
    arch: str,
    options: Sequence[str],
    source: str,
    name: str,
    generated: str | None,
    headers: Mapping[str, str] | None,
    ptx: bool,
    include_sum: str,
) -> str:
    """sha256 over everything that can change the compiled image.

    Options keep their order (-I and -D order can change the result); in-memory headers are
    sorted by name (their order cannot). Fields are length-prefixed so no two different inputs
    can concatenate to the same bytes.
    """
    parts: list[str] = [
        FORMAT_VERSION,
        "nvrtc={}.{}".format(*nvrtc_version),
        f"arch={arch}",
        f"ptx={int(bool(ptx))}",
        f"include={include_sum}",
        f"name={name}",
        f"options={len(options)}",
        *options,
        "source",
        source,
        "generated",
        generated if generated is not None else "\0none",
        f"headers={len(headers or {})}",
    ]
    for hname, text in sorted((headers or {}).items()):
        parts += [hname, text]
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(struct.pack("<Q", len(data)) + data)
    return h.hexdigest()


def encode_entry(payload: bytes) -> bytes:
    """Header (magic, sha256, length) followed by the payload."""
    return _HEADER.pack(MAGIC, hashlib.sha256(payload).digest(), len(payload)) + payload


def decode_entry(data: bytes) -> bytes | None:
    """The payload if `data` is a whole, uncorrupted entry; otherwise None."""
    if len(data) < _HEADER.size:
        return None
    magic, digest, length = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of one DiskCache in this process."""

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    corrupt: int = 0  # entries found damaged and discarded (each also counts as a miss)


class DiskCache:
    """key -> compiled image on disk. Build one per root; tests use their own under tmp_path."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._lock = threading.Lock()
        self._counts = {"hits": 0, "misses": 0, "compiles": 0, "corrupt": 0}

    def __repr__(self) -> str:
        return f"DiskCache({str(self.root)!r})"

    def path(self, key: str, ptx: bool = False) -> Path:
        """Where the entry of `key` lives (whether or not it exists)."""
        return self.root / "kernels" / key[:2] / (key + (".ptx" if ptx else ".cubin"))

    def lock_path(self, key: str) -> Path:
        """The lock file a process holds while compiling `key`.

        Striped by the key's first two hex digits: at most 256 lock files ever exist (they are
        never deleted: unlinking a lock file others may wait on is racy), and two processes
        compiling different kernels rarely share a stripe.
        """
        return self.root / "locks" / f"{key[:2]}.lock"

    def get(self, key: str, ptx: bool = False, *, count: bool = True) -> bytes | None:
        """The verified payload, or None (missing or damaged: a damaged file is removed).

        `count=False` leaves hits/misses alone (a re-check under the compile lock).
        """
        path = self.path(key, ptx)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._count("misses", count)
            return None
        except OSError as e:
            logger("spio.compiler").warning("spio cache: cannot read %s (%s); recompiling", path, e)
            self._count("misses", count)
            return None
        payload = decode_entry(data)
        if payload is None:
            logger("spio.compiler").warning(
                "spio cache: %s is truncated or corrupted; discarding it", path
            )
            self._count("corrupt")
            self._count("misses", count)
            try:
                path.unlink()
            except OSError:
                pass  # another process may have replaced or removed it already
            return None
        self._count("hits", count)
        return payload

    def put(self, key: str, payload: bytes, ptx: bool = False) -> Path:
        """Writes an entry atomically; returns its path."""
        path = self.path(key, ptx)
        atomic_write(path, encode_entry(payload))
        return path

    def put_text(self, key: str, suffix: str, text: str) -> Path:
        """Writes a debug file `<key><suffix>` beside the entry, atomically."""
        path = self.path(key).with_suffix(suffix)
        atomic_write(path, text.encode())
        return path

    def record_compile(self) -> None:
        """Counts one NVRTC compile done on behalf of this cache."""
        self._count("compiles")

    def stats(self) -> CacheStats:
        """Hits, misses, compiles and corrupt entries seen by this object in this process."""
        with self._lock:
            return CacheStats(**self._counts)

    def reset_stats(self) -> None:
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0

    def _count(self, what: str, really: bool = True) -> None:
        if really:
            with self._lock:
                self._counts[what] += 1


def atomic_write(path: Path, data: bytes) -> None:
    """Writes `data` to `path` through a temp file in the same dir and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@functools.cache
def _cache_at(root: Path) -> DiskCache:
    return DiskCache(root)


def default_cache() -> DiskCache | None:
    """The cache under `settings().cache_dir` (one object per dir), or None with
    SPIO_NO_DISK_CACHE=1."""
    s = settings()
    if s.no_disk_cache:
        return None
    return _cache_at(Path(s.cache_dir))
