"""`spio tune` says clearly what is missing instead of raising tracebacks (SPEC §10): collect with
no (usable) GPU, an unknown --device, kernels that are not tuned and unknown kernel names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from spio.cli.tune import main

LAYER = json.dumps({"n": 8, "c": 64, "h": 56, "w": 56})


def _exit_message(argv: list[str]) -> str:
    """Runs `spio tune argv` in-process; returns the SystemExit message (it must exit non-zero)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert isinstance(e.value.code, str), e.value.code  # a message, so the exit status is 1
    return e.value.code


def test_collect_without_a_gpu_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    msg = _exit_message(
        [
            "collect",
            "--kernel",
            "conv2d_gw8_fprop",
            "--minutes",
            "0.01",
            "--out",
            str(tmp_path / "d"),
        ]
    )
    assert msg.startswith("spio tune collect: needs a CUDA GPU"), msg
    assert "train, eval and select run without a GPU" in msg
    assert not (tmp_path / "d").exists()


def test_collect_without_a_gpu_from_the_spio_command_has_no_traceback(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this holds on a GPU machine too.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "SPIO_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "spio.cli.main", "tune", "collect", "--kernel", "matmul"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert "spio tune collect: needs a CUDA GPU" in out.stderr, out.stderr


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine with one GPU of compute capability 9.0, as far as collect's checks can tell."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Test GPU")
    return monkeypatch


@pytest.mark.parametrize("device", ["1", "-1", "gpu0"])
def test_collect_rejects_a_device_that_is_not_here(one_gpu, device):
    msg = _exit_message(["collect", "--kernel", "matmul", "--device", device])
    assert "--device must be a GPU ordinal 0..0 or 'all'" in msg and repr(device) in msg, msg


def test_collect_rejects_a_gpu_below_sm80(one_gpu):
    one_gpu.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 5))
    msg = _exit_message(["collect", "--kernel", "matmul"])
    assert "GPU 0 (Test GPU) has compute capability 7.5" in msg and "8.0" in msg, msg


@pytest.mark.parametrize("cmd", ["collect", "train", "eval", "select"])
@pytest.mark.parametrize(
    "kernel, parent",
    [
        ("layernorm_2d_bwd_reduce", "layernorm_2d_bwd"),
        ("conv2d_gw8_wgrad_reduce", "conv2d_gw8_wgrad"),
    ],
)
def test_untuned_reduce_kernels_are_a_clear_message(cmd, kernel, parent):
    extra = ["--params", "{}"] if cmd == "select" else []
    msg = _exit_message([cmd, "--kernel", kernel, *extra])
    assert msg.startswith(f"spio tune {cmd}: {kernel} is not tuned"), msg
    assert f"derived from {parent}'s config" in msg and "conv2d_gw8_fprop" in msg, msg


def test_unknown_kernel_lists_the_tuned_ones():
    msg = _exit_message(["eval", "--kernel", "conv3d"])
    assert "unknown kernel 'conv3d'" in msg and "matmul" in msg and "'all'" in msg, msg
    assert "_reduce" not in msg, msg  # only kernels that can be tuned are offered


def test_select_unknown_device_lists_known_devices():
    msg = _exit_message(["select", "--kernel", "conv2d_gw8_fprop", "--params", LAYER,
                         "--device", "RTX9999"])  # fmt: skip
    assert msg.startswith("spio tune select: unknown GPU 'RTX9999'"), msg
    assert "H100" in msg and "A100" in msg and "sm_90" in msg, msg


def test_select_all_is_a_clear_message():
    msg = _exit_message(["select", "--kernel", "all", "--params", LAYER])
    assert "one kernel's name" in msg, msg


def test_select_known_device_still_ranks(capsys):
    assert main(["select", "--kernel", "conv2d_gw8_fprop", "--params", LAYER, "--device", "sm_90",
                 "--top", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "conv2d_gw8_fprop" in out and "(sm_90)" in out and "  3. " in out, out


def test_tune_help_from_the_spio_command_lists_the_subcommands(capsys):
    from spio.cli.main import main as spio_main

    with pytest.raises(SystemExit) as e:
        spio_main(["tune", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spio tune"), out
    assert all(cmd in out for cmd in ("collect", "train", "eval", "select")), out
