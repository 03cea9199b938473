"""Finding NVRTC and the CUDA headers: order, explicit settings, the error when nothing is there."""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import pytest

from spio.compiler import locate as loc
from spio.errors import LibraryNotFoundError
from spio.settings import override


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def _fake_site(root: Path, *, cu12: bool = True, cu13: bool = True, headers: bool = True) -> Path:
    """A site-packages dir with the NVRTC wheel layouts (empty files: only paths are searched)."""
    nv = root / "nvidia"
    if cu12:
        _touch(nv / "cuda_nvrtc" / "lib" / "libnvrtc.so.12")
        if headers:
            for h in loc.REQUIRED_HEADERS:
                _touch(nv / "cuda_runtime" / "include" / h)
    if cu13:
        _touch(nv / "cu13" / "lib" / "libnvrtc.so.13")
        if headers:
            for h in loc.REQUIRED_HEADERS:
                _touch(nv / "cu13" / "include" / h)
    return root


def _fake_toolkit(home: Path) -> Path:
    _touch(home / "lib64" / "libnvrtc.so.13")
    _touch(home / "lib64" / "libnvrtc-builtins.so.13.0")
    for h in loc.REQUIRED_HEADERS:
        _touch(home / "include" / h)
    return home


def test_real_environment_finds_nvrtc_with_headers():
    where = loc.locate()
    assert where.library.is_file()
    assert loc.has_headers(where.include_dirs)
    assert where.how


def test_torch_matching_wheel_comes_first(tmp_path):
    site = _fake_site(tmp_path / "site")
    cands = loc.candidates(roots=[site], torch_major=13, toolkit_homes=[])
    where = loc.search(cands)
    assert where.library.name == "libnvrtc.so.13"
    assert "matches torch's CUDA 13" in where.how
    cands = loc.candidates(roots=[site], torch_major=12, toolkit_homes=[])
    assert loc.search(cands).library.name == "libnvrtc.so.12"


def test_without_torch_cuda_the_cu12_wheel_comes_first(tmp_path):
    site = _fake_site(tmp_path / "site")
    where = loc.search(loc.candidates(roots=[site], torch_major=None, toolkit_homes=[]))
    assert where.library == site / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12"
    assert where.include_dirs[0] == site / "nvidia" / "cuda_runtime" / "include"


def test_wheels_come_before_toolkits(tmp_path):
    site = _fake_site(tmp_path / "site", cu12=False)
    home = _fake_toolkit(tmp_path / "cuda")
    cands = loc.candidates(roots=[site], torch_major=None, toolkit_homes=[("CUDA_HOME", home)])
    assert loc.search(cands).library.parent == site / "nvidia" / "cu13" / "lib"


def test_toolkit_when_no_wheel(tmp_path):
    home = _fake_toolkit(tmp_path / "cuda")
    cands = loc.candidates(roots=[], torch_major=12, toolkit_homes=[("CUDA_HOME=x", home)])
    where = loc.search(cands)
    assert where.library == home / "lib64" / "libnvrtc.so.13"  # never the builtins library
    assert where.how == "CUDA_HOME=x"


def test_library_without_headers_is_skipped_and_reported(tmp_path):
    site = _fake_site(tmp_path / "site", cu13=False, headers=False)
    home = _fake_toolkit(tmp_path / "cuda")
    cands = loc.candidates(
        roots=[site], torch_major=None, toolkit_homes=[("/usr/local/cuda", home)]
    )
    where = loc.search(cands)
    assert where.library.parent == home / "lib64"
    assert any("found, but no cuda_fp16.h" in s for s in where.searched)


def test_nothing_found_lists_every_place_searched(tmp_path):
    site = tmp_path / "site"
    (site / "nvidia").mkdir(parents=True)
    homes = [("CUDA_HOME=/opt/none", tmp_path / "none"), ("/usr/local/cuda", tmp_path / "lc")]
    cands = loc.candidates(roots=[site], torch_major=12, toolkit_homes=homes)
    with pytest.raises(LibraryNotFoundError) as info:
        loc.search(cands)
    err = info.value
    assert len(err.searched) == len(cands) == 4
    text = str(err)
    for c in cands:
        assert str(c.library) in text
    assert "pip install nvidia-cuda-nvrtc-cu12" in text and "SPIO_NVRTC" in text
    again = pickle.loads(pickle.dumps(err))
    assert again.searched == err.searched and str(again) == text


def test_explicit_library_is_the_only_candidate(tmp_path):
    site = _fake_site(tmp_path / "site")
    missing = tmp_path / "nope" / "libnvrtc.so.12"
    cands = loc.candidates(roots=[site], torch_major=None, toolkit_homes=[])
    with pytest.raises(LibraryNotFoundError, match="SPIO_NVRTC=.*nope"):
        loc.search(cands, explicit_library=missing)
    home = _fake_toolkit(tmp_path / "cuda")
    where = loc.search(cands, explicit_library=home / "lib64" / "libnvrtc.so.13")
    assert where.library == home / "lib64" / "libnvrtc.so.13"
    assert where.include_dirs == (home / "include",)  # headers beside the explicit library


def test_explicit_include_overrides_headers(tmp_path):
    site = _fake_site(tmp_path / "site", headers=False)
    inc = tmp_path / "inc"
    for h in loc.REQUIRED_HEADERS:
        _touch(inc / h)
    cands = loc.candidates(roots=[site], torch_major=None, toolkit_homes=[])
    where = loc.search(cands, explicit_include=inc)
    assert where.include_dirs == (inc,)
    assert "SPIO_CUDA_INCLUDE" in where.how
    with pytest.raises(LibraryNotFoundError, match="SPIO_CUDA_INCLUDE"):
        loc.search(cands, explicit_include=tmp_path / "empty")


def test_settings_reach_locate(tmp_path):
    real = loc.locate()
    with override(nvrtc=str(real.library)):
        assert loc.locate().library == real.library
        assert "SPIO_NVRTC" in loc.locate().how
    with override(nvrtc=str(tmp_path / "libnvrtc.so.99")), pytest.raises(LibraryNotFoundError):
        loc.locate()


def test_torch_cuda_major_is_read_without_importing_torch(tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('torch must not be imported')\n")
    version = pkg / "version.py"
    spec = importlib.util.spec_from_file_location("torch", pkg / "__init__.py")
    monkeypatch.setattr(loc.importlib.util, "find_spec", lambda name: spec)
    version.write_text("from typing import Optional\ncuda: Optional[str] = '12.8'\n")
    assert loc.torch_cuda_major() == 12
    version.write_text("cuda = '13.0'\n")
    assert loc.torch_cuda_major() == 13
    version.write_text("cuda: Optional[str] = None\n")
    assert loc.torch_cuda_major() is None


def test_cuda_home_and_cuda_path_are_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "path"))
    homes = loc._toolkit_homes()
    assert [h for _, h in homes] == [tmp_path / "home", tmp_path / "path", Path("/usr/local/cuda")]


def test_find_tool_on_path(tmp_path, monkeypatch):
    tool = _touch(tmp_path / "bin" / "cuobjdump")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert loc.find_tool("cuobjdump") == tool
