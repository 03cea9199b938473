"""`spio compile`: compile one CUDA source (with its @spio blocks) and report its resources.

Bad arguments (a file that cannot be read, an -I or -o directory that does not exist, an arch the
NVRTC in use cannot target) are usage errors: one line on stderr, exit 2, before anything
compiles. A compile error exits 1 with NVRTC's log.
"""

from __future__ import annotations

import sys
from pathlib import Path

from spio.errors import CompileError, SpioError


def _usage_error(message: str) -> int:
    print(f"spio compile: {message}", file=sys.stderr)
    return 2


def compile_file(
    file: str, arch: str, includes: list[str], output: str | None, ptx: bool, defines: list[str]
) -> int:
    from spio.compiler import compile as nvrtc_compile
    from spio.compiler import kernel_resources

    path = Path(file)
    if not path.is_file():
        return _usage_error(f"no such file: {file}")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return _usage_error(f"cannot read {file}: {e}")
    missing = [d for d in includes if not Path(d).is_dir()]
    if missing:
        return _usage_error(f"-I {missing[0]}: no such directory")
    out = Path(output) if output else path.with_suffix(".ptx" if ptx else ".cubin")
    if not out.parent.is_dir():
        return _usage_error(f"-o {out}: no such directory: {out.parent}")
    options = tuple(f"-I{Path(d).resolve()}" for d in includes) + tuple(f"-D{d}" for d in defines)
    try:
        image = nvrtc_compile(source, arch, options=options, name=path.name, ptx=ptx)
    except CompileError as e:
        print(str(e), file=sys.stderr)
        return 1
    except SpioError:
        raise  # NVRTC missing, an @spio block's error: `spio` prints it and exits 1
    except ValueError as e:
        # compile() validates its arguments first (the arch above all) with a message that names
        # the bad value and the fix.
        return _usage_error(str(e).removeprefix("compile: "))
    try:
        out.write_bytes(image)
    except OSError as e:
        print(f"spio compile: cannot write {out}: {e}", file=sys.stderr)
        return 1
    print(f"{path.name} -> {out} ({len(image)} bytes, {arch})")
    if not ptx:
        for kernel, res in sorted(kernel_resources(image).items()):
            print(f"  {kernel}: {res}")
    return 0
