"""Every SPIO_* environment knob, declared once, typed and documented.

Read the environment at use time with `settings()`, never at import. Tests override knobs with
`override(...)`. `docs/env.md` is generated from `KNOBS` (`python -m spio.settings`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _default_cache_dir() -> str:
    import platformdirs

    return platformdirs.user_cache_dir("spio")


def _default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 16))


@dataclass(frozen=True)
class Knob:
    """One environment variable: its name, the Settings field it fills, its type and meaning."""

    env: str
    field: str
    kind: type
    default: object
    doc: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        "SPIO_CACHE_DIR",
        "cache_dir",
        Path,
        "platform user cache dir /spio",
        "Directory of the on-disk cubin cache and the selection cache.",
    ),
    Knob(
        "SPIO_NO_DISK_CACHE",
        "no_disk_cache",
        bool,
        False,
        "1 disables the on-disk cubin cache (every new process compiles again).",
    ),
    Knob(
        "SPIO_CACHE_SAVE_SOURCE",
        "cache_save_source",
        bool,
        False,
        "1 writes <key>.cu, <key>.h and <key>.options beside each cached cubin, for debugging.",
    ),
    Knob(
        "SPIO_ASSERT_NO_COMPILE",
        "assert_no_compile",
        bool,
        False,
        "1 makes any NVRTC compile raise CompileForbiddenError (benchmarks, second-run tests).",
    ),
    Knob(
        "SPIO_WORKERS",
        "workers",
        int,
        "min(CPU count, 16)",
        "Processes in the parallel NVRTC compile pool.",
    ),
    Knob(
        "SPIO_DEBUG",
        "debug",
        bool,
        False,
        "1 compiles kernels with device debug info (-G); slow code, for cuda-gdb.",
    ),
    Knob(
        "SPIO_LINEINFO",
        "lineinfo",
        bool,
        False,
        "1 adds -lineinfo (source lines in profilers and compute-sanitizer reports).",
    ),
    Knob(
        "SPIO_DISASM",
        "disasm",
        bool,
        False,
        "1 dumps the SASS of every compiled kernel beside its cache entry (needs cuobjdump).",
    ),
    Knob(
        "SPIO_NVRTC",
        "nvrtc",
        Path,
        None,
        "Explicit path of libnvrtc (file) to use instead of searching the wheels and toolkits.",
    ),
    Knob(
        "SPIO_CUDA_INCLUDE",
        "cuda_include",
        Path,
        None,
        "Explicit directory holding cuda_fp16.h and friends.",
    ),
    Knob(
        "SPIO_LIBCUDA",
        "libcuda",
        str,
        "libcuda.so.1",
        "Name or path of the CUDA driver library, opened at first use.",
    ),
    Knob(
        "SPIO_DISABLE_FALLBACK",
        "disable_fallback",
        bool,
        False,
        "1 turns the documented PyTorch fallback (CPU tensors, GPUs below sm_80) into an error.",
    ),
    Knob(
        "SPIO_AUTOTUNE",
        "autotune",
        bool,
        False,
        "1 measures 5 candidates from the model's ranking (its top 2, then configs unlike them; "
        "the Hopper matmul: its cost model's ranking) at the params the op selects for (the layer "
        "at its batch's or rows' bucket, matmul at its token bucket) and persists the fastest.",
    ),
    Knob(
        "SPIO_LOG_LEVEL",
        "log_level",
        str,
        "WARNING",
        "Level of the 'spio' logger: DEBUG, INFO, WARNING, ERROR (below WARNING, spio prints "
        "to stderr itself unless the application configured logging).",
    ),
    Knob(
        "SPIO_PROGRESS",
        "progress",
        bool,
        True,
        "0 hides progress bars of long compiles and sweeps.",
    ),
    Knob(
        "SPIO_PDL",
        "pdl",
        bool,
        True,
        "0 launches the second passes (layernorm_2d and conv2d_gw8 wgrad reductions, the matmul "
        "split-K sum) without "
        "programmatic dependent launch on sm_90+; read when a kernel is loaded.",
    ),
    Knob(
        "SPIO_MAX_TEST_PARAMS",
        "max_test_params",
        int,
        None,
        "Tests: at most this many sampled params/configs per parametrized kernel test.",
    ),
    Knob(
        "SPIO_TEST_SEED",
        "test_seed",
        int,
        None,
        "Tests: seed of the random inputs (default: fresh each run, printed on failure).",
    ),
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse(knob: Knob, raw: str) -> object:
    if knob.kind is bool:
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{knob.env}={raw!r}: expected 0 or 1")
    if knob.kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{knob.env}={raw!r}: expected an integer") from None
    if knob.kind is Path:
        return Path(raw).expanduser()
    return raw


@dataclass(frozen=True)
class Settings:
    """A snapshot of every SPIO_* knob. Field comments name the variable."""

    cache_dir: Path  # SPIO_CACHE_DIR
    no_disk_cache: bool  # SPIO_NO_DISK_CACHE
    cache_save_source: bool  # SPIO_CACHE_SAVE_SOURCE
    assert_no_compile: bool  # SPIO_ASSERT_NO_COMPILE
    workers: int  # SPIO_WORKERS
    debug: bool  # SPIO_DEBUG
    lineinfo: bool  # SPIO_LINEINFO
    disasm: bool  # SPIO_DISASM
    nvrtc: Path | None  # SPIO_NVRTC
    cuda_include: Path | None  # SPIO_CUDA_INCLUDE
    libcuda: str  # SPIO_LIBCUDA
    disable_fallback: bool  # SPIO_DISABLE_FALLBACK
    autotune: bool  # SPIO_AUTOTUNE
    log_level: str  # SPIO_LOG_LEVEL
    progress: bool  # SPIO_PROGRESS
    pdl: bool  # SPIO_PDL
    max_test_params: int | None  # SPIO_MAX_TEST_PARAMS
    test_seed: int | None  # SPIO_TEST_SEED


def _default(knob: Knob) -> object:
    if knob.field == "cache_dir":
        return Path(_default_cache_dir())
    if knob.field == "workers":
        return _default_workers()
    return knob.default


def settings() -> Settings:
    """Reads every SPIO_* variable now. Call at use time, never at import."""
    env = os.environ
    values: dict[str, Any] = {}  # each value has its knob's kind, the type of its Settings field
    for knob in KNOBS:
        raw = env.get(knob.env)
        values[knob.field] = _default(knob) if raw is None or raw == "" else _parse(knob, raw)
    if values["workers"] < 1:
        raise ValueError(f"SPIO_WORKERS={values['workers']}: must be at least 1")
    return Settings(**values)


@contextlib.contextmanager
def override(**fields: object) -> Iterator[None]:
    """Temporarily sets knobs by field name: `with override(assert_no_compile=True): ...`."""
    by_field = {k.field: k for k in KNOBS}
    saved = {}
    try:
        for name, value in fields.items():
            if name not in by_field:
                raise KeyError(f"override: unknown setting {name!r}; known: {sorted(by_field)}")
            knob = by_field[name]
            saved[knob.env] = os.environ.get(knob.env)
            if value is None:
                os.environ.pop(knob.env, None)
            elif isinstance(value, bool):
                os.environ[knob.env] = "1" if value else "0"
            else:
                os.environ[knob.env] = str(value)
        yield
    finally:
        for env, old in saved.items():
            if old is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = old


def markdown() -> str:
    """The table of knobs for docs/env.md."""
    lines = [
        "# Environment variables",
        "",
        "Generated from `spio/settings.py` by `python -m spio.settings`; do not edit.",
        "",
        "| variable | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for k in KNOBS:
        lines.append(f"| `{k.env}` | {k.kind.__name__} | {k.default} | {k.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
