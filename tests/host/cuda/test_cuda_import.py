"""spio.cuda at import and without a driver: nothing happens until first use, then a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_import_has_no_side_effects():
    # Importing every part of the binding opens no library and pulls in no torch.
    out = _python(
        "import sys; import spio.cuda, spio.cuda.driver, spio.cuda.args, spio.cuda.module;"
        "from spio.cuda import Module, Function, pack_args, known_device;"
        "maps = open('/proc/self/maps').read();"
        "print('torch' in sys.modules, 'libcuda' in maps, spio.cuda.driver.is_loaded())",
        SPIO_LIBCUDA="libcuda.so.1",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False"]


def test_first_use_without_libcuda_names_the_library_and_the_fix():
    # A fresh process, so no driver was loaded before: the error comes at first use, not import.
    code = (
        "import spio.cuda\n"
        "from spio.errors import LibraryNotFoundError\n"
        "try:\n"
        "    spio.cuda.Module.load(b'\\x7fELF')\n"
        "except LibraryNotFoundError as e:\n"
        "    print('raised:', e)\n"
        "print('count', spio.cuda.device_count(), 'version', spio.cuda.driver_version())\n"
    )
    out = _python(code, SPIO_LIBCUDA="/nonexistent/libcuda.so.1")
    assert out.returncode == 0, out.stderr
    assert "raised: could not find the CUDA driver library (libcuda)" in out.stdout
    assert "/nonexistent/libcuda.so.1" in out.stdout  # what was searched
    assert "SPIO_LIBCUDA" in out.stdout  # how to fix it
    assert "count 0 version None" in out.stdout  # queries for `spio info` do not raise


def test_missing_libcuda_in_process_with_override():
    from spio.cuda import driver
    from spio.errors import LibraryNotFoundError
    from spio.settings import override

    if driver.is_loaded():
        pytest.skip("a real driver is already loaded in this process (GPU machine)")
    with override(libcuda="/nonexistent/libcuda.so.1"):
        with pytest.raises(LibraryNotFoundError, match="nonexistent"):
            driver.synchronize()
        assert not driver.is_loaded()
