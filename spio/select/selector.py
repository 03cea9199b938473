"""Config selection, the policy: (kernel family, params, device) -> config, remembered in memory
and persisted on disk.

Order: this process's cache → a persisted autotune winner of the same code
(`spio.select.basis.winner_basis`: a kernel change re-measures) → with `SPIO_AUTOTUNE=1` (or
`Selector.autotune`) k of the model's best-ranked configs (`spio.tune.rank.autotune_candidates`)
measured at the params it is given (`op_config`: the family's selection params), the fastest
persisted → a persisted model or heuristic pick of the same
*basis* (`spio.select.basis`) → the performance model's top-1 pick (`spio.tune`), persisted → the
family's documented heuristic (logged once per family and GPU), persisted. A family with a cost
model of its own (`KernelDef.ranked`: matmul_sm90) has no trained model: its heuristic is the pick
(neither persisted nor kept in memory, no warning) and autotune measures from its ranking. A new
process thus answers a shape seen before from disk without loading the model. Where and how picks
persist: `spio.select.picks`. `op_config` applies a family's selection rule
(`KernelDef.select_key`) on top: what the ops run.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spio.logs import logger
from spio.select.basis import basis as _basis
from spio.select.basis import winner_basis
from spio.select.picks import PickStore
from spio.settings import settings

if TYPE_CHECKING:
    from spio.kernels.kernel_def import KernelDef

TOP_K = 5  # configs autotune measures (spio.tune.evaluate.AUTOTUNE_K mirrors it)


class Selector:
    """Chooses and remembers one config per (family, params, device name)."""

    def __init__(self, store_dir: Path | None = None) -> None:
        self._chosen: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()
        self.store = PickStore(store_dir)  # under <cache dir>/selections without store_dir
        self.sources: dict[tuple, str] = {}  # key -> autotune | model | heuristic

    def select(self, kdef: KernelDef, params: Any, device: Any) -> Any:
        """The config for `params` on `device`."""
        key = (kdef.name, params, device.name)
        hit = self._chosen.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._chosen.get(key)
            if hit is None:
                hit, source = self._choose(kdef, params, device)
                if kdef.ranked is not None and source == "heuristic":
                    # Its own cost model, recomputed per call: no state per shape (a server's
                    # token counts would grow it without bound; the op's plans are bounded).
                    return hit
                self._chosen[key] = hit
                self.sources[key] = source
        return hit

    def ranked(self, kdef: KernelDef, params: Any, device: Any) -> list[tuple[Any, float | None]]:
        """Configs best first with predicted µs (None without a model: heuristic first; a
        family's own ranking, `KernelDef.ranked`, without predictions)."""
        from spio.tune.rank import rank
        from spio.tune.store import find_model

        if kdef.ranked is not None:
            return [(c, None) for c in kdef.ranked(params, device)]

        model = find_model(kdef.name, device.name, device.arch)
        if model is not None:
            predicted: list[tuple[Any, float | None]] = list(rank(kdef, params, device, model))
            return predicted
        first = kdef.heuristic(params, device)
        rest = [c for c in kdef.configs(params, device) if c != first]
        return [(first, None)] + [(c, None) for c in rest]

    def autotune(self, kdef: KernelDef, params: Any, device: Any, k: int = TOP_K) -> Any:
        """Measures k of the best-ranked configs (`spio.tune.rank.autotune_candidates`: the
        model's top 2 and configs that differ where those agree) on the current GPU, persists and
        returns the fastest."""
        best = self._measure_best(kdef, params, device, k)
        with self._lock:
            self._chosen[(kdef.name, params, device.name)] = best
            self.sources[(kdef.name, params, device.name)] = "autotune"
        return best

    def clear(self) -> None:
        """Forgets this process's selections (the persisted ones stay on disk)."""
        self._chosen.clear()
        self.sources.clear()
        self.store.clear()

    def basis(self, kdef: KernelDef, device: Any) -> str:
        """The digest persisted model and heuristic picks of `kdef` on `device` are keyed by."""
        return _basis(kdef, device)

    # -- internals --------------------------------------------------------------------------

    def _choose(self, kdef: KernelDef, params: Any, device: Any) -> tuple[Any, str]:
        persisted = self.store.winner(kdef, params, device, lambda: winner_basis(kdef, device))
        if persisted is not None:
            return persisted, "autotune"
        if settings().autotune and kdef.make_runner is not None:
            return self._measure_best(kdef, params, device, TOP_K), "autotune"
        if kdef.ranked is not None:
            # Its own cost model: arithmetic, cheaper than a persisted pick's file (which a token
            # count per shape would rewrite for every new count). No warning.
            return kdef.heuristic(params, device), "heuristic"
        basis = self.basis(kdef, device)
        picked = self.store.pick(kdef, params, device, basis)
        if picked is not None:
            if picked[1] == "heuristic":
                self._warn_no_model(kdef, device)
            return picked
        config, source = self._pick(kdef, params, device)
        self.store.save_pick(kdef, params, device, basis, config, source)
        return config, source

    def _pick(self, kdef: KernelDef, params: Any, device: Any) -> tuple[Any, str]:
        from spio.tune.store import find_model

        model = find_model(kdef.name, device.name, device.arch)
        if model is not None:
            from spio.tune.rank import best

            return best(kdef, params, device, model)[0], "model"
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
        from spio.tune.rank import autotune_candidates, measure

        candidates = autotune_candidates([c for c, _ in self.ranked(kdef, params, device)], k)
        timed = measure(kdef, params, candidates)
        if not timed:
            raise ValueError(f"{kdef.name}: none of the {k} autotune candidates ran for {params}")
        best, us = timed[0]
        self.store.save_winner(kdef, params, device, winner_basis(kdef, device), best)
        logger().info(
            "spio: autotuned %s %s on %s: %s (%.1f us)", kdef.name, params, device.name, best, us
        )
        return best


def op_config(kdef: KernelDef, params: Any, device: Any, selector: Selector | None = None) -> Any:
    """The config the torch ops run for `params` on `device`: the family's selection rule
    (`KernelDef.select_key`: which params the config is selected for) applied through
    `selector` (default: the ops' one)."""
    if kdef.derived_from is not None:
        raise ValueError(
            f"{kdef.name}: its config is derived from the {kdef.derived_from} pass's launch "
            f"(see {kdef.name}'s module), not selected; pass the config explicitly"
        )
    chosen_by = selector if selector is not None else default_selector()
    return chosen_by.select(kdef, kdef.selection(params), device)


@functools.cache
def default_selector() -> Selector:
    """The process-wide selector the torch ops use; tests may build their own."""
    return Selector()
