"""Where NVRTC and the CUDA headers are: an explicit setting, the pip wheels, then toolkits.

Search order (the first place holding both libnvrtc and a header dir with cuda_fp16.h and
cuda_bf16.h wins; the library and the headers are taken from the same place so that their
versions match):

1. `SPIO_NVRTC` (a libnvrtc file) and/or `SPIO_CUDA_INCLUDE` (a header dir). An explicit library
   is the only candidate: a wrong path is an error, never a silent fallback.
2. The NVRTC pip wheel of the CUDA major that the installed torch was built for. torch's CUDA
   version is read from `torch/version.py` as text, without importing torch.
3. Any NVRTC pip wheel: CUDA 12 (`nvidia/cuda_nvrtc/lib/libnvrtc.so.12`, headers from
   `nvidia/cuda_runtime/include`) before CUDA 13 (`nvidia/cu13/lib/libnvrtc.so.13`,
   `nvidia/cu13/include`): a cubin from the older NVRTC loads on more drivers.
4. A toolkit under `CUDA_HOME`, then `CUDA_PATH`. These are the toolkit's own variables, not spio
   knobs, so this module (and only it) reads them from `os.environ`.
5. `/usr/local/cuda`.

Nothing is searched at import; `locate()` runs at first use and is cached per setting.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spio.errors import LibraryNotFoundError
from spio.settings import settings

REQUIRED_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")

_HINT = (
    "Install NVRTC and the CUDA headers with `pip install nvidia-cuda-nvrtc-cu12 "
    "nvidia-cuda-runtime-cu12` (CUDA 13: `pip install nvidia-cuda-nvrtc nvidia-cuda-runtime`), "
    "or point SPIO_NVRTC at a libnvrtc.so and SPIO_CUDA_INCLUDE at a directory holding "
    "cuda_fp16.h, or set CUDA_HOME to a CUDA toolkit."
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One place NVRTC may live: the library file and the header dirs that go with it."""

    how: str  # e.g. "pip wheel nvidia-cuda-nvrtc-cu12 (matches torch's CUDA 12)"
    library: Path
    include_dirs: tuple[Path, ...]
    major: int | None = None  # CUDA major version, when the layout tells it


@dataclass(frozen=True, slots=True)
class Location:
    """The NVRTC library and CUDA header dirs that spio compiles with, and how they were found."""

    library: Path
    include_dirs: tuple[Path, ...]
    how: str
    searched: tuple[str, ...]


def torch_cuda_major() -> int | None:
    """CUDA major version the installed torch was built for, read without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    version_py = Path(spec.origin).parent / "version.py"
    try:
        text = version_py.read_text()
    except OSError:
        return None
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+)\.", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def site_roots() -> tuple[Path, ...]:
    """Directories on sys.path that may hold the `nvidia/` wheel namespace, in path order."""
    roots: list[Path] = []
    for entry in sys.path:
        p = Path(entry or ".")
        if (p / "nvidia").is_dir() and p not in roots:
            roots.append(p)
    return tuple(roots)


def wheel_candidates(root: Path) -> tuple[Candidate, ...]:
    """The NVRTC wheel layouts under one site-packages dir (whether present or not)."""
    nv = root / "nvidia"
    return (
        Candidate(
            how=f"pip wheel nvidia-cuda-nvrtc-cu12 in {root}",
            library=nv / "cuda_nvrtc" / "lib" / "libnvrtc.so.12",
            include_dirs=(nv / "cuda_runtime" / "include", nv / "cuda_nvrtc" / "include"),
            major=12,
        ),
        Candidate(
            how=f"pip wheel nvidia-cuda-nvrtc (CUDA 13) in {root}",
            library=nv / "cu13" / "lib" / "libnvrtc.so.13",
            include_dirs=(nv / "cu13" / "include",),
            major=13,
        ),
    )


def toolkit_candidate(home: Path, how: str) -> Candidate:
    """A CUDA toolkit installed under `home` (lib64/ or targets/<triple>/lib)."""
    libs = [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
    found = next((f for d in libs for f in _nvrtc_files(d)), None)
    return Candidate(
        how=how,
        library=found or home / "lib64" / "libnvrtc.so",
        include_dirs=(home / "include", home / "targets" / "x86_64-linux" / "include"),
    )


def _nvrtc_files(directory: Path) -> list[Path]:
    """libnvrtc.so* in a dir (never the builtins), shortest name first (.so.12 over .so.12.9)."""
    if not directory.is_dir():
        return []
    files = [p for p in directory.glob("libnvrtc.so*") if p.is_file()]
    return sorted(files, key=lambda p: (len(p.name), p.name))


def candidates(
    *,
    roots: Sequence[Path],
    torch_major: int | None,
    toolkit_homes: Sequence[tuple[str, Path]],
) -> list[Candidate]:
    """Every candidate in search order (steps 2 to 5 of the module docstring)."""
    wheels = [c for r in roots for c in wheel_candidates(r)]
    if torch_major is not None:  # stable sort: the matching major first, path order kept
        wheels.sort(key=lambda c: c.major != torch_major)
        note = f" (matches torch's CUDA {torch_major})"
        wheels = [
            Candidate(c.how + note, c.library, c.include_dirs, c.major)
            if c.major == torch_major
            else c
            for c in wheels
        ]
    return wheels + [toolkit_candidate(home, how) for how, home in toolkit_homes]


def has_headers(include_dirs: Sequence[Path]) -> bool:
    """True when every REQUIRED_HEADERS file is in one of the dirs."""
    return all(any((d / h).is_file() for d in include_dirs) for h in REQUIRED_HEADERS)


def search(
    cands: Sequence[Candidate],
    *,
    explicit_library: Path | None = None,
    explicit_include: Path | None = None,
) -> Location:
    """Picks the first candidate with both a library and the headers; raises listing every place.

    An explicit library replaces the candidates; an explicit include dir replaces every
    candidate's header dirs.
    """
    searched: list[str] = []
    if explicit_include is not None and not has_headers([explicit_include]):
        raise LibraryNotFoundError(
            "the CUDA headers",
            [f"SPIO_CUDA_INCLUDE={explicit_include}: no {' / '.join(REQUIRED_HEADERS)} there"],
            "Set SPIO_CUDA_INCLUDE to a directory holding cuda_fp16.h and cuda_bf16.h, or unset "
            "it to use the headers beside NVRTC.",
        )
    if explicit_library is not None:
        lib = Path(explicit_library)
        beside = (
            lib.parent.parent / "include",
            lib.parent.parent.parent / "cuda_runtime" / "include",
        )
        cands = [Candidate(f"SPIO_NVRTC={lib}", lib, beside)]
    for c in cands:
        if not c.library.is_file():
            searched.append(f"{c.how}: {c.library} (no such file)")
            continue
        incs = (explicit_include,) if explicit_include is not None else c.include_dirs
        incs = tuple(d for d in incs if d.is_dir())
        if not has_headers(incs):
            dirs = ", ".join(str(d) for d in (c.include_dirs if explicit_include is None else ()))
            searched.append(
                f"{c.how}: {c.library} found, but no {' / '.join(REQUIRED_HEADERS)} in [{dirs}]"
            )
            continue
        how = c.how + (
            f", headers from SPIO_CUDA_INCLUDE={explicit_include}"
            if explicit_include is not None
            else ""
        )
        return Location(c.library, incs, how, tuple(searched))
    raise LibraryNotFoundError("NVRTC (libnvrtc) with the CUDA headers", searched, _HINT)


def _toolkit_homes() -> list[tuple[str, Path]]:
    homes: list[tuple[str, Path]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):  # the toolkit's own variables, not spio knobs
        value = os.environ.get(var)
        if value:
            homes.append((f"{var}={value}", Path(value)))
    homes.append(("/usr/local/cuda", Path("/usr/local/cuda")))
    return homes


@functools.cache
def _locate(explicit_library: Path | None, explicit_include: Path | None) -> Location:
    cands = candidates(
        roots=site_roots(), torch_major=torch_cuda_major(), toolkit_homes=_toolkit_homes()
    )
    return search(cands, explicit_library=explicit_library, explicit_include=explicit_include)


def locate() -> Location:
    """Finds NVRTC and the CUDA headers (cached per SPIO_NVRTC / SPIO_CUDA_INCLUDE value)."""
    s = settings()
    return _locate(s.nvrtc, s.cuda_include)


def find_tool(name: str) -> Path | None:
    """A CUDA binary tool (cuobjdump, nvdisasm): on PATH, in NVIDIA's wheels
    (`nvidia/cu13/bin`, `nvidia/cuda_<name>/bin`), or in a toolkit's bin/; None when absent."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    wheel_bins = [("cu13", "bin"), (f"cuda_{name}", "bin")]
    for root in site_roots():
        for parts in wheel_bins:
            tool = root.joinpath("nvidia", *parts, name)
            if tool.is_file() and os.access(tool, os.X_OK):
                return tool
    for _, home in _toolkit_homes():
        tool = home / "bin" / name
        if tool.is_file() and os.access(tool, os.X_OK):
            return tool
    return None
