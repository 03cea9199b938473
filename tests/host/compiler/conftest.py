"""Fixtures of the compiler tests: a private disk cache per test, and tiny kernel sources."""

from __future__ import annotations

import zlib

import pytest

from spio.compiler import DiskCache
from spio.settings import override


@pytest.fixture(autouse=True)
def _private_default_cache(tmp_path):
    """Keeps every compile of these tests out of the user's real cache dir."""
    with override(
        cache_dir=tmp_path / "default-cache",
        no_disk_cache=None,
        assert_no_compile=None,
        cache_save_source=None,
        disasm=None,
        lineinfo=None,
        debug=None,
    ):
        yield


@pytest.fixture
def disk(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


def _tiny(tag: object = 0) -> str:
    """A small valid kernel; `tag` makes the source, the key and the machine code distinct."""
    offset = zlib.crc32(repr(tag).encode()) % 100_000
    return (
        "#include <cuda_fp16.h>\n"
        "#include <cuda_bf16.h>\n"
        f'extern "C" __global__ void tiny(float* y, const __half* x) {{  // {tag}\n'
        f"    y[threadIdx.x] = __half2float(x[threadIdx.x]) * 2.0f + {offset}.0f;\n"
        "}\n"
    )


@pytest.fixture
def tiny():
    """tiny(tag) -> the source of a small valid kernel `tiny`; tags give distinct cache keys."""
    return _tiny


@pytest.fixture
def broken() -> str:
    """A kernel with an error on line 4."""
    return _BROKEN


_BROKEN = (
    "// line 1\n"
    "// line 2\n"
    'extern "C" __global__ void broken(float* y) {\n'
    "    y[0] = undefined_thing;\n"
    "}\n"
)
