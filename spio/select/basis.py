"""The bases of persisted selections: digests of everything a pick or an autotune winner depends
on.

Read without loading a model or XGBoost: the spio version, the code (path, size, mtime of every
module of `spio.kernels` and `spio.select`, of `spio.tune`'s feature, ranking, model and tree
evaluation code, and of the modules defining the family's configs, heuristic and features), the
device's attributes (all but the ordinal: GPUs of one model share picks), and for model and
heuristic picks (`basis`) every model file the lookup may read (`spio.tune.store.model_identity`),
for autotune winners (`winner_basis`) every kernel source and header under `spio/src` and
`spio/include` instead: a winner was measured on the kernels, not predicted by a model. A
retrained or added model, another spio version or edited code therefore never reuses a stale
pick, and a kernel change never reuses a winner timed on the old kernel (`spio.select.picks` keys
both by them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spio.kernels.kernel_def import KernelDef

_SPIO_DIR = Path(__file__).parent.parent  # as __file__ spells it, like the families' modules


def basis(kdef: KernelDef, device: Any) -> str:
    """The digest persisted model and heuristic picks of `kdef` on `device` are keyed by."""
    from spio.tune.store import model_identity

    return _digest([*_kernel_parts(kdef, device), *model_identity(kdef.name)])


def winner_basis(kdef: KernelDef, device: Any) -> str:
    """The digest persisted autotune winners of `kdef` on `device` are keyed by: `basis` with the
    kernel sources and headers instead of the models (a winner was measured on the kernels this
    code compiles, whatever ranked it)."""
    return _digest([*_kernel_parts(kdef, device), *_kernel_source_identity()])


def _kernel_parts(kdef: KernelDef, device: Any) -> list[str]:
    import spio

    return [f"spio {spio.__version__}", *_code_identity(kdef), _device_identity(device)]


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


_code_identities: dict[str, tuple[str, ...]] = {}


def _code_identity(kdef: KernelDef) -> tuple[str, ...]:
    """'path|size|mtime_ns' of the code a pick depends on: the modules defining the family's
    configs, heuristic and features, every module of `spio.kernels` and its family packages
    (params, helpers) and of `spio.select` (the selection and store code), and the feature,
    ranking, model and tree evaluation code of `spio.tune`. In a development tree, where the
    spio version stays, an edit there changes it; in an installed spio these files never
    change. Taken once per process and family: the code that runs is the code imported,
    whatever happens to the files later (and the stats cost ~1 ms per new-shape selection
    otherwise)."""
    known = _code_identities.get(kdef.name)
    if known is None:
        known = _code_identities[kdef.name] = tuple(_stat_code(kdef))
    return known


def _stat_code(kdef: KernelDef) -> list[str]:
    paths = set((_SPIO_DIR / "kernels").rglob("*.py")) | set((_SPIO_DIR / "select").glob("*.py"))
    tune = ("features.py", "rank.py", "model.py", "trees.py", "booster.py")
    paths.update(_SPIO_DIR / "tune" / f for f in tune)
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


_kernel_sources: list[tuple[str, ...]] = []


def _kernel_source_identity() -> tuple[str, ...]:
    """'path|size|mtime_ns' of every kernel source and header (`spio/src`, `spio/include`: what
    the kernels compile from), taken once per process. Only autotune winners depend on them, so
    a process that finds no winners file never stats them."""
    if not _kernel_sources:
        out = []
        for d in ("src", "include"):
            for root, _, files in sorted(os.walk(_SPIO_DIR / d)):
                for name in sorted(files):
                    path = os.path.join(root, name)
                    st = os.stat(path)
                    out.append(f"{path}|{st.st_size}|{st.st_mtime_ns}")
        _kernel_sources.append(tuple(out))
    return _kernel_sources[0]


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
