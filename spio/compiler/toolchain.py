"""The NVRTC spio compiles with: located, loaded once, and described for `spio info`."""

from __future__ import annotations

from spio.compiler import nvrtc
from spio.compiler.locate import Location, locate


def toolchain() -> tuple[Location, nvrtc.Nvrtc]:
    """Where NVRTC was found and the loaded library (both cached; nothing happens at import)."""
    where = locate()
    return where, nvrtc.load(where.library)


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC in use."""
    return toolchain()[1].version


def supported_archs() -> tuple[str, ...]:
    """Every real architecture the NVRTC in use can compile for, as "sm_XX" names."""
    return tuple(f"sm_{a}" for a in toolchain()[1].supported_archs)


def describe() -> dict[str, str]:
    """What `spio info` prints about NVRTC: version, library, headers, how they were found."""
    where, lib = toolchain()
    major, minor = lib.version
    return {
        "version": f"{major}.{minor}",
        "library": str(where.library),
        "include": ", ".join(str(d) for d in where.include_dirs),
        "found via": where.how,
        "archs": " ".join(supported_archs()),
    }
