"""`spio info`: what spio finds on this machine. Works with no GPU and no driver."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path

from spio.settings import settings


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _dir_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    return len(files), sum(p.stat().st_size for p in files)


def _nvrtc_lines() -> list[str]:
    try:
        from spio.compiler import describe

        found = describe()
    except Exception as e:  # report any failure to locate NVRTC; info must never crash
        return [f"  NVRTC: not found ({type(e).__name__}: {e})"]
    if isinstance(found, dict):
        return [f"  NVRTC {k}: {v}" for k, v in found.items()]
    return [f"  NVRTC: {found}"]


def _gpu_lines() -> list[str]:
    try:
        from spio.cuda import device_attributes, device_count, driver_version

        count = device_count()
        if count == 0:
            return [
                "  GPUs: none (no CUDA driver or no device); kernels compile, ops use fallbacks"
            ]
        version = driver_version()  # None if the driver went away since device_count()
        driver = "unknown" if version is None else f"{version[0]}.{version[1]}"
        lines = [f"  CUDA driver: {driver}"]
        for i in range(count):
            d = device_attributes(i)
            lines.append(
                f"  GPU {i}: {d.name} ({d.arch}), {d.sm_count} SMs, "
                f"L2 {d.l2_bytes // 2**20} MiB, "
                f"smem/block opt-in {d.max_smem_per_block_optin // 1024} KiB"
            )
        return lines
    except Exception as e:  # a missing driver is a normal state for `spio info`
        return [f"  GPUs: unavailable ({type(e).__name__}: {e})"]


def _model_lines() -> list[str]:
    try:
        from spio.tune.store import list_models

        models = list_models()
    except ImportError:
        return ["  performance models: none in this build"]
    if not models:
        return ["  performance models: none (heuristic configs are used)"]
    return [f"  performance model: {m}" for m in models]


def print_info() -> None:
    import spio

    s = settings()
    n_files, n_bytes = _dir_size(Path(s.cache_dir))
    lines = [
        f"spio {spio.__version__}",
        f"  Python {platform.python_version()} ({sys.executable})",
        f"  torch {_version('torch')}",
        *_nvrtc_lines(),
        *_gpu_lines(),
        f"  cache dir: {s.cache_dir} ({n_files} files, {n_bytes / 2**20:.1f} MiB)"
        + (" [disabled by SPIO_NO_DISK_CACHE]" if s.no_disk_cache else ""),
        *_model_lines(),
    ]
    print("\n".join(lines))
