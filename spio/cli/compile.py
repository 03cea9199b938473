"""`spio compile`: compile one CUDA source (with its @spio blocks) and report its resources."""

from __future__ import annotations

import sys
from pathlib import Path

from spio.errors import CompileError


def compile_file(
    file: str, arch: str, includes: list[str], output: str | None, ptx: bool, defines: list[str]
) -> int:
    from spio.compiler import compile as nvrtc_compile
    from spio.compiler import kernel_resources

    path = Path(file)
    if not path.is_file():
        print(f"spio compile: no such file: {file}", file=sys.stderr)
        return 2
    options = tuple(f"-I{Path(d).resolve()}" for d in includes) + tuple(f"-D{d}" for d in defines)
    try:
        image = nvrtc_compile(path.read_text(), arch, options=options, name=path.name, ptx=ptx)
    except CompileError as e:
        print(str(e), file=sys.stderr)
        return 1
    out = Path(output) if output else path.with_suffix(".ptx" if ptx else ".cubin")
    out.write_bytes(image)
    print(f"{path.name} -> {out} ({len(image)} bytes, {arch})")
    if not ptx:
        for kernel, res in sorted(kernel_resources(image).items()):
            print(f"  {kernel}: {res}")
    return 0
