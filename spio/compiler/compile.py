"""compile(): CUDA C++ source (with @spio blocks) -> cubin or PTX, through the disk cache.

A compile has three steps, split so the parallel pool can run the middle one in a worker:
`prepare` (validate, expand blocks, build the options and the cache key; cheap),
`build` (the NVRTC call; seconds), `store` (write the cache entry and the debug dumps).

Options always passed, in this order, before the caller's:
`-std=c++20`, `--gpu-architecture=sm_XX` (cubin; `compute_XX` for PTX), `-I<spio/include>`,
`-I<CUDA headers>`, then `-lineinfo` with SPIO_LINEINFO=1 and `-G` with SPIO_DEBUG=1.
No `-default-device`: spio's headers mark every function they want on the device, and a missing
annotation should be a compile error rather than silently device-only code. No fast math unless
the caller passes `--use_fast_math`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spio.compiler import nvrtc
from spio.compiler.cache import (
    INCLUDE_DIR,
    DiskCache,
    cache_key,
    default_cache,
    fixed_tree_fingerprint,
    include_checksum,
    tree_fingerprint,
)
from spio.compiler.disasm import write_sass
from spio.compiler.toolchain import toolchain
from spio.errors import CompileError, CompileForbiddenError
from spio.logs import logger
from spio.settings import settings

GENERATED_HEADER = "spio_generated.h"
_ARCH = re.compile(r"^sm_(\d+)([af]?)$")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A compile ready to run: everything NVRTC gets, plus the cache key. Plain data: pickles."""

    key: str
    name: str
    arch: str
    ptx: bool
    source: str  # the caller's source (for CompileError line numbers)
    text: str  # what NVRTC compiles (source behind the generated-header include)
    generated: str | None
    headers: tuple[tuple[str, str], ...]
    options: tuple[str, ...]
    library: Path  # the libnvrtc to use (a worker process loads the same one)


_UNSET: Any = object()


def compile(
    source: str,
    arch: str = "sm_90",
    *,
    options: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    name: str = "kernel.cu",
    ptx: bool = False,
    scope: Mapping[str, Any] | None = None,
    cache: DiskCache | None = _UNSET,
) -> bytes:
    """Compiles CUDA C++ to a cubin (or PTX text as bytes with `ptx=True`).

    Args:
        source: the translation unit. `/*@spio ... @spio*/` blocks in it are run with the
            generator names and `scope` in view; the header they generate is included first.
        arch: "sm_80", "sm_90", "sm_90a", ...; one of `supported_archs()`.
        options: extra NVRTC options, appended after spio's in this order.
        headers: in-memory headers, include name -> text.
        name: the file name NVRTC reports in errors and debug info.
        ptx: return PTX for `compute_XX` instead of a cubin.
        scope: extra generator specs (name -> spec) that kernel factories pass.
        cache: the DiskCache to use; default `default_cache()` (None when SPIO_NO_DISK_CACHE=1).
            Pass None to bypass the disk cache.

    Raises:
        CompileError: NVRTC rejected the source (log, numbered source, options).
        CompileForbiddenError: a compile was needed while SPIO_ASSERT_NO_COMPILE=1.
        GeneratorError: an @spio block failed (at `<name>:<line>` of the block).
        ValueError / TypeError: a bad argument (the message names it and the fix).
    """
    p = prepare(source, arch, options=options, headers=headers, name=name, ptx=ptx, scope=scope)
    disk = default_cache() if cache is _UNSET else cache
    return compile_prepared(p, disk)


def compile_prepared(p: Prepared, disk: DiskCache | None) -> bytes:
    """The cache lookup, the compile on a miss, and the store."""
    if disk is None:
        forbid_compile(p)
        return build(p)
    hit = lookup(p, disk)
    if hit is not None:
        return hit
    forbid_compile(p)
    from filelock import FileLock

    lock = disk.lock_path(p.key)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        guard = FileLock(str(lock))
        guard.acquire()  # one process compiles a key; the others then read its entry
    except OSError as e:
        logger("spio.compiler").warning(
            "spio cache: %s is not usable (%s); compiling without it", disk.root, e
        )
        return build(p)
    try:
        image = disk.get(p.key, p.ptx, count=False)
        if image is None:
            image = build(p)
            disk.record_compile()
            store(p, image, disk)
    finally:
        guard.release()
    return image


def lookup(p: Prepared, disk: DiskCache) -> bytes | None:
    """The cached image of a prepared compile (dumping SASS if asked and missing), or None."""
    image = disk.get(p.key, p.ptx)
    if image is not None and settings().disasm and not p.ptx:
        sass = disk.path(p.key).with_suffix(".sass")
        if not sass.exists():
            write_sass(image, sass)
    return image


def forbid_compile(p: Prepared) -> None:
    """Raises CompileForbiddenError when SPIO_ASSERT_NO_COMPILE=1."""
    if settings().assert_no_compile:
        raise CompileForbiddenError(f"{p.name} for {p.arch} (cache key {p.key[:16]})")


def prepare(
    source: str,
    arch: str = "sm_90",
    *,
    options: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    name: str = "kernel.cu",
    ptx: bool = False,
    scope: Mapping[str, Any] | None = None,
) -> Prepared:
    """Validates the arguments, expands @spio blocks, and builds the options and the key."""
    _check_args(source, arch, options, headers, name, scope)
    where, lib = toolchain()
    m = _ARCH.match(arch)
    if m is None or int(m.group(1)) not in lib.supported_archs:
        known = ", ".join(f"sm_{a}" for a in lib.supported_archs)
        raise ValueError(
            f"compile: arch={arch!r} is not a target of NVRTC {lib.version[0]}.{lib.version[1]} "
            f"({where.library}); use one of {known} (add 'a' for arch-specific features, "
            "e.g. sm_90a), or point SPIO_NVRTC at an NVRTC that knows it"
        )
    generated = _expand(source, name, scope)
    hdrs = dict(headers or {})
    text = source
    if generated is not None:
        if GENERATED_HEADER in hdrs:
            raise ValueError(
                f"compile: headers may not contain {GENERATED_HEADER!r} when the source has "
                "@spio blocks or a scope: spio generates that header; rename yours"
            )
        hdrs[GENERATED_HEADER] = generated
        text = f'#include "{GENERATED_HEADER}"\n#line 1 "{name}"\n{source}'
    target = ("compute_" if ptx else "sm_") + arch[3:]
    s = settings()
    opts = ["-std=c++20", f"--gpu-architecture={target}", f"-I{INCLUDE_DIR}"]
    opts += [f"-I{d}" for d in where.include_dirs]
    if s.lineinfo:
        opts.append("-lineinfo")
    if s.debug:
        opts.append("-G")
    opts += list(options)
    key = cache_key(
        nvrtc_version=lib.version,
        arch=arch,
        options=opts,
        source=text,
        name=name,
        generated=generated,
        headers={k: v for k, v in hdrs.items() if k != GENERATED_HEADER},
        ptx=ptx,
        include_sum=_include_sums(where.include_dirs, options),
    )
    return Prepared(
        key=key,
        name=name,
        arch=arch,
        ptx=ptx,
        source=source,
        text=text,
        generated=generated,
        headers=tuple(hdrs.items()),
        options=tuple(opts),
        library=where.library,
    )


def build(p: Prepared) -> bytes:
    """Runs NVRTC on a prepared compile; raises CompileError with the log on failure. A debug
    compile (-G) runs in a child process of its own: NVRTC 12.9 keeps state from one, so every
    later compile in the same process without -G came out different (another register
    allocation for the same key: seen as the Hopper matmul's SASS changing after a -G test
    compile, and such a cubin stored in the disk cache under the optimized key)."""
    start = time.perf_counter()
    if "-G" in p.options:
        result = _compile_apart(p)
    else:
        result = _compile_here(p)
    if not result.ok or result.image is None:
        raise CompileError(result.log, p.source, p.options, p.name)
    logger("spio.compiler").debug(
        "compiled %s for %s in %.2f s", p.name, p.arch, time.perf_counter() - start
    )
    return result.image


def _compile_here(p: Prepared) -> nvrtc.CompileResult:
    return nvrtc.load(p.library).compile_program(
        p.text, p.name, p.options, dict(p.headers), ptx=p.ptx
    )


def _compile_apart(p: Prepared) -> nvrtc.CompileResult:
    """`_compile_here` in a fresh Python process (the Prepared in on stdin, the result out on
    stdout, both pickled): nothing the compile leaves in NVRTC reaches this process."""
    import pickle
    import subprocess
    import sys

    code = "from spio.compiler.compile import _compile_child; _compile_child()"
    run = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(p), capture_output=True, check=False
    )
    if run.returncode != 0:
        raise RuntimeError(
            f"spio: the debug (-G) compile of {p.name} in a child process failed "
            f"(exit {run.returncode}): {run.stderr.decode(errors='replace')[-2000:]}"
        )
    result: nvrtc.CompileResult = pickle.loads(run.stdout)
    return result


def _compile_child() -> None:
    """The child side of `_compile_apart`."""
    import pickle
    import sys

    p = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(_compile_here(p)))


def store(p: Prepared, image: bytes, disk: DiskCache) -> None:
    """Writes the entry, and the debug dumps the settings ask for (a full or read-only disk only
    costs a warning: the image is still returned)."""
    try:
        disk.put(p.key, image, p.ptx)
    except OSError as e:
        logger("spio.compiler").warning(
            "spio cache: could not write %s (%s)", disk.path(p.key, p.ptx), e
        )
        return
    s = settings()
    if s.cache_save_source:
        disk.put_text(p.key, ".cu", p.text)
        disk.put_text(p.key, ".options", "\n".join(p.options) + "\n")
        if p.generated is not None:
            disk.put_text(p.key, ".h", p.generated)
    if s.disasm and not p.ptx:
        write_sass(image, disk.path(p.key).with_suffix(".sass"))


def _include_sums(cuda_dirs: Sequence[Path], options: Sequence[str]) -> str:
    """What the files a compile can #include from disk are: spio/include (content checksum, once
    per process), the CUDA headers (fingerprint, once per process) and the caller's -I dirs
    (fingerprint, every compile: they may change while the process runs)."""
    sums = [include_checksum()] + [fixed_tree_fingerprint(Path(d)) for d in cuda_dirs]
    for opt in options:
        for prefix in ("-I", "--include-path="):
            if opt.startswith(prefix) and len(opt) > len(prefix):
                sums.append(tree_fingerprint(Path(opt[len(prefix) :].strip())))
    return ";".join(sums)


def _expand(source: str, name: str, scope: Mapping[str, Any] | None) -> str | None:
    if not scope and "@spio" not in source:
        return None  # blocks.expand returns None for these too; skip importing the generators
    from spio.generators.blocks import expand

    return expand(source, name, dict(scope or {}))


def _check_args(source: Any, arch: Any, options: Any, headers: Any, name: Any, scope: Any) -> None:
    """TypeError for an argument of the wrong type (they come from users: anything goes in)."""
    if not isinstance(source, str):
        raise TypeError(
            f"compile: source must be str (the CUDA C++ text), got {type(source).__name__}"
        )
    if not isinstance(arch, str):
        raise TypeError(f"compile: arch must be a str like 'sm_90', got {arch!r}")
    if isinstance(options, str | bytes) or not all(isinstance(o, str) for o in options):
        raise TypeError(
            f"compile: options must be a sequence of str, one option each, got {options!r}; "
            "write options=('-DX=1',) rather than options='-DX=1'"
        )
    if headers is not None and not (
        isinstance(headers, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise TypeError("compile: headers must map include names (str) to header text (str)")
    if not isinstance(name, str) or not name:
        raise TypeError(f"compile: name must be a non-empty str like 'kernel.cu', got {name!r}")
    if scope is not None and not isinstance(scope, Mapping):
        raise TypeError(
            f"compile: scope must map names to generator specs, got {type(scope).__name__}"
        )
