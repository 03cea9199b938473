"""Every SPIO_* environment knob, declared once and read at use time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("spio"))


@dataclass(frozen=True)
class Settings:
    cache_dir: Path  # SPIO_CACHE_DIR: where compiled cubins live (default: platform cache dir)
    workers: int  # SPIO_WORKERS: parallel NVRTC compiles (default: CPU count)


def settings() -> Settings:
    """Reads every SPIO_* variable now. Call at use time, never at import."""
    env = os.environ
    return Settings(
        cache_dir=Path(env["SPIO_CACHE_DIR"]) if env.get("SPIO_CACHE_DIR") else _default_cache_dir(),
        workers=int(env.get("SPIO_WORKERS", str(os.cpu_count() or 1))),
    )
