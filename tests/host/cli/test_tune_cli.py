"""`spio tune` says clearly what is missing instead of raising tracebacks (SPEC §10): collect with
no (usable) GPU (exit 1), and the usage errors (exit 2): an unknown --device, kernels that are not
tuned, unknown kernel names, bad --params, --data files that are not there, counts out of range."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spio.cli.tune import main

LAYER = json.dumps({"n": 8, "c": 64, "h": 56, "w": 56})


def _exit_message(argv: list[str]) -> str:
    """Runs `spio tune argv` in-process; returns the SystemExit message of a precondition it
    cannot meet (exit status 1)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert isinstance(e.value.code, str), e.value.code  # a message, so the exit status is 1
    return e.value.code


def _usage_error(argv: list[str], capsys) -> str:
    """Runs `spio tune argv` in-process; returns the one line it printed for a bad option value
    (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2, e.value.code
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no usage block, no traceback
    return err.strip()


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
def test_collect_rejects_a_device_that_is_not_here(one_gpu, device, capsys):
    msg = _usage_error(["collect", "--kernel", "matmul", "--device", device], capsys)
    assert "--device must be a GPU ordinal 0..0 or 'all'" in msg and repr(device) in msg, msg


def test_collect_active_needs_a_config_budget(one_gpu, capsys):
    msg = _usage_error(["collect", "--kernel", "matmul", "--active"], capsys)
    assert "--active" in msg and "needs --max-configs N" in msg, msg


@pytest.mark.parametrize(
    "text, expect",
    [
        ("[{", "is neither a JSON list nor JSON lines"),
        ("", "lists no shapes"),
        ("[]", "lists no shapes"),
        ("[5]", "shape 0 of"),
        ('[{"c": 24, "m": 1000}, {"c": 24, "rows": 9}]', "shape 1 of"),
        ('{"c": 24, "m": 9, "dtype": "int8"}\n{"c": 24, "m": 9}', "shape 0 of"),
    ],
)
def test_collect_shapes_file_errors_name_the_shape(one_gpu, tmp_path, capsys, text, expect):
    """`--shapes FILE`: an unreadable, empty or ill-formed list, or a shape the family's params
    reject, is one usage line naming the file and the shape's index (before any GPU work)."""
    path = tmp_path / "shapes.json"
    path.write_text(text)
    argv = ["collect", "--kernel", "layernorm_2d_fwd", "--shapes", str(path)]
    msg = _usage_error(argv, capsys)
    assert msg.startswith("spio tune collect: --shapes") and expect in msg, msg
    missing = _usage_error(argv[:-1] + [str(tmp_path / "nope.json")], capsys)
    assert "cannot read" in missing, missing


def test_collect_shapes_with_configs_measure_only_those(one_gpu, tmp_path, capsys):
    """`--shapes FILE` entries {"params": ..., "configs": [...]}: collect gets each shape once,
    in order, and the family's `configs` gives a listed shape only its listed configs that are in
    the space (space order; the others reported and skipped); a shape also listed bare keeps its
    whole space; a gzipped file reads the same."""
    import gzip

    import spio.tune.collect as col
    from spio.cuda.device import known_device
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.tune.features import to_dict

    dev = known_device("sm_90")
    a = Conv2dGw8Params(n=32, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1)
    b = Conv2dGw8Params(n=8, c=208, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    space_a = wg.configs(a, dev)
    picked = [space_a[7], space_a[2]]
    outside = dataclasses.replace(space_a[0], block_q=128)  # past the first tile covering Q
    entries = [
        {"params": to_dict(a), "configs": [to_dict(picked[0])]},
        to_dict(b),
        {"params": to_dict(b), "configs": [to_dict(wg.configs(b, dev)[0])]},  # b stays whole
        {"params": to_dict(a), "configs": [to_dict(picked[1]), to_dict(outside)]},
    ]
    seen = []

    def fake_collect(kdef, minutes, out, ordinal, seed, max_configs, active, shapes, **kw):
        assert kw == {"compile_ahead": True}
        seen.append([(p, kdef.configs(p, dev)) for p in shapes])
        return 0

    one_gpu.setattr(col, "collect", fake_collect)
    text = json.dumps(entries)
    for name, data in (("s.json", text.encode()), ("s.json.gz", gzip.compress(text.encode()))):
        path = tmp_path / name
        path.write_bytes(data)
        argv = ["collect", "--kernel", "conv2d_gw8_wgrad", "--shapes", str(path)]
        assert main([*argv, "--out", str(tmp_path / "o.jsonl")]) == 0
        got = seen[-1]
        assert [p for p, _ in got] == [a, b]
        assert got[0][1] == sorted(picked, key=space_a.index)
        assert got[1][1] == wg.configs(b, dev)
        assert "1 listed configs of" in capsys.readouterr().err
    truncated = tmp_path / "t.json.gz"
    truncated.write_bytes(gzip.compress(text.encode())[:40])
    msg = _usage_error(
        ["collect", "--kernel", "conv2d_gw8_wgrad", "--shapes", str(truncated)], capsys
    )
    assert "cannot read" in msg, msg
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"params": to_dict(a), "config": []}]))
    msg = _usage_error(["collect", "--kernel", "conv2d_gw8_wgrad", "--shapes", str(bad)], capsys)
    assert "shape 0 of" in msg and '"configs" list' in msg, msg


def test_collect_compile_ahead_reaches_every_collector(one_gpu, tmp_path):
    """Compile-ahead is on unless --no-compile-ahead, in collect and in each GPU's worker with
    --device all."""
    import spio.tune.collect as col

    got = []
    one_gpu.setattr(col, "collect", lambda *a, **kw: got.append(kw["compile_ahead"]) or 0)
    one_gpu.setattr(col, "collect_all_gpus", lambda *a: got.append(a[-1]) or 0)
    out = str(tmp_path / "o.jsonl")
    for extra in (
        [],
        ["--no-compile-ahead"],
        ["--compile-ahead"],
        ["--device", "all"],
        ["--device", "all", "--no-compile-ahead"],
    ):
        assert main(["collect", "--kernel", "matmul", "--out", out, *extra]) == 0
    assert got == [True, False, True, True, False]


def test_collect_shapes_need_one_family_and_one_gpu(one_gpu, tmp_path, capsys):
    path = tmp_path / "shapes.json"
    path.write_text('[{"c": 24, "m": 1000}]')
    for extra in (["--kernel", "all"], ["--kernel", "layernorm_2d_fwd", "--device", "all"]):
        msg = _usage_error(["collect", *extra, "--shapes", str(path)], capsys)
        assert "--shapes lists one family's layers for one GPU" in msg, msg


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
def test_untuned_reduce_kernels_are_a_clear_message(cmd, kernel, parent, capsys):
    extra = ["--params", "{}"] if cmd == "select" else []
    msg = _usage_error([cmd, "--kernel", kernel, *extra], capsys)
    assert msg.startswith(f"spio tune {cmd}: {kernel} is not tuned"), msg
    assert f"derived from {parent}'s config" in msg and "conv2d_gw8_fprop" in msg, msg


def test_unknown_kernel_lists_the_tuned_ones(capsys):
    msg = _usage_error(["eval", "--kernel", "conv3d"], capsys)
    assert "unknown kernel 'conv3d'" in msg and "matmul" in msg and "'all'" in msg, msg
    assert "_reduce" not in msg, msg  # only kernels that can be tuned are offered


def test_select_unknown_device_lists_known_devices(capsys):
    msg = _usage_error(["select", "--kernel", "conv2d_gw8_fprop", "--params", LAYER,
                        "--device", "RTX9999"], capsys)  # fmt: skip
    assert msg.startswith("spio tune select: unknown GPU 'RTX9999'"), msg
    assert "H100" in msg and "A100" in msg and "sm_90" in msg, msg


def test_select_all_is_a_clear_message(capsys):
    msg = _usage_error(["select", "--kernel", "all", "--params", LAYER], capsys)
    assert "one kernel's name" in msg, msg


@pytest.mark.parametrize(
    "params, says",
    [
        ("{", "Expecting"),
        ('{"n": 8}', "missing"),
        ('{"n": -8, "c": 64, "h": 56, "w": 56}', "got -8"),
    ],
)
def test_select_bad_params_name_the_fields(params, says, capsys):
    msg = _usage_error(["select", "--kernel", "conv2d_gw8_fprop", "--params", params], capsys)
    assert msg.startswith("spio tune select: --params for conv2d_gw8_fprop needs the fields")
    assert "'n'" in msg and says in msg, msg


@pytest.mark.parametrize("cmd", ["train", "eval"])
def test_data_that_is_not_there_is_a_usage_error(cmd, tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    msg = _usage_error([cmd, "--kernel", "matmul", "--data", str(missing)], capsys)
    assert msg == f"spio tune {cmd}: --data {missing}: no such file (nor per-GPU shards " + (
        f"{missing}.gpuN)"
    ), msg


def test_data_given_as_its_shards_is_read(tmp_path, capsys):
    # `collect --device all` writes FILE.gpu0, FILE.gpu1, ...; --data FILE reads them.
    (tmp_path / "d.jsonl.gpu0").write_text("")
    assert main(["eval", "--kernel", "matmul", "--data", str(tmp_path / "d.jsonl")]) == 0
    assert "matmul: no samples" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["collect", "--kernel", "matmul", "--minutes", "-1"], "--minutes: must be at least"),
        (["collect", "--kernel", "matmul", "--minutes", "nan"], "--minutes: must be at least"),
        (["collect", "--kernel", "matmul", "--max-configs", "0"], "--max-configs: must be at"),
        (["eval", "--kernel", "matmul", "--folds", "1"], "--folds: must be at least 2"),
        (["eval", "--kernel", "matmul", "--folds", "x"], "--folds: invalid int value: 'x'"),
        (["eval", "--kernel", "matmul", "--seeds", "0"], "--seeds: must be at least 1"),
        (["eval", "--kernel", "matmul", "--worst", "-1"], "--worst: must be at least 0"),
        (["select", "--kernel", "matmul", "--params", "{}", "--top", "0"], "--top: must be at"),
    ],
)
def test_counts_out_of_range_are_usage_errors(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


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


def test_eval_with_a_fixed_model_checks_it_names_the_family(tmp_path, capsys):
    models = Path(__file__).resolve().parents[3] / "spio" / "tune" / "models"
    wgrad = next(models.glob("conv2d_gw8_wgrad__*.json.gz"))
    msg = _usage_error(["eval", "--kernel", "conv2d_gw8_fprop", "--model", str(wgrad)], capsys)
    assert msg == f"spio tune eval: --model {wgrad} is a conv2d_gw8_wgrad model, not " + (
        "conv2d_gw8_fprop"
    ), msg
    msg = _usage_error(["eval", "--kernel", "all", "--model", str(wgrad)], capsys)
    assert "--model scores one family's model: name one --kernel" in msg, msg
    bad = tmp_path / "m.json.gz"
    bad.write_bytes(b"not gzip")
    msg = _usage_error(["eval", "--kernel", "conv2d_gw8_wgrad", "--model", str(bad)], capsys)
    assert msg.startswith(f"spio tune eval: --model {bad}: cannot load it ("), msg


def test_eval_as_selected_says_so(capsys):
    """--as-selected ranks as the op selects (here the shipped layernorm_2d_bwd dataset, whose
    backward selects at its rows' bucket) and the report says it, its autotune a lower bound."""
    data = Path(__file__).resolve().parents[3] / "benchmarks/data/tune/layernorm_2d_bwd.jsonl.gz"
    assert main(["eval", "--kernel", "layernorm_2d_bwd", "--data", str(data), "--folds", "2",
                 "--as-selected"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "ranked as the op selects (select_key)" in out and "a lower bound" in out, out


def test_eval_over_seeds_prints_the_spread_and_refuses_a_fixed_model(capsys):
    """--seeds N trains the folds' models under N seeds and prints each statistic's mean and
    range; with --model nothing is trained, so the two together are a usage error."""
    data = Path(__file__).resolve().parents[3] / "benchmarks/data/tune/layernorm_2d_bwd.jsonl.gz"
    assert main(["eval", "--kernel", "layernorm_2d_bwd", "--data", str(data), "--folds", "2",
                 "--seeds", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2 training seeds: mean (lowest-highest) of each statistic" in out, out
    assert "with SPIO_AUTOTUNE (fastest of its 5 candidates at the shape), same shapes: median" in (
        out
    ), out
    models = Path(__file__).resolve().parents[3] / "spio" / "tune" / "models"
    bwd = next(models.glob("layernorm_2d_bwd__*.json.gz"))
    msg = _usage_error(["eval", "--kernel", "layernorm_2d_bwd", "--model", str(bwd), "--seeds",
                        "2"], capsys)  # fmt: skip
    assert msg == "spio tune eval: --seeds trains the folds' models; --model ranks with one model"


def test_eval_worst_lists_the_complete_shapes_of_largest_pick_regret(capsys):
    """--worst N: after the report, the N held-out complete shapes of largest pick regret, worst
    first (the first is the whole-space max), each with autotune's regret, the best config's
    rank and the two configs; with --seeds, seed 0's (a negative N: the usage-error test)."""
    import re

    data = Path(__file__).resolve().parents[3] / "benchmarks/data/tune/layernorm_2d_bwd.jsonl.gz"
    argv = ["eval", "--kernel", "layernorm_2d_bwd", "--data", str(data), "--folds", "2"]
    assert main([*argv, "--worst", "3"]) == 0
    out = capsys.readouterr().out
    assert "worst complete shapes (pick regret, autotune regret, the best config's rank):" in out
    picks = [float(m) for m in re.findall(r"^    (\d\.\d+)x, \d\.\d+x, best ranked \d+ of \d+: ",
                                          out, re.M)]  # fmt: skip
    assert len(picks) == 3 and picks == sorted(picks, reverse=True), out
    top = re.search(r"every config measured\): median [\d.]+x, p90 [\d.]+x, max ([\d.]+)x", out)
    assert top is not None and float(top.group(1)) == picks[0], out
    assert out.count("\n      best LayerNorm2dConfig(") == 3 and out.count("; pick ") == 3, out
    assert main([*argv, "--seeds", "2", "--worst", "1"]) == 0
    out = capsys.readouterr().out
    assert "seed 0: worst complete shapes" in out and out.count(", best ranked ") == 1, out
    assert main(argv) == 0 and "worst complete shapes" not in capsys.readouterr().out
