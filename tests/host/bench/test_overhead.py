"""`spio bench overhead` on the host: its options, its no-GPU exit, its cases, and its whole
measurement of a case on the CPU (spio's fallback next to PyTorch; no CUDA-graph column)."""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F

from spio.bench import overhead
from spio.bench.overhead_cases import OPS, PASSES, Case, cases, grad_leaves, pass_call


def test_defaults():
    args = overhead.build_parser().parse_args([])
    assert args.ops == list(OPS) and args.calls == 100 and args.batches is None
    assert args.csv is None and not args.quick


def test_options_parse():
    args = overhead.build_parser().parse_args(
        ["--ops", "matmul, conv2d_gw8", "--calls", "300", "--batches", "7", "--csv", "o.csv"]
    )
    assert args.ops == ["matmul", "conv2d_gw8"] and args.calls == 300 and args.batches == 7


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ops", "conv3d"], "unknown ['conv3d']; give a comma-separated list of conv2d_gw8"),
        (["--ops", ","], "empty"),
        (["--calls", "5"], "5 is not an integer in 10..1000"),
        (["--calls", "2000"], "queue of pending launches"),
        (["--calls", "many"], "'many' is not an integer"),
        (["--batches", "2"], "2 is not an integer >= 3 (a median and a spread need several)"),
        (["--csv", "."], "is a directory"),
    ],
)
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        overhead.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: spio bench overhead" in err and message in err, err


def test_without_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message; this machine has a CUDA GPU")
    assert overhead.main(["--quick"]) == 2
    assert "spio bench overhead: needs a CUDA GPU" in capsys.readouterr().out


def test_the_cases_the_issue_asks_for():
    got = [(c.op, c.label) for c in cases()]
    assert got == [
        ("conv2d_gw8", "N128 C512 7x7"),
        ("conv2d_gw8", "N128 C512 7x7 amp"),
        ("conv2d_gw8", "N128 C64 56x56"),
        ("conv2d_gw8", "N32 C128 28x28"),
        ("conv2d_gw8", "N128 C104 56x56 stride 2"),
        ("layernorm_2d", "N128 C512 7x7"),
        ("layernorm_2d", "N32 C128 28x28"),
        ("matmul", "16x4096x4096 W(N,K)"),
        ("matmul", "4096x4096x4096"),
    ]
    assert [c.op for c in cases(["matmul"])] == ["matmul", "matmul"]


def _small_conv_case() -> Case:
    """conv2d_gw8's case at a CPU-sized shape, float32 (the CPU fallback's dtype)."""
    import spio.functional as sf

    def inputs(device):
        x = torch.randn(1, 8, 4, 3, device=device).to(memory_format=torch.channels_last)
        return x, torch.randn(8, 8, 3, 3, device=device), torch.randn(8, device=device)

    return Case(
        "conv2d_gw8",
        "N1 C8 4x3",
        "F.conv2d",
        inputs,
        lambda x, w, b: sf.conv2d_gw8(x, w, b),
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
    )


def test_the_amp_case_calls_as_a_model_does_under_autocast():
    """float32 weight and bias, an fp16 activation, the calls inside autocast(fp16). (spio's op
    takes float32 weights under CUDA autocast only, so on the CPU the torch side is checked.)"""
    from spio.bench.overhead_cases import conv_case

    case = conv_case(1, 16, 5, amp=True)
    x, w, b = case.inputs(torch.device("cpu"))
    assert (x.dtype, w.dtype, b.dtype) == (torch.float16, torch.float32, torch.float32)
    assert "autocast" in case.baseline and case.label.endswith(" amp")
    assert case.torch(x, w, b).dtype == torch.float16  # autocast cast the weight
    with pytest.raises(RuntimeError):  # without autocast the dtypes mismatch
        F.conv2d(x, w, b, padding=1, groups=2)


def test_pass_calls_compute_the_gradients_and_reset_them():
    case = _small_conv_case()
    args = grad_leaves(case.inputs(torch.device("cpu")))
    assert all(t.requires_grad and t.is_leaf for t in args)
    step = pass_call(case.torch, args, "fwd+bwd")
    seen = []
    args[0].register_hook(lambda g: seen.append(g.shape))  # the input gradient is computed
    step()
    assert seen == [args[0].shape]
    assert all(t.grad is None for t in args)  # set back to None: no accumulation next call
    assert pass_call(case.spio, args, "fwd grad")().grad_fn is not None
    with pytest.raises(ValueError, match="unknown pass"):
        pass_call(case.spio, args, "bwd")


def test_measure_case_on_the_cpu(monkeypatch, tmp_path):
    monkeypatch.setattr(overhead, "cases", lambda ops: [_small_conv_case()])
    rows, notes = overhead.measure_case(
        _small_conv_case(), torch.device("cpu"), calls=10, batches=3, graph_samples=1
    )
    assert notes == []  # the CPU fallback computes what F.conv2d does
    assert [r["pass"] for r in rows] == list(PASSES)
    for r in rows:
        assert list(r)[: len(overhead.COLUMNS)] == list(overhead.COLUMNS)
        assert r["spio_kernel_us"] is None and r["torch_kernel_us"] is None  # no CUDA graphs
        assert 0 < r["spio_host_us"] <= r["spio_called_us"] * 1.5
        assert r["host_x"] == pytest.approx(r["spio_host_us"] / r["torch_host_us"])
        assert r["spio_host_p20_us"] <= r["spio_host_p80_us"]
    path = tmp_path / "o.csv"
    overhead.write_csv(rows, path)
    header = next(csv.reader(path.open()))
    assert header[:3] == ["op", "case", "pass"] and "torch_called_p80_us" in header


def test_a_wrong_result_is_reported():
    case = _small_conv_case()
    wrong = Case(case.op, case.label, case.baseline, case.inputs, case.spio, lambda x, w, b: -x)
    _, notes = overhead.measure_case(
        wrong, torch.device("cpu"), calls=10, batches=3, graph_samples=1
    )
    assert len(notes) == 1 and "WRONG forward" in notes[0]
