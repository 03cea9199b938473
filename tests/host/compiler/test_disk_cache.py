"""Every rule of the disk cache: the key, verified loads, atomic concurrent writes, compile once."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spio.compiler import DiskCache, compile, default_cache
from spio.compiler.cache import (
    FORMAT_VERSION,
    cache_key,
    decode_entry,
    encode_entry,
    include_checksum,
    tree_fingerprint,
)
from spio.compiler.compile import prepare
from spio.errors import CompileError, CompileForbiddenError
from spio.settings import override

BASE = dict(
    nvrtc_version=(12, 9),
    arch="sm_90",
    options=("-std=c++20", "-DA=1", "-DB=2"),
    source="kernel source",
    name="k.cu",
    generated="generated header",
    headers={"a.h": "A", "b.h": "B"},
    ptx=False,
    include_sum="0" * 64,
)


def _key(**changes) -> str:
    return cache_key(**{**BASE, **changes})


def test_key_is_stable_within_and_across_processes():
    assert _key() == _key()
    assert _key(headers={"b.h": "B", "a.h": "A"}) == _key()  # header order cannot matter
    code = (
        "import json, sys; from spio.compiler.cache import cache_key;"
        "kw = json.loads(sys.argv[1]); kw['nvrtc_version'] = tuple(kw['nvrtc_version']);"
        "print(cache_key(**kw))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(BASE)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == _key()


@pytest.mark.parametrize(
    "change",
    [
        {"nvrtc_version": (12, 8)},
        {"nvrtc_version": (13, 9)},
        {"arch": "sm_90a"},
        {"options": ("-std=c++20", "-DA=1", "-DB=3")},
        {"options": ("-std=c++20", "-DB=2", "-DA=1")},  # option order matters (-I, -D)
        {"options": ("-std=c++20", "-DA=1", "-DB=2", "-lineinfo")},
        {"options": ("-std=c++20", "-DA=1-DB=2")},  # no concatenation collisions
        {"source": "kernel source "},
        {"name": "other.cu"},
        {"generated": "generated header //"},
        {"generated": None},
        {"headers": {"a.h": "A", "b.h": "B2"}},
        {"headers": {"a.h": "A"}},
        {"ptx": True},
        {"include_sum": "1" + "0" * 63},
    ],
    ids=repr,
)
def test_key_changes_with_every_input(change):
    assert _key(**change) != _key()


def test_key_includes_the_format_version():
    assert FORMAT_VERSION.startswith("spio-")


def test_include_checksum_follows_every_header(tmp_path):
    root = tmp_path / "include"
    (root / "spio").mkdir(parents=True)
    (root / "spio" / "dim.h").write_text("#pragma once\n")
    checksum = include_checksum.__wrapped__
    first = checksum(root)
    assert checksum(root) == first
    (root / "spio" / "dim.h").write_text("#pragma once\n// edited\n")
    edited = checksum(root)
    (root / "spio" / "new.h").write_text("")
    added = checksum(root)
    (root / "spio" / "new.h").rename(root / "spio" / "renamed.h")
    assert len({first, edited, added, checksum(root)}) == 4
    assert include_checksum() == include_checksum()  # the real tree, computed once


def test_compiled_key_changes_with_the_include_checksum(tiny, monkeypatch):
    comp = importlib.import_module("spio.compiler.compile")  # the package's compile() shadows it

    a = prepare(tiny(), "sm_80").key
    monkeypatch.setattr(comp, "include_checksum", lambda: "changed")
    assert prepare(tiny(), "sm_80").key != a


def test_headers_from_caller_include_dirs_are_keyed(tmp_path, disk):
    """Editing a header the source includes through -I must recompile, never reuse a stale cubin."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 1\n")
    src = '#include "val.h"\nextern "C" __global__ void k(int* y) { y[0] = VAL; }\n'
    first = compile(src, "sm_80", options=(f"-I{inc}",), cache=disk)
    assert compile(src, "sm_80", options=(f"-I{inc}",), cache=disk) == first
    (inc / "val.h").write_text("#define VAL 12345\n")
    second = compile(src, "sm_80", options=(f"-I{inc}",), cache=disk)
    assert second != first
    assert compile(src, "sm_80", options=(f"--include-path={inc}",), cache=disk) == second
    assert disk.stats().compiles == 3  # -I and --include-path= are different options


def test_tree_fingerprint(tmp_path):
    root = tmp_path / "t"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.h").write_text("a")
    first = tree_fingerprint(root)
    assert tree_fingerprint(root) == first
    (root / "sub" / "a.h").write_text("ab")
    edited = tree_fingerprint(root)
    (root / "b.h").write_text("")
    added = tree_fingerprint(root)
    assert len({first, edited, added, tree_fingerprint(tmp_path / "missing")}) == 4


def test_entry_roundtrip_and_rejections():
    payload = os.urandom(1000)
    entry = encode_entry(payload)
    assert decode_entry(entry) == payload
    assert decode_entry(entry[:-1]) is None  # truncated
    assert decode_entry(entry[:20]) is None  # truncated inside the header
    assert decode_entry(b"") is None
    flipped = bytearray(entry)
    flipped[-5] ^= 0x40
    assert decode_entry(bytes(flipped)) is None  # corrupted payload
    assert decode_entry(b"X" + entry[1:]) is None  # foreign magic
    assert decode_entry(entry + b"\0") is None  # trailing garbage


def test_compiles_once(tiny, disk):
    images = [compile(tiny(), "sm_80", cache=disk) for _ in range(10)]
    assert len(set(images)) == 1
    s = disk.stats()
    assert (s.compiles, s.misses, s.hits) == (1, 1, 9)


def test_a_new_cache_object_reads_the_entry(tiny, disk):
    image = compile(tiny(), "sm_80", cache=disk)
    again = DiskCache(disk.root)
    with override(assert_no_compile=True):
        assert compile(tiny(), "sm_80", cache=again) == image
    assert again.stats().compiles == 0 and again.stats().hits == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_entry_is_a_miss_that_recompiles(damage, tiny, disk):
    image = compile(tiny(), "sm_80", cache=disk)
    path = disk.path(prepare(tiny(), "sm_80").key)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(os.urandom(len(data)))
    assert compile(tiny(), "sm_80", cache=disk) == image
    s = disk.stats()
    assert (s.compiles, s.corrupt) == (2, 1)
    assert decode_entry(path.read_bytes()) == image  # the entry was rewritten whole


def test_no_leftover_temp_files(tiny, disk):
    compile(tiny(), "sm_80", cache=disk)
    files = [p.name for p in disk.root.rglob("*") if p.is_file() and p.parent.name != "locks"]
    assert len(files) == 1 and files[0].endswith(".cubin")


def test_assert_no_compile(tiny, disk):
    with override(assert_no_compile=True), pytest.raises(CompileForbiddenError, match="kernel.cu"):
        compile(tiny(), "sm_80", cache=disk)
    with override(assert_no_compile=True), pytest.raises(CompileForbiddenError):
        compile(tiny(), "sm_80", cache=None)
    assert disk.stats().compiles == 0


def test_no_disk_cache_setting(tiny, tmp_path):
    with override(no_disk_cache=True):
        assert default_cache() is None
        compile(tiny(), "sm_80")
    assert not (tmp_path / "default-cache").exists()
    with override(cache_dir=tmp_path / "c"):
        assert default_cache() is default_cache()
        assert default_cache().root == tmp_path / "c"
        compile(tiny(), "sm_80")
        assert default_cache().stats().compiles == 1


def test_unusable_cache_dir_only_warns(tiny, tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    disk = DiskCache(blocker)
    assert compile(tiny(), "sm_80", cache=disk)[:4] == b"\x7fELF"
    assert "is not usable" in caplog.text


def test_compile_error_is_not_cached(broken, disk):
    for _ in range(2):
        with pytest.raises(CompileError):
            compile(broken, "sm_80", cache=disk)
    assert not list(disk.root.glob("kernels/*/*"))


def test_save_source(disk):
    src = '#include "x.h"\nextern "C" __global__ void k(int* y) { y[0] = X; }\n'
    with override(cache_save_source=True):
        compile(src, "sm_80", headers={"x.h": "#define X 1\n"}, options=("-DZ",), cache=disk)
    cubin = next(disk.root.glob("kernels/*/*.cubin"))
    assert cubin.with_suffix(".cu").read_text() == src
    assert cubin.with_suffix(".options").read_text().splitlines()[-1] == "-DZ"
    assert not cubin.with_suffix(".h").exists()  # no @spio blocks, no generated header


def test_disasm_with_a_tool(tiny, disk, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "cuobjdump"
    tool.write_text('#!/bin/sh\necho "SASS of $2"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    with override(disasm=True):
        compile(tiny(), "sm_80", cache=disk)
    sass = next(disk.root.glob("kernels/*/*.sass"))
    assert sass.read_text().startswith("SASS of ")
    sass.unlink()
    with override(disasm=True):
        compile(tiny(), "sm_80", cache=disk)  # a hit writes the missing dump
    assert sass.exists() and disk.stats().compiles == 1


def test_disasm_without_a_tool_only_warns(tiny, disk, monkeypatch, caplog):
    import spio.compiler.disasm as disasm

    monkeypatch.setattr(disasm, "find_tool", lambda name: None)
    with override(disasm=True):
        assert compile(tiny(), "sm_80", cache=disk)[:4] == b"\x7fELF"
    assert "neither cuobjdump nor nvdisasm" in caplog.text
    assert not list(disk.root.glob("kernels/*/*.sass"))


# Children are plain `python -c` processes (test modules are not importable from a spawned
# interpreter under pytest's importlib mode). Each one signals `ready`, then waits for `go`, so
# both do their work at the same moment.
_CHILD_PRELUDE = """
import pathlib, sys, time
root, me = pathlib.Path(sys.argv[1]), sys.argv[2]
from spio.compiler import DiskCache, compile
cache = DiskCache(root)
(root / f"ready-{me}").touch()
while not (root / "go").exists():
    time.sleep(0.001)
"""


def _start_children(root: Path, body: str, n: int = 2) -> list[subprocess.Popen]:
    root.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD_PRELUDE + body, str(root), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    deadline = time.monotonic() + 120
    while not all((root / f"ready-{i}").exists() for i in range(n)):
        assert time.monotonic() < deadline, [p.communicate() for p in procs]
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.005)
    (root / "go").touch()
    return procs


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_concurrent_processes_compile_one_key(tmp_path):
    body = (
        "src = 'extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 2; }'\n"
        "image = compile(src, 'sm_80', cache=cache)\n"
        "import hashlib; print(hashlib.sha256(image).hexdigest(), cache.stats().compiles)\n"
    )
    outs = [line.split() for line in _finish(_start_children(tmp_path, body))]
    assert outs[0][0] == outs[1][0]  # the same image
    assert int(outs[0][1]) + int(outs[1][1]) == 1  # the lock let only one process compile
    entries = list(tmp_path.glob("kernels/*/*.cubin"))
    assert len(entries) == 1 and decode_entry(entries[0].read_bytes()) is not None


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    """Two processes rewrite one key while this one reads it: every read is whole or absent."""
    body = (
        "payload = bytes(range(256)) * 1024\n"
        "for _ in range(300):\n"
        "    cache.put('ab' * 32, payload)\n"
    )
    payload = bytes(range(256)) * 1024
    procs = _start_children(tmp_path, body)
    reader = DiskCache(tmp_path)
    seen = 0
    while any(p.poll() is None for p in procs):
        got = reader.get("ab" * 32)
        assert got is None or got == payload
        seen += got is not None
    _finish(procs)
    assert seen > 0, "the reader never overlapped the writers; the test proved nothing"
    assert reader.get("ab" * 32) == payload and reader.stats().corrupt == 0


def test_second_process_with_assert_no_compile_hits(tiny, tmp_path):
    code = (
        "import sys; from spio.compiler import compile, default_cache;"
        "image = compile(sys.argv[1], 'sm_80');"
        "print(len(image), default_cache().stats().compiles)"
    )
    env = {**os.environ, "SPIO_CACHE_DIR": str(tmp_path / "shared")}
    first = subprocess.run(
        [sys.executable, "-c", code, tiny("two processes")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    env["SPIO_ASSERT_NO_COMPILE"] = "1"
    second = subprocess.run(
        [sys.executable, "-c", code, tiny("two processes")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    size = first.stdout.split()[0]
    assert first.stdout.split() == [size, "1"]
    assert second.stdout.split() == [size, "0"]
    third = subprocess.run(
        [sys.executable, "-c", code, tiny("never compiled")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert third.returncode != 0 and "CompileForbiddenError" in third.stderr
