"""`spio bench`'s command line on a machine with no GPU: each family's own options are reachable
(`spio bench FAMILY --help`), checked before anything runs, and `--plot` without matplotlib is a
clear usage error; the benchmarks' long loops have progress bars that SPIO_PROGRESS=0 hides."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from spio.cli import bench as cli_bench
from spio.cli.main import main
from spio.settings import override

FLAGS = {
    "conv2d-gw8": ("--quick", "--csv", "--plot", "--kernel", "--dtype", "fprop,dgrad,wgrad"),
    "layernorm2d": ("--quick", "--csv", "--plot", "--dtype", "--sweep-bwd", "--sweep-reduce"),
    "matmul": ("--quick", "--csv", "--plot", "--dtype", "--shapes", "--sweep SIZE", "--bias",
               "--out-dtype"),
    "overhead": ("--quick", "--csv", "--ops", "--calls", "--batches"),
    "e2e": ("--quick", "--csv", "--models", "--batch", "--dtype", "--modes", "--steps", "--rounds",
            "--layers"),
}  # fmt: skip
PLOTTING = ("conv2d-gw8", "layernorm2d", "matmul")  # the families with --plot


@pytest.mark.parametrize("family", sorted(FLAGS))
def test_family_help_shows_the_benchmarks_own_options(family, capsys):
    assert main(["bench", family, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: spio bench {family}" in out, out
    for flag in FLAGS[family]:
        assert flag in out, (flag, out)
    others = [f for f in FLAGS if f != family]
    assert not any(f"== {f} ==" in out for f in others), out  # only the family asked about


def test_bench_help_lists_every_familys_options(capsys):
    assert main(["bench", "-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spio bench [FAMILY ...]"), out
    for family, flags in FLAGS.items():
        assert f"usage: spio bench {family}" in out
        assert all(flag in out for flag in flags), (family, out)


def test_family_help_from_the_spio_command():
    out = subprocess.run(
        [sys.executable, "-m", "spio.cli.main", "bench", "conv2d-gw8", "--help"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "--csv" in out.stdout and "--kernel" in out.stdout and "--plot" in out.stdout


@pytest.mark.parametrize(
    "tokens, families, options",
    [
        (["--quick", "conv2d-gw8"], ["conv2d-gw8"], ["--quick"]),
        (
            ["matmul", "--sweep", "8192", "--csv", "m.csv"],
            ["matmul"],
            ["--sweep", "8192", "--csv", "m.csv"],
        ),
        (
            ["--csv", "o.csv", "matmul", "layernorm2d"],
            ["matmul", "layernorm2d"],
            ["--csv", "o.csv"],
        ),
        (["conv3d", "--quick"], ["conv3d"], ["--quick"]),  # reported as an unknown family
        (
            ["conv2d-gw8", "--kernel", "fprop", "--", "--quick"],
            ["conv2d-gw8"],
            ["--kernel", "fprop", "--quick"],
        ),
    ],
)  # fmt: skip
def test_split_args(tokens, families, options):
    assert cli_bench.split_args(tokens) == (families, options)


@pytest.fixture
def no_run(monkeypatch):
    """Fails the test if a benchmark (or the no-GPU compile check) would start."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("the benchmark ran although its arguments were wrong")

    monkeypatch.setattr(cli_bench, "_has_gpu", must_not_run)
    return monkeypatch


def test_unknown_option_is_a_usage_error_before_anything_runs(no_run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "matmul", "--bogus"])
    assert e.value.code == 2
    assert "spio bench matmul: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_option_of_another_family_is_a_usage_error(no_run, capsys):
    # --sweep is matmul's; with every family chosen, conv2d-gw8's parser refuses it up front.
    with pytest.raises(SystemExit) as e:
        main(["bench", "--sweep", "8192"])
    assert e.value.code == 2
    assert "unrecognized arguments: --sweep 8192" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tokens, says",
    [
        (["matmul", "--sweep", "0"], "--sweep SIZE: a matrix size of at least 1, got 0"),
        (["matmul", "--sweep", "big"], "argument --sweep: invalid int value: 'big'"),
        (["matmul", "--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
        (["matmul", "--shapes", "512x1024"], "--shapes: each shape is MxNxK"),
        (["matmul", "--shapes", "1x2x3", "--sweep", "64"], "--shapes times the op"),
        (["matmul", "--sweep", "64", "--bias"], "--sweep times the mma.sync configs without bias"),
        (["matmul", "--out-dtype", "fp8"], "argument --out-dtype: invalid choice: 'fp8'"),
        (["conv2d-gw8", "--kernel", "fwd"], "argument --kernel: invalid choice: 'fwd'"),
    ],
)
def test_bad_option_value_is_a_usage_error(tokens, says, no_run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", *tokens])
    assert e.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("family", PLOTTING)
def test_plot_without_matplotlib_is_a_clear_error(family, no_run, capsys):
    no_run.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(SystemExit) as e:
        main(["bench", family, "--plot", "out.png"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err and "spio[bench]" in err, err
    # The benchmark module's own entry point (benchmarks/bench_*.py) refuses it the same way.
    with pytest.raises(SystemExit):
        importlib.import_module(cli_bench.FAMILIES[family]).main(["--plot", "out.png"])


@pytest.mark.parametrize("matplotlib", ["installed", "missing"])
def test_matmul_sweep_refuses_plot(no_run, capsys, matplotlib):
    # The conflict is reported first, with or without matplotlib: leaving out --plot fixes both.
    if matplotlib == "missing":
        no_run.setitem(sys.modules, "matplotlib", None)
    else:
        no_run.setattr("spio.bench.report.plotting_unavailable", lambda: None)
    entry_points = (
        lambda: importlib.import_module("spio.bench.matmul").main(["--sweep", "1024", "--plot=p"]),
        lambda: main(["bench", "matmul", "--sweep", "1024", "--plot", "p.png"]),
    )
    for run in entry_points:
        with pytest.raises(SystemExit) as e:
            run()
        assert e.value.code == 2 and "--sweep prints its configs" in capsys.readouterr().err


def test_options_reach_each_chosen_familys_benchmark(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli_bench, "_has_gpu", lambda: True)
    for family, module in cli_bench.FAMILIES.items():
        mod = importlib.import_module(module)
        monkeypatch.setattr(
            mod, "main", lambda argv, family=family: seen.setdefault(family, argv) and 0
        )
    assert main(["bench", "--quick", "matmul", "--dtype", "bf16", "layernorm2d"]) == 0
    assert seen == {
        "matmul": ["--quick", "--dtype", "bf16"],
        "layernorm2d": ["--quick", "--dtype", "bf16"],
    }


def test_progress_bar_honours_spio_progress(capsys):
    from spio.bench.progress import progress

    items = [1, 2, 3]
    with override(progress=False):
        assert progress(items, "sweep", "config") is items
    with override(progress=True):
        assert list(progress(items, "sweep", "config")) == items
    captured = capsys.readouterr()
    assert "sweep" in captured.err and "3/3" in captured.err, captured.err  # tqdm on stderr
    assert captured.out == ""


def test_output_files_get_the_family_name_when_several_families_run(monkeypatch, tmp_path):
    # Every family writes its own table: one --csv path for three families would keep only the
    # last one's rows.
    seen = {}
    monkeypatch.setattr(cli_bench, "_has_gpu", lambda: True)
    for family, module in cli_bench.FAMILIES.items():
        mod = importlib.import_module(module)
        monkeypatch.setattr(
            mod, "main", lambda argv, family=family: seen.setdefault(family, argv) and 0
        )
    # (with or without matplotlib here: its absence is a usage error tested on its own)
    monkeypatch.setattr("spio.bench.report.plotting_unavailable", lambda: None)
    csv = tmp_path / "out.csv"
    assert main(["bench", "--quick", "--csv", str(csv), f"--plot={tmp_path / 'p.png'}"]) == 0
    assert seen["matmul"] == ["--quick", "--csv", str(tmp_path / "out_matmul.csv"),
                              f"--plot={tmp_path / 'p_matmul.png'}"]  # fmt: skip
    assert seen["conv2d-gw8"][2] == str(tmp_path / "out_conv2d-gw8.csv")
    # One family: the paths are the user's own.
    seen.clear()
    assert main(["bench", "layernorm2d", "--csv", str(csv)]) == 0
    assert seen == {"layernorm2d": ["--csv", str(csv)]}


def test_plain_spio_bench_runs_the_kernel_families_only(monkeypatch):
    # overhead and e2e take other options (and e2e many minutes): they run only when named.
    seen = {}
    monkeypatch.setattr(cli_bench, "_has_gpu", lambda: True)
    for family, module in cli_bench.FAMILIES.items():
        mod = importlib.import_module(module)
        monkeypatch.setattr(
            mod, "main", lambda argv, family=family: seen.setdefault(family, argv) and 0
        )
    assert main(["bench", "--quick"]) == 0
    assert sorted(seen) == sorted(cli_bench.KERNEL_FAMILIES) == sorted(PLOTTING)
    seen.clear()
    assert main(["bench", "overhead", "--quick", "--calls", "50"]) == 0
    assert seen == {"overhead": ["--quick", "--calls", "50"]}


def test_overhead_without_gpu_says_so(monkeypatch, capsys):
    monkeypatch.setattr(cli_bench, "_has_gpu", lambda: False)
    assert main(["bench", "overhead", "--quick"]) == 1
    err = capsys.readouterr().err
    assert "spio bench overhead: needs a CUDA GPU" in err and "nothing measured" in err
    assert "Traceback" not in err


def test_kernel_and_op_call_families_without_gpu(monkeypatch, capsys):
    # The kernel family still gets its compile + fallback check; the op-call family says why not.
    checked = []
    monkeypatch.setattr(cli_bench, "_has_gpu", lambda: False)
    monkeypatch.setattr(
        cli_bench, "_compile_check", lambda chosen, options: checked.append(chosen) or 0
    )
    assert main(["bench", "matmul", "overhead"]) == 1
    assert checked == [["matmul"]]
    assert "spio bench overhead: needs a CUDA GPU" in capsys.readouterr().err


def test_e2e_without_timm_is_a_usage_error_before_anything_runs(no_run, capsys):
    no_run.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    with pytest.raises(SystemExit) as e:
        main(["bench", "e2e", "--quick"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "spio bench e2e: error: needs timm" in err and "pip install 'spio[bench]'" in err


def test_e2e_without_timm_from_the_spio_command():
    code = (
        "import sys; sys.modules['timm'] = None; from spio.cli.main import main; "
        "sys.exit(main(['bench', 'e2e']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "needs timm" in out.stderr and "Traceback" not in out.stderr
