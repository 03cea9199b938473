"""Config selection: (kernel family, params, device) -> config, cached per process.

Until a performance model for the family and device exists, the family's documented heuristic
picks the config.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from spio.kernels.kernel_def import KernelDef


class Selector:
    """Chooses and remembers one config per (family, params, device name)."""

    def __init__(self) -> None:
        self._chosen: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def select(self, kdef: KernelDef, params: Any, device: Any) -> Any:
        key = (kdef.name, params, device.name)
        hit = self._chosen.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._chosen.get(key)
            if hit is None:
                hit = kdef.heuristic(params, device)
                self._chosen[key] = hit
        return hit

    def clear(self) -> None:
        self._chosen.clear()


@functools.cache
def default_selector() -> Selector:
    """The process-wide selector the torch ops use; tests may build their own."""
    return Selector()
