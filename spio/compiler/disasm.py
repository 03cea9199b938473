"""SASS of a cubin, via cuobjdump (or nvdisasm): for SPIO_DISASM dumps and instruction-level tests.

The tools come from NVIDIA's wheels (`nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm`: the `test`
extra installs them) or a toolkit; `locate.find_tool` says where they are searched.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from spio.compiler.cache import atomic_write
from spio.compiler.locate import find_tool
from spio.errors import LibraryNotFoundError
from spio.logs import logger

_TOOLS = (("cuobjdump", ("-sass",)), ("nvdisasm", ("-c",)))


def disassemble(cubin: bytes) -> str:
    """The SASS text of a cubin (cuobjdump -sass; nvdisasm -c when cuobjdump is missing).

    Raises:
        LibraryNotFoundError: neither tool was found.
        RuntimeError: the tool failed (its message is included).
    """
    failures: list[str] = []
    for name, args in _TOOLS:
        tool = find_tool(name)
        if tool is None:
            failures.append(f"{name}: not found on PATH, in the NVIDIA wheels or in a toolkit")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            image = Path(tmp) / "kernel.cubin"
            image.write_bytes(cubin)
            run = subprocess.run([str(tool), *args, str(image)], capture_output=True, text=True)
        if run.returncode == 0:
            return run.stdout
        failures.append(f"{tool} {' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
    if all("not found" in f for f in failures):
        raise LibraryNotFoundError(
            "cuobjdump or nvdisasm",
            failures,
            "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (or `pip install spio[test]`)",
        )
    raise RuntimeError("could not disassemble the cubin:\n" + "\n".join(failures))


def instruction_counts(sass: str) -> dict[str, int]:
    """Opcode -> count over a SASS listing (predicates, modifiers stripped: HMMA.16816 -> HMMA)."""
    counts: dict[str, int] = {}
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def write_sass(cubin: bytes, out: Path) -> bool:
    """Writes the SASS of a cubin to `out` (atomically); False, with a warning, when it can't."""
    try:
        atomic_write(out, disassemble(cubin).encode())
        return True
    except LibraryNotFoundError:
        logger("spio.compiler").warning(
            "SPIO_DISASM=1 but neither cuobjdump nor nvdisasm was found; no SASS written"
        )
    except RuntimeError as e:
        logger("spio.compiler").warning("SPIO_DISASM=1: %s", e)
    return False
