"""Config selection: (kernel family, params, device) -> config, cached in memory and on disk.

Order: this process's cache → a persisted autotune winner → the performance model's top-1 pick
(`spio.tune`) → the family's documented heuristic (logged once per family and GPU). With
`SPIO_AUTOTUNE=1` (or `Selector.autotune`) the model's top-k configs are measured on the real
shape and the fastest is persisted.
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.logs import logger
from spio.settings import settings

TOP_K = 5


class Selector:
    """Chooses and remembers one config per (family, params, device name)."""

    def __init__(self, store_dir: Path | None = None) -> None:
        self._chosen: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._store_dir = store_dir
        self._warned: set[tuple[str, str]] = set()
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
        self._chosen.clear()
        self.sources.clear()

    # -- internals --------------------------------------------------------------------------

    def _choose(self, kdef: KernelDef, params: Any, device: Any) -> tuple[Any, str]:
        persisted = self._load_persisted(kdef, params, device)
        if persisted is not None:
            return persisted, "autotune"
        if settings().autotune and kdef.make_runner is not None:
            return self._measure_best(kdef, params, device, TOP_K), "autotune"
        from spio.tune.store import find_model

        model = find_model(kdef.name, device.name, device.arch)
        if model is not None:
            from spio.tune.rank import rank

            return rank(kdef, params, device, model)[0][0], "model"
        if (kdef.name, device.name) not in self._warned:
            self._warned.add((kdef.name, device.name))
            logger().warning(
                "spio: no performance model for %s on %s (%s); using its heuristic config "
                "(`spio tune collect` + `spio tune train` make one; SPIO_AUTOTUNE=1 measures "
                "the candidates instead)",
                kdef.name,
                device.name,
                device.arch,
            )
        return kdef.heuristic(params, device), "heuristic"

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

    def _store_file(self, kdef: KernelDef, device: Any) -> Path:
        from spio.tune.store import slug

        root = self._store_dir or Path(settings().cache_dir) / "selections"
        return root / f"{kdef.name}__{slug(device.name)}.json"

    def _load_persisted(self, kdef: KernelDef, params: Any, device: Any) -> Any | None:
        from spio.tune.features import from_dict, to_dict

        path = self._store_file(kdef, device)
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        entry = table.get(json.dumps(to_dict(params), sort_keys=True))
        if entry is None:
            return None
        try:
            config = from_dict(kdef.config_type, entry)
        except (TypeError, ValueError):
            return None  # a config of an older version of the family
        return config if config in kdef.configs(params, device) else None

    def _persist(self, kdef: KernelDef, params: Any, device: Any, config: Any) -> None:
        from filelock import FileLock

        from spio.tune.features import to_dict

        path = self._store_file(kdef, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            try:
                table = json.loads(path.read_text())
            except (OSError, ValueError):
                table = {}
            table[json.dumps(to_dict(params), sort_keys=True)] = to_dict(config)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
            tmp.replace(path)


@functools.cache
def default_selector() -> Selector:
    """The process-wide selector the torch ops use; tests may build their own."""
    return Selector()
