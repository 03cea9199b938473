"""Registers, shared memory and local memory of each kernel in a cubin, read without a GPU.

A cubin is an ELF64 file. What ptxas decided per kernel is recorded in it:
- `.nv.info` (global) holds attribute records `{u8 format, u8 attribute, u16 size}` + payload;
  EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11) carry `{u32 symbol index, u32 value}`:
  the registers per thread and the stack frame (local memory per thread: spills and local arrays).
- `.nv.shared.<kernel>` (SHT_NOBITS) has the kernel's static shared memory as its size. From
  sm_90 on, the section also holds a 1 KiB window that the system reserves at the start of every
  CTA's shared memory (every sm_90+ kernel has it, even one with no `__shared__` variable); it is
  reported apart so that `shared_bytes` matches what `ptxas -v` prints.

`parse_ptxas_log` reads the same numbers from an NVRTC log compiled with `--ptxas-options=-v`
(it also has the spill store/load byte counts, which the cubin does not record).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04
_SHT_SYMTAB = 2
_SM90_RESERVED_SMEM = 1024  # bytes at the start of .nv.shared.<kernel> on sm_90 and newer


@dataclass(frozen=True, slots=True)
class KernelResources:
    """Per-kernel resources as ptxas allocated them."""

    registers: int  # per thread
    shared_bytes: int  # static __shared__ per CTA (what ptxas -v calls smem)
    local_bytes: int  # stack frame per thread: spills + local arrays; 0 in a clean kernel
    reserved_shared_bytes: int = 0  # system-reserved smem per CTA in the cubin (sm_90+: 1 KiB)

    def __str__(self) -> str:
        text = f"{self.registers} registers, {self.shared_bytes} B static smem, "
        text += f"{self.local_bytes} B local (spills/stack)"
        if self.local_bytes:
            text += "  <- uses local memory"
        return text


def cubin_arch(cubin: bytes) -> int:
    """The SM version the cubin is for (e.g. 90), from the ELF header flags."""
    _check_elf(cubin)
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    # Two layouts seen: ELF OSABI 0x41 (CUDA 13; CUDA 12 from sm_100) keeps the SM in bits 8..15;
    # OSABI 0x33 (CUDA 12 up to sm_90) keeps it in bits 0..7.
    return (flags >> 8) & 0xFF if cubin[7] == 0x41 else flags & 0xFF


def kernel_resources(cubin: bytes) -> dict[str, KernelResources]:
    """Registers / static smem / local memory of every kernel (entry function) in a cubin."""
    _check_elf(cubin)
    sections = _sections(cubin)
    by_name = {name: (off, size, link) for name, _, off, size, link in sections}
    symbols = _symbol_names(cubin, sections)
    regs: dict[str, int] = {}
    frame: dict[str, int] = {}
    if ".nv.info" in by_name:
        off, size, _ = by_name[".nv.info"]
        for attr, payload in _attributes(cubin[off : off + size]):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(payload) >= 8:
                sym, value = struct.unpack_from("<II", payload)
                target = regs if attr == _EIATTR_REGCOUNT else frame
                if sym < len(symbols):
                    target[symbols[sym]] = value
    reserved = _SM90_RESERVED_SMEM if cubin_arch(cubin) >= 90 else 0
    # Entry functions have a per-kernel .nv.info.<name>; non-inlined device functions do not.
    texts = {n[len(".text.") :] for n in by_name if n.startswith(".text.")}
    kernels = sorted(k for k in texts if f".nv.info.{k}" in by_name)
    out: dict[str, KernelResources] = {}
    for k in kernels:
        smem_section = by_name.get(f".nv.shared.{k}", (0, 0, 0))[1]
        kernel_reserved = min(reserved, smem_section)
        out[k] = KernelResources(
            registers=regs.get(k, 0),
            shared_bytes=smem_section - kernel_reserved,
            local_bytes=frame.get(k, 0),
            reserved_shared_bytes=kernel_reserved,
        )
    return out


_PTXAS_FUNC = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


@dataclass(frozen=True, slots=True)
class PtxasReport:
    """One kernel's lines of a `ptxas -v` report."""

    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


def parse_ptxas_log(log: str) -> dict[str, PtxasReport]:
    """Per-kernel numbers from an NVRTC log of a compile with `--ptxas-options=-v`."""
    out: dict[str, PtxasReport] = {}
    current: str | None = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if m := _PTXAS_FUNC.search(line):
            current, frame = m.group(1), (0, 0, 0)
        elif current and (m := _PTXAS_FRAME.search(line)):
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif current and (m := _PTXAS_USED.search(line)):
            out[current] = PtxasReport(
                registers=int(m.group(1)),
                shared_bytes=int(m.group(2) or 0),
                stack_bytes=frame[0],
                spill_store_bytes=frame[1],
                spill_load_bytes=frame[2],
            )
            current = None
    return out


def _check_elf(data: bytes) -> None:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(
            "kernel_resources: the image is not a 64-bit little-endian ELF cubin "
            "(PTX text has no register allocation; compile with ptx=False)"
        )


def _sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of every section header."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = raw[shstrndx][4]
    return [(_cstr(data, strtab + s[0]), s[1], s[4], s[5], s[6]) for s in raw]


def _symbol_names(data: bytes, sections: list[tuple[str, int, int, int, int]]) -> list[str]:
    symtab = next((s for s in sections if s[1] == _SHT_SYMTAB), None)
    if symtab is None:
        return []
    _, _, off, size, link = symtab
    strings = sections[link][2]
    return [
        _cstr(data, strings + struct.unpack_from("<I", data, off + j)[0])
        for j in range(0, size, 24)
    ]


def _attributes(blob: bytes) -> Iterator[tuple[int, bytes]]:
    """Yields (attribute, payload) of a .nv.info section; payload is b"" for inline values."""
    pos = 0
    while pos + 4 <= len(blob):
        fmt, attr, size = struct.unpack_from("<BBH", blob, pos)
        pos += 4
        if fmt == _EIFMT_SVAL:
            yield attr, blob[pos : pos + size]
            pos += size
        else:
            yield attr, b""


def _cstr(data: bytes, offset: int) -> str:
    return data[offset : data.index(b"\0", offset)].decode(errors="replace")
