"""The pick store: selections persisted on disk, per kernel family and GPU name.

Under `<cache dir>/selections/` (or `store_dir`):
- `<family>__<gpu>.json`: autotune winners, `{"format": 1, "bases": {basis: {params: config}}}`
  (the basis, `spio.select.basis.winner_basis`, a digest of the code the winners were timed on:
  a kernel change re-measures them; the flat `{params: config}` files of earlier versions, keyed
  by the layer alone, are ignored with one warning and replaced by the next winner);
- `<family>__<gpu>.picks.json`: model and heuristic picks, `{"format": 1, "bases": {basis:
  {params: {"config": ..., "source": "model" | "heuristic"}}}}` (the basis,
  `spio.select.basis.basis`, is a digest of what a pick depends on).
Each file keeps the `MAX_BASES` most recently written bases.
Params and configs are the compact JSON of their fields (`spio.tune.features.to_dict`), params
with sorted keys; `<gpu>` is the device name's slug (`spio.tune.store.slug`).

Writes take a file lock (`<file>.lock`, flock) and replace the file atomically (temporary file +
rename), so concurrent processes lose no entry and a reader never sees half a file. A parsed file
is kept in memory until the file changes (its inode, size and mtime: every write replaces it). An
unreadable file is ignored with one warning per file and rewritten by the next pick; an entry
naming a config that is no longer one of the family's configs for its params is ignored.
What to store and when is the selector's business (`spio.select.selector`), not this module's.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spio.logs import logger
from spio.settings import settings

if TYPE_CHECKING:
    from spio.kernels.kernel_def import KernelDef

PICKS_FORMAT = 1
MAX_BASES = 4  # per picks file: a few models or spio installs sharing one cache dir
SOURCES = ("model", "heuristic")  # what a persisted pick may come from


class PickStore:
    """Autotune winners and model/heuristic picks of every family and GPU, in one directory."""

    def __init__(self, store_dir: Path | None = None) -> None:
        self._store_dir = store_dir
        self._files: dict[Path, tuple[tuple[int, ...], dict]] = {}  # parsed, by _stamp
        self._complained: set[Path] = set()

    def path(self, kdef: KernelDef, device: Any, suffix: str = ".json") -> Path:
        """The file of `kdef`'s winners (".json") or picks (".picks.json") on `device`."""
        from spio.tune.store import slug

        root = self._store_dir or Path(settings().cache_dir) / "selections"
        return root / f"{kdef.name}__{slug(device.name)}{suffix}"

    def winner(
        self, kdef: KernelDef, params: Any, device: Any, basis: str | Callable[[], str]
    ) -> Any | None:
        """The autotune winner persisted for `params` under `basis`, if still a valid config;
        `basis` may be a function, called only when a winners file exists."""
        bases = self._read(self.path(kdef, device), _winners)
        if not bases:
            return None
        entry = bases.get(basis() if callable(basis) else basis, {}).get(_params_key(params))
        return None if entry is None else self._config_from(kdef, params, device, entry)

    def save_winner(
        self, kdef: KernelDef, params: Any, device: Any, basis: str, config: Any
    ) -> None:
        """Persists an autotune winner under `basis` (errors propagate: the caller asked to
        persist)."""
        from spio.kernels.kernel_def import to_dict

        key = _params_key(params)
        self._update(self.path(kdef, device), _winners, _adding(basis, key, to_dict(config)))

    def pick(self, kdef: KernelDef, params: Any, device: Any, basis: str) -> tuple[Any, str] | None:
        """(config, source) of the pick persisted for `params` under `basis`, if still valid."""
        bases = self._read(self.path(kdef, device, ".picks.json"), _picks)
        entry = bases.get(basis, {}).get(_params_key(params))
        if not isinstance(entry, dict) or entry.get("source") not in SOURCES:
            return None
        config = self._config_from(kdef, params, device, entry.get("config"))
        return None if config is None else (config, entry["source"])

    def save_pick(
        self, kdef: KernelDef, params: Any, device: Any, basis: str, config: Any, source: str
    ) -> None:
        """Persists a model or heuristic pick; a failure costs only the next process's time (one
        warning per file)."""
        from spio.kernels.kernel_def import to_dict

        if source not in SOURCES:
            raise ValueError(f"save_pick: source must be one of {SOURCES}, got {source!r}")
        key = _params_key(params)
        entry = {"config": to_dict(config), "source": source}
        path = self.path(kdef, device, ".picks.json")
        try:
            self._update(path, _picks, _adding(basis, key, entry))
        except OSError as e:
            self._complain(path, f"could not persist a selection in {path} ({e})")

    def clear(self) -> None:
        """Forgets the parsed files held in memory (the files stay on disk)."""
        self._files.clear()

    # -- internals --------------------------------------------------------------------------

    def _config_from(self, kdef: KernelDef, params: Any, device: Any, entry: Any) -> Any | None:
        """The config an entry names, if it is still one of the family's configs for params."""
        from spio.kernels.kernel_def import from_dict

        if not isinstance(entry, dict):
            return None
        try:
            config = from_dict(kdef.config_type, entry)
        except (TypeError, ValueError):
            return None  # a config of an older version of the family
        return config if config in kdef.configs(params, device) else None

    def _read(self, path: Path, parse: Callable[[Any], dict]) -> dict:
        """A store file's content, {} when absent or unreadable (warned once per file); parsed
        again only when the file changed (every write replaces it: another inode and mtime)."""
        try:
            st = path.stat()
        except OSError:
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._files.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            content = parse(json.loads(path.read_text()))
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError included
            self._complain(path, f"ignoring the unreadable selection store {path} ({e})")
            content = {}
        self._files[path] = (stamp, content)
        return content

    def _update(self, path: Path, parse: Callable[[Any], dict], change: Callable) -> None:
        """Read-modify-write of a store file under its file lock, replaced atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(path.with_name(path.name + ".lock")):
            content = change(self._read(path, parse))  # re-read if another process wrote it
            text = json.dumps(content, separators=(",", ":"))  # compact: the C encoder
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a cache file is not secret
                st = os.stat(tmp)  # rename keeps inode, size and mtime: what _read compares
                os.replace(tmp, path)
            except BaseException:
                self._files.pop(path, None)
                Path(tmp).unlink(missing_ok=True)
                raise
            self._files[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), parse(content))

    def _complain(self, path: Path, message: str) -> None:
        if path not in self._complained:
            self._complained.add(path)
            logger().warning("spio: %s", message)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (created if absent): `flock`, as filelock takes it on
    POSIX, without importing filelock (~12 ms, a quarter of the 50 ms a process's first selection
    may take on the 2-core development host); filelock itself where there is no fcntl (Windows)."""
    try:
        import fcntl
    except ImportError:
        from filelock import FileLock

        with FileLock(str(path)):
            yield
        return
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released when f closes, whatever happens
        yield


def _params_key(params: Any) -> str:
    """The key of `params` in a store file: its fields as JSON, keys sorted."""
    from spio.kernels.kernel_def import to_dict

    return json.dumps(to_dict(params), sort_keys=True)


def _adding(basis: str, key: str, entry: Any) -> Callable[[dict], dict]:
    """The change that adds `entry` for `key` under `basis` to a file's {basis: {key: entry}},
    keeping the MAX_BASES most recently written bases (this one moves to the end)."""

    def add(bases: dict) -> dict:
        bases = dict(bases)
        entries = {**bases.pop(basis, {}), key: entry}
        kept = list(bases.items())[-(MAX_BASES - 1) :] if MAX_BASES > 1 else []
        return {"format": PICKS_FORMAT, "bases": {**dict(kept), basis: entries}}

    return add


def _winners(data: Any) -> dict:
    """An autotune winners file -> {basis: {params json: config dict}}; the flat files of
    earlier versions (no basis: which kernels they timed is unknown) are refused."""
    if isinstance(data, dict) and "format" not in data and "bases" not in data:
        raise ValueError(
            "autotune winners of an earlier spio, not keyed by the kernels' code; SPIO_AUTOTUNE=1 "
            "re-measures them"
        )
    return _picks(data)


def _picks(data: Any) -> dict:
    """A picks (or winners) file -> {basis: {params json: entry}}; another format is refused."""
    if not isinstance(data, dict) or data.get("format") != PICKS_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a picks file of format {PICKS_FORMAT} (found {found!r})")
    bases = data.get("bases")
    if not isinstance(bases, dict) or not all(isinstance(v, dict) for v in bases.values()):
        raise ValueError("'bases' is not an object of objects")
    return bases
