"""Config selection: (kernel family, params, device) -> config, cached in memory and on disk.

Order: this process's cache → a persisted autotune winner → with `SPIO_AUTOTUNE=1` (or
`Selector.autotune`) the model's top-k configs measured on the real shape, the fastest persisted
→ a persisted model or heuristic pick of the same *basis* → the performance model's top-1 pick
(`spio.tune`) → the family's documented heuristic (logged once per family and GPU).

On disk, under `<cache dir>/selections/` (or `store_dir`), per family and GPU name:
- `<family>__<gpu>.json`: autotune winners, `{params: config}`;
- `<family>__<gpu>.picks.json`: model and heuristic picks, `{"format": 1, "bases": {basis:
  {params: {"config": ..., "source": "model" | "heuristic"}}}}`. The basis is a digest of what a
  pick depends on, read without loading a model or XGBoost: the spio version, the code (path,
  size, mtime of spio.kernels' modules, the family's and spio.tune's feature, ranking and model
  code), the device's attributes and every model file the lookup may read (path, size, mtime;
  `spio.tune.store.model_identity`). A retrained or added model, another spio version or edited
  code therefore never reuses a stale pick, and a new process answers from disk without loading
  the model. The `MAX_BASES` most recently written bases are kept.
Writes take a file lock and replace the file atomically, so concurrent processes lose no entry;
an unreadable file is ignored with a warning (and rewritten by the next pick).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.logs import logger
from spio.settings import settings

TOP_K = 5
PICKS_FORMAT = 1
MAX_BASES = 4  # per picks file: a few models or spio installs sharing one cache dir
_SOURCES = ("model", "heuristic")


class Selector:
    """Chooses and remembers one config per (family, params, device name)."""

    def __init__(self, store_dir: Path | None = None) -> None:
        self._chosen: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._store_dir = store_dir
        self._warned: set[tuple[str, str]] = set()
        self._files: dict[Path, tuple[tuple[int, ...], dict]] = {}  # parsed, by _stamp
        self._complained: set[Path] = set()
        self.sources: dict[tuple, str] = {}  # key -> autotune | model | heuristic | shared

    def select(self, kdef: KernelDef, params: Any, device: Any, share: Any = None) -> Any:
        """The config for `params` on `device`.

        `share`: a key for params that one compiled variant serves (e.g. the layer without its
        batch size, which is a launch argument). The first config chosen under a key is reused
        for later params with that key while it is valid for them, so a new batch size runs the
        kernel already loaded instead of compiling the variant the model would prefer for it.
        """
        key = (kdef.name, params, device.name)
        hit = self._chosen.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._chosen.get(key)
            if hit is None:
                shared_key = (kdef.name, "share", share, device.name)
                hit = self._chosen.get(shared_key) if share is not None else None
                if hit is not None and hit in kdef.configs(params, device):
                    source = "shared"
                else:
                    hit, source = self._choose(kdef, params, device)
                    if share is not None:
                        self._chosen[shared_key] = hit
                self._chosen[key] = hit
                self.sources[key] = source
        return hit

    def ranked(self, kdef: KernelDef, params: Any, device: Any) -> list[tuple[Any, float | None]]:
        """Configs best first with predicted µs (None without a model: heuristic first)."""
        from spio.tune.rank import rank
        from spio.tune.store import find_model

        model = find_model(kdef.name, device.name, device.arch)
        if model is not None:
            predicted: list[tuple[Any, float | None]] = list(rank(kdef, params, device, model))
            return predicted
        first = kdef.heuristic(params, device)
        rest = [c for c in kdef.configs(params, device) if c != first]
        return [(first, None)] + [(c, None) for c in rest]

    def autotune(self, kdef: KernelDef, params: Any, device: Any, k: int = TOP_K) -> Any:
        """Measures the top-k configs on the current GPU, persists and returns the fastest."""
        best = self._measure_best(kdef, params, device, k)
        with self._lock:
            self._chosen[(kdef.name, params, device.name)] = best
            self.sources[(kdef.name, params, device.name)] = "autotune"
        return best

    def clear(self) -> None:
        """Forgets this process's selections (the persisted ones stay on disk)."""
        self._chosen.clear()
        self.sources.clear()
        self._files.clear()

    def basis(self, kdef: KernelDef, device: Any) -> str:
        """The digest persisted model and heuristic picks of `kdef` on `device` are keyed by."""
        import spio
        from spio.tune.store import model_identity

        parts = [
            f"spio {spio.__version__}",
            *_code_identity(kdef),
            _device_identity(device),
            *model_identity(kdef.name),
        ]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    # -- internals --------------------------------------------------------------------------

    def _choose(self, kdef: KernelDef, params: Any, device: Any) -> tuple[Any, str]:
        persisted = self._load_persisted(kdef, params, device)
        if persisted is not None:
            return persisted, "autotune"
        if settings().autotune and kdef.make_runner is not None:
            return self._measure_best(kdef, params, device, TOP_K), "autotune"
        basis = self.basis(kdef, device)
        picked = self._load_pick(kdef, params, device, basis)
        if picked is not None:
            if picked[1] == "heuristic":
                self._warn_no_model(kdef, device)
            return picked
        config, source = self._pick(kdef, params, device)
        self._persist_pick(kdef, params, device, basis, config, source)
        return config, source

    def _pick(self, kdef: KernelDef, params: Any, device: Any) -> tuple[Any, str]:
        from spio.tune.store import find_model

        model = find_model(kdef.name, device.name, device.arch)
        if model is not None:
            from spio.tune.rank import rank

            return rank(kdef, params, device, model)[0][0], "model"
        self._warn_no_model(kdef, device)
        return kdef.heuristic(params, device), "heuristic"

    def _warn_no_model(self, kdef: KernelDef, device: Any) -> None:
        if (kdef.name, device.name) in self._warned:
            return
        self._warned.add((kdef.name, device.name))
        logger().warning(
            "spio: no performance model for %s on %s (%s); using its heuristic config "
            "(`spio tune collect` + `spio tune train` make one; SPIO_AUTOTUNE=1 measures "
            "the candidates instead)",
            kdef.name,
            device.name,
            device.arch,
        )

    def _measure_best(self, kdef: KernelDef, params: Any, device: Any, k: int) -> Any:
        from spio.tune.rank import measure

        candidates = [c for c, _ in self.ranked(kdef, params, device)[:k]]
        timed = measure(kdef, params, candidates)
        if not timed:
            raise ValueError(f"{kdef.name}: none of the top-{k} configs ran for {params}")
        best, us = timed[0]
        self._persist(kdef, params, device, best)
        logger().info(
            "spio: autotuned %s %s on %s: %s (%.1f us)", kdef.name, params, device.name, best, us
        )
        return best

    def _store_file(self, kdef: KernelDef, device: Any, suffix: str = ".json") -> Path:
        from spio.tune.store import slug

        root = self._store_dir or Path(settings().cache_dir) / "selections"
        return root / f"{kdef.name}__{slug(device.name)}{suffix}"

    def _config_from(self, kdef: KernelDef, params: Any, device: Any, entry: Any) -> Any | None:
        """The config an entry names, if it is still one of the family's configs for params."""
        from spio.tune.features import from_dict

        if not isinstance(entry, dict):
            return None
        try:
            config = from_dict(kdef.config_type, entry)
        except (TypeError, ValueError):
            return None  # a config of an older version of the family
        return config if config in kdef.configs(params, device) else None

    def _load_persisted(self, kdef: KernelDef, params: Any, device: Any) -> Any | None:
        from spio.tune.features import to_dict

        table = self._read(self._store_file(kdef, device), _winners)
        entry = table.get(json.dumps(to_dict(params), sort_keys=True))
        return None if entry is None else self._config_from(kdef, params, device, entry)

    def _load_pick(
        self, kdef: KernelDef, params: Any, device: Any, basis: str
    ) -> tuple[Any, str] | None:
        from spio.tune.features import to_dict

        bases = self._read(self._store_file(kdef, device, ".picks.json"), _picks)
        entry = bases.get(basis, {}).get(json.dumps(to_dict(params), sort_keys=True))
        if not isinstance(entry, dict) or entry.get("source") not in _SOURCES:
            return None
        config = self._config_from(kdef, params, device, entry.get("config"))
        return None if config is None else (config, entry["source"])

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

    def _persist(self, kdef: KernelDef, params: Any, device: Any, config: Any) -> None:
        """Persists an autotune winner (errors propagate: the caller asked to persist)."""
        from spio.tune.features import to_dict

        key = json.dumps(to_dict(params), sort_keys=True)
        self._update(
            self._store_file(kdef, device), _winners, lambda t: {**t, key: to_dict(config)}
        )

    def _persist_pick(
        self, kdef: KernelDef, params: Any, device: Any, basis: str, config: Any, source: str
    ) -> None:
        """Persists a model or heuristic pick; a failure costs only the next process's time."""
        from spio.tune.features import to_dict

        key = json.dumps(to_dict(params), sort_keys=True)
        entry = {"config": to_dict(config), "source": source}

        def add(bases: dict) -> dict:
            bases = dict(bases)
            picks = {**bases.pop(basis, {}), key: entry}  # this basis moves to the end
            kept = list(bases.items())[-(MAX_BASES - 1) :] if MAX_BASES > 1 else []
            return {"format": PICKS_FORMAT, "bases": {**dict(kept), basis: picks}}

        path = self._store_file(kdef, device, ".picks.json")
        try:
            self._update(path, _picks, add)
        except OSError as e:
            self._complain(path, f"could not persist a selection in {path} ({e})")

    def _update(self, path: Path, parse: Callable[[Any], dict], change: Callable) -> None:
        """Read-modify-write of a store file under its file lock, replaced atomically."""
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
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


def _winners(data: Any) -> dict:
    """An autotune winners file: {params json: config dict}."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _picks(data: Any) -> dict:
    """A picks file -> {basis: {params json: entry}}; another format is refused."""
    if not isinstance(data, dict) or data.get("format") != PICKS_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a picks file of format {PICKS_FORMAT} (found {found!r})")
    bases = data.get("bases")
    if not isinstance(bases, dict) or not all(isinstance(v, dict) for v in bases.values()):
        raise ValueError("'bases' is not an object of objects")
    return bases


_code_identities: dict[str, tuple[str, ...]] = {}


def _code_identity(kdef: KernelDef) -> tuple[str, ...]:
    """'path|size|mtime_ns' of the code a pick depends on: the modules defining the family's
    configs, heuristic and features, every module of `spio.kernels` (params, helpers) and the
    feature and ranking code of `spio.tune`. In a development tree, where the spio version
    stays, an edit there changes it; in an installed spio these files never change. Taken once
    per process and family: the code that runs is the code imported, whatever happens to the
    files later (and the stats cost ~1 ms per new-shape selection otherwise)."""
    known = _code_identities.get(kdef.name)
    if known is None:
        known = _code_identities[kdef.name] = tuple(_stat_code(kdef))
    return known


def _stat_code(kdef: KernelDef) -> list[str]:
    kernels = Path(__file__).parent
    paths = set(kernels.glob("*.py"))
    paths.update(kernels.parent / "tune" / f for f in ("features.py", "rank.py", "model.py"))
    for fn in (kdef.configs, kdef.heuristic, kdef.features):
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        path = getattr(module, "__file__", None)
        if path:
            paths.add(Path(path))
    out = []
    for path in sorted(paths):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append(f"{path}|{st.st_size}|{st.st_mtime_ns}")
    return out


def _device_identity(device: Any) -> str:
    """The device's attributes but its ordinal (GPUs of one model share picks)."""
    if dataclasses.is_dataclass(device) and not isinstance(device, type):
        fields = {
            f.name: getattr(device, f.name)
            for f in dataclasses.fields(device)
            if f.name != "ordinal"
        }
        return repr(sorted(fields.items()))
    return f"{device.name}|{device.arch}"


def op_config(kdef: KernelDef, params: Any, device: Any, selector: Selector | None = None) -> Any:
    """The config the torch ops run for `params` on `device`: the family's selection rule
    (`KernelDef.select_key`: which params the config is selected for, and whether one config
    serves a layer's other batch sizes) applied through `selector` (default: the ops' one)."""
    if kdef.derived_from is not None:
        raise ValueError(
            f"{kdef.name}: its config is derived from the {kdef.derived_from} pass's launch "
            f"(see {kdef.name}'s module), not selected; pass the config explicitly"
        )
    params, share = kdef.select_key(params) if kdef.select_key is not None else (params, None)
    chosen_by = selector if selector is not None else default_selector()
    return chosen_by.select(kdef, params, device, share=share)


@functools.cache
def default_selector() -> Selector:
    """The process-wide selector the torch ops use; tests may build their own."""
    return Selector()
