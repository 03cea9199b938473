"""ctypes binding of the NVRTC calls spio uses.

1. Only what spio needs is bound: version, supported archs, create / compile / destroy a program,
   its log, and its CUBIN or PTX.
2. A failing call raises `NvrtcError` (defined in `spio.errors`, importable from here) naming
   the call and NVRTC's message; a failing compile is not an error here: `compile_program`
   returns the log and no image, and the caller raises `spio.errors.CompileError` with the
   source it knows.
3. Every program is destroyed in a `finally`, whatever happens.
NVRTC programs are independent, so one `Nvrtc` may be used from several threads.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spio.errors import NvrtcError

_SUCCESS = 0
_ERROR_COMPILATION = 6


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What one NVRTC compile produced: the log always, the image only on success."""

    ok: bool
    log: str
    image: bytes | None


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_INT_P = ctypes.POINTER(ctypes.c_int)
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_STR_ARRAY = ctypes.POINTER(ctypes.c_char_p)

# name -> argtypes; every function returns nvrtcResult (int), except nvrtcGetErrorString.
_SIGNATURES: dict[str, list] = {
    "nvrtcVersion": [_INT_P, _INT_P],
    "nvrtcGetNumSupportedArchs": [_INT_P],
    "nvrtcGetSupportedArchs": [_INT_P],
    "nvrtcCreateProgram": [
        _PP,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_int,
        _STR_ARRAY,
        _STR_ARRAY,
    ],
    "nvrtcDestroyProgram": [_PP],
    "nvrtcCompileProgram": [_P, ctypes.c_int, _STR_ARRAY],
    "nvrtcGetProgramLogSize": [_P, _SIZE_P],
    "nvrtcGetProgramLog": [_P, ctypes.c_char_p],
    "nvrtcGetCUBINSize": [_P, _SIZE_P],
    "nvrtcGetCUBIN": [_P, ctypes.c_char_p],
    "nvrtcGetPTXSize": [_P, _SIZE_P],
    "nvrtcGetPTX": [_P, ctypes.c_char_p],
}


def _strings(items: Sequence[str]) -> ctypes.Array[ctypes.c_char_p]:
    arr = (ctypes.c_char_p * max(1, len(items)))()
    for i, s in enumerate(items):
        arr[i] = s.encode()
    return arr


class Nvrtc:
    """One loaded libnvrtc. Build it with `load(path)` (cached per path)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # libnvrtc dlopens libnvrtc-builtins by soname at compile time; load the one beside it
        # first so a wheel layout works without LD_LIBRARY_PATH (dlopen then finds it loaded).
        for builtins in sorted(self.path.parent.glob("libnvrtc-builtins.so*")):
            if ".alt." not in builtins.name:
                try:
                    ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    pass  # libnvrtc may still find its own; a real failure shows at compile time
                break
        # RTLD_LOCAL: never interpose on another NVRTC that torch may have loaded.
        self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self._lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self._lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        self._lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, call: str, status: int) -> None:
        if status != _SUCCESS:
            raise NvrtcError(call, status, self.error_string(status))

    def error_string(self, status: int) -> str:
        """NVRTC's text for a status code."""
        return (self._lib.nvrtcGetErrorString(status) or b"unknown").decode()

    @functools.cached_property
    def version(self) -> tuple[int, int]:
        """(major, minor) of this NVRTC."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(
            "nvrtcVersion", self._lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        )
        return major.value, minor.value

    @functools.cached_property
    def supported_archs(self) -> tuple[int, ...]:
        """Compute capabilities this NVRTC can target, as integers (80, 86, 90, ...)."""
        n = ctypes.c_int()
        self._check(
            "nvrtcGetNumSupportedArchs", self._lib.nvrtcGetNumSupportedArchs(ctypes.byref(n))
        )
        arr = (ctypes.c_int * n.value)()
        self._check("nvrtcGetSupportedArchs", self._lib.nvrtcGetSupportedArchs(arr))
        return tuple(sorted(arr))

    def compile_program(
        self,
        source: str,
        name: str,
        options: Sequence[str],
        headers: Mapping[str, str] | None = None,
        *,
        ptx: bool = False,
    ) -> CompileResult:
        """Compiles one translation unit; in-memory `headers` map include names to their text."""
        headers = dict(headers or {})
        names, texts = list(headers), [headers[k] for k in headers]
        prog = ctypes.c_void_p()
        self._check(
            "nvrtcCreateProgram",
            self._lib.nvrtcCreateProgram(
                ctypes.byref(prog),
                source.encode(),
                name.encode(),
                len(headers),
                _strings(texts),
                _strings(names),
            ),
        )
        try:
            status = self._lib.nvrtcCompileProgram(prog, len(options), _strings(list(options)))
            log = self._read(prog, "ProgramLog").decode(errors="replace").rstrip("\0")
            if status == _ERROR_COMPILATION:
                return CompileResult(ok=False, log=log, image=None)
            if status != _SUCCESS:  # e.g. an invalid option: the log says which
                raise NvrtcError(
                    "nvrtcCompileProgram", status, f"{self.error_string(status)}\n{log}"
                )
            image = self._read(prog, "PTX" if ptx else "CUBIN")
            if ptx:
                image = image.rstrip(b"\0")
            return CompileResult(ok=True, log=log, image=image)
        finally:
            self._lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _read(self, prog: ctypes.c_void_p, what: str) -> bytes:
        size = ctypes.c_size_t()
        self._check(
            f"nvrtcGet{what}Size",
            getattr(self._lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size)),
        )
        buf = ctypes.create_string_buffer(size.value)
        self._check(f"nvrtcGet{what}", getattr(self._lib, f"nvrtcGet{what}")(prog, buf))
        return buf.raw[: size.value]


@functools.cache
def load(path: Path) -> Nvrtc:
    """The NVRTC at `path`, loaded once per process."""
    return Nvrtc(Path(path))
