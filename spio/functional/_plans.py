"""Launch-plan caches: one plan per call signature of an op, kept for the process.

A plan is everything a launch needs, computed when a signature (shapes, strides, dtypes, device,
options) is first seen: validation, config selection, the loaded kernel with its grid bound, the
output sizes. A later call with that signature builds a key from its tensors, looks the plan up
and launches. Each op module owns its caches (`PlanCache("conv2d_gw8 forward")`); `clear()`
empties them all, for tests and for code that changes what a plan captured (the selector's
choices, the function cache, SPIO_PDL, SPIO_AUTOTUNE).
"""

from __future__ import annotations

import threading
from typing import Any

_ALL: list[PlanCache] = []
_lock = threading.Lock()

# Plans one op keeps before it starts over (a plan is rebuilt from the selector's and the
# function cache's memory in well under a millisecond): a bound on what varying shapes (a server's
# token counts, say) can hold.
MAX_PLANS = 4096

# Stored for a signature whose calls go through the dispatcher instead of a plan (the CPU
# fallback, an empty batch, a batch above the kernels' limit): the op decides there.
DISPATCH: Any = object()


class PlanCache(dict):
    """{signature key: plan or DISPATCH}. Lookups are plain dict lookups (no lock: a plan built
    twice by racing threads is the same plan, and the function cache locks the loads)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        with _lock:
            _ALL.append(self)

    def __repr__(self) -> str:
        return f"PlanCache({self.name!r}, {len(self)} plans)"

    def __setitem__(self, key: Any, plan: Any) -> None:
        if len(self) >= MAX_PLANS and key not in self:
            self.clear()  # the plans in use stay alive with their callers
        super().__setitem__(key, plan)


def caches() -> list[PlanCache]:
    """Every op's plan cache."""
    with _lock:
        return list(_ALL)


def clear() -> None:
    """Forgets every plan of every op (the next call of each signature builds it again)."""
    for cache in caches():
        cache.clear()
