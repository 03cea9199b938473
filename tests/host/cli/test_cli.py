"""The `spio` command on a machine with no GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KERNEL = r"""
/*@spio
I = Dim()
@spio*/
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def _spio(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spio.cli.main", *args], capture_output=True, text=True, env=env
    )


def test_info_runs_without_gpu():
    out = _spio("info")
    assert out.returncode == 0, out.stderr
    assert "spio" in out.stdout and "NVRTC" in out.stdout and "cache dir" in out.stdout


def test_compile_writes_cubin_and_reports_resources(tmp_path: Path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    out = _spio("compile", str(src), "--arch", "sm_80", "-o", str(tmp_path / "k.cubin"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"
    assert "add_one" in out.stdout


def test_compile_error_exits_nonzero_with_log(tmp_path: Path):
    src = tmp_path / "bad.cu"
    src.write_text('extern "C" __global__ void f() { undefined_name = 1; }\n')
    out = _spio("compile", str(src))
    assert out.returncode == 1
    assert "undefined_name" in out.stderr


@pytest.mark.parametrize(
    "option, says",
    [
        (["--arch", "sm_999"], "spio compile: arch='sm_999' is not a target of NVRTC"),
        (["--arch", "90"], "spio compile: arch='90' is not a target of NVRTC"),
        (["-I", "{tmp}/no-such-dir"], "spio compile: -I {tmp}/no-such-dir: no such directory"),
        (
            ["-o", "{tmp}/no-dir/k.cubin"],
            "spio compile: -o {tmp}/no-dir/k.cubin: no such directory",
        ),
    ],
)
def test_compile_bad_option_is_one_line_and_exit_2(tmp_path: Path, option, says):
    # docs/cli.md: a bad option value is a usage error, exit 2, with no traceback.
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    out = _spio("compile", str(src), *(o.format(tmp=tmp_path) for o in option))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(says.format(tmp=tmp_path)), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "sm_90" in out.stderr or "-I" in option or "-o" in option, out.stderr  # names the fix


@pytest.mark.parametrize("content", ["missing", "directory", "not utf-8"])
def test_compile_unreadable_source_is_one_line_and_exit_2(tmp_path: Path, content):
    src = tmp_path / "k.cu"
    if content == "directory":
        src.mkdir()
    elif content == "not utf-8":
        src.write_bytes(b"\xff\xfe __global__")
    out = _spio("compile", str(src))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("spio compile: "), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr


def test_unknown_bench_family_is_a_clear_error():
    out = _spio("bench", "conv3d")
    assert out.returncode == 2
    assert "unknown family" in out.stderr and "matmul" in out.stderr


@pytest.mark.smoke
def test_help_lists_commands():
    out = _spio("--help")
    assert out.returncode == 0
    for cmd in ("info", "compile", "bench", "tune"):
        assert cmd in out.stdout


@pytest.mark.parametrize(("version", "shown"), [((12, 4), "12.4"), (None, "unknown")])
def test_info_gpu_lines_with_and_without_driver_version(monkeypatch, version, shown):
    # driver_version() is None when the driver reports no GPU; info prints "unknown" rather than
    # failing to unpack it and hiding the GPUs it did find.
    import spio.cuda
    from spio.cli.info import _gpu_lines

    h100 = spio.cuda.known_device("H100")
    monkeypatch.setattr(spio.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(spio.cuda, "driver_version", lambda: version)
    monkeypatch.setattr(spio.cuda, "device_attributes", lambda i: h100)
    lines = _gpu_lines()
    assert lines[0] == f"  CUDA driver: {shown}", lines
    assert lines[1].startswith(f"  GPU 0: {h100.name} ({h100.arch}), {h100.sm_count} SMs"), lines
    assert "smem/block opt-in" in lines[1], lines
