"""Where performance models live: shipped in the package, or trained locally into the cache dir.

File names are `<kernel>__<device slug>.json.gz`. Lookup for (kernel, device): a local model for
that exact GPU, then a shipped one, then (with a log line) a model of another GPU of the same
arch. `model_identity(kernel)` describes the files that lookup may read (path, size, mtime)
without opening them: persisted picks (`spio.select.basis`) key on it. A loaded model is kept
per file (path and mtime) for the process. Neither importing this module nor loading a model
imports numpy or XGBoost: a model's trees are evaluated in plain Python (`spio.tune.trees`).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from spio.errors import ModelFormatError
from spio.logs import logger
from spio.settings import settings

if TYPE_CHECKING:
    from spio.tune.model import PerfModel

PACKAGE_MODELS = Path(__file__).resolve().parent / "models"
SUFFIX = ".json.gz"


def slug(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def local_models_dir() -> Path:
    return Path(settings().cache_dir) / "models"


def model_path(directory: Path, kernel: str, device_name: str) -> Path:
    return directory / f"{kernel}__{slug(device_name)}{SUFFIX}"


def _dirs() -> list[Path]:
    return [local_models_dir(), PACKAGE_MODELS]


def list_models() -> list[str]:
    """'<kernel> for <device> (<arch>, N samples) [where]' for every model file found."""
    out = []
    for d in _dirs():
        for p in sorted(d.glob(f"*__*{SUFFIX}")):
            try:
                from spio.tune.model import read_text

                head = json.loads(read_text(p))
                out.append(
                    f"{head['kernel']} for {head['device']} ({head['arch']}, "
                    f"{head.get('n_samples', '?')} samples) [{p.parent}]"
                )
            except (OSError, ValueError, KeyError) as e:
                out.append(f"{p.name}: unreadable ({e})")
    return out


def model_files(kernel: str) -> list[Path]:
    """Every model file `find_model` may read for `kernel`, in lookup order (none is opened)."""
    return [p for d in _dirs() for p in sorted(d.glob(f"{kernel}__*{SUFFIX}"))]


def model_identity(kernel: str) -> list[str]:
    """'path|size|mtime_ns' of each of `model_files(kernel)`: what `find_model`'s answer for
    `kernel` on any GPU depends on, read without loading a model or XGBoost. Retraining, replacing,
    adding or removing a model file changes it (persisted selections key on it)."""
    out = []
    for p in model_files(kernel):
        try:
            st = p.stat()
        except OSError:
            continue  # removed since the glob
        out.append(f"{p}|{st.st_size}|{st.st_mtime_ns}")
    return out


@functools.cache
def _load(path: Path, mtime: float) -> PerfModel:
    from spio.tune.model import PerfModel

    return PerfModel.load(path)


def find_model(kernel: str, device_name: str, arch: str) -> PerfModel | None:
    """The model to use for `kernel` on this GPU, or None (the caller uses the heuristic)."""
    for d in _dirs():
        p = model_path(d, kernel, device_name)
        if p.exists():
            return _try_load(p)
    for d in _dirs():
        for p in sorted(d.glob(f"{kernel}__*{SUFFIX}")):
            model = _try_load(p)
            if model is not None and model.arch == arch:
                logger().info(
                    "spio: no %s model for %s; using the one trained on %s (same arch %s)",
                    kernel,
                    device_name,
                    model.device,
                    arch,
                )
                return model
    return None


def _try_load(path: Path) -> PerfModel | None:
    try:
        return _load(path, path.stat().st_mtime)
    except (ModelFormatError, OSError, ValueError) as e:
        logger().warning("spio: ignoring performance model %s: %s", path, e)
        return None
