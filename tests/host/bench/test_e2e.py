"""`spio bench e2e` on the host: options, the missing-timm and no-GPU exits (timm simulated), and
its parts on a tiny CPU model: the model pair and transform summary, the training step, the
interleaved timing loop, the per-layer shapes, and the profiler's GPU-time sum."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from spio.bench import e2e
from spio.bench.gpu_time import device_times
from spio.bench.interleave import compare, time_rounds
from spio.bench.layer_profile import describe, layer_inputs, layer_step
from spio.bench.model_pair import build_pair, logits_rel_err, summary
from spio.bench.train_step import MODES, compiled, train_step


@pytest.fixture
def fake_timm(monkeypatch):
    """timm as far as the argument check uses it: a registry of two model names."""
    timm = types.ModuleType("timm")
    timm.is_model = lambda name: name in ("regnetx_002", "regnety_004", "convnext_atto", "tiny")
    monkeypatch.setitem(sys.modules, "timm", timm)
    return timm


@pytest.fixture
def no_timm(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError


def test_defaults(fake_timm):
    args = e2e.parse_args(e2e.build_parser(), [], e2e.check_args)
    assert args.models == ["regnetx_002", "regnety_004", "convnext_atto"]
    assert args.batch is None and args.dtype == "fp16" and args.modes is None
    assert not args.layers and args.csv is None


def test_options_parse(fake_timm):
    args = e2e.parse_args(
        e2e.build_parser(),
        ["--models", "tiny", "--batch", "8", "--dtype", "bf16", "--modes", "eager,compile",
         "--steps", "3", "--rounds", "2", "--warmup", "4", "--csv", "e.csv"],
        e2e.check_args,
    )  # fmt: skip
    assert args.models == ["tiny"] and args.batch == 8 and args.dtype == "bf16"
    assert args.modes == ["eager", "compile"] and (args.steps, args.rounds, args.warmup) == (
        3,
        2,
        4,
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--modes", "jit"], "unknown ['jit']; give a comma-separated list of eager, compile"),
        (["--batch", "0"], "0 is not an integer >= 1"),
        (["--dtype", "fp8"], "invalid choice: 'fp8'"),
        (["--warmup", "2"], "reduce-overhead records its CUDA graphs"),
        (["--models", "resnet_bogus"], "timm has no model ['resnet_bogus']"),
        (["--models", ""], "empty"),
        (["--layers", "--modes", "eager"], "--layers profiles eager steps"),
        (["--layers", "--rounds", "3"], "--layers profiles eager steps"),
    ],
)
def test_bad_options_are_usage_errors(argv, message, fake_timm, capsys):
    with pytest.raises(SystemExit) as e:
        e2e.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: spio bench e2e" in err and message in err, err


def test_without_timm_says_how_to_install_it(no_timm, capsys):
    with pytest.raises(SystemExit) as e:
        e2e.main([])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "needs timm" in err and "pip install 'spio[bench]'" in err and "pip install timm" in err


def test_help_needs_no_timm(no_timm, capsys):
    with pytest.raises(SystemExit) as e:
        e2e.main(["--help"])
    assert e.value.code == 0
    assert "--layers" in capsys.readouterr().out


def test_without_gpu_says_so(fake_timm, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message; this machine has a CUDA GPU")
    assert e2e.main(["--quick"]) == 2
    assert "spio bench e2e: needs a CUDA GPU" in capsys.readouterr().out


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: LayerNorm over the channels of NCHW (what the transform replaces)."""

    def forward(self, x):
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias)
        return x.permute(0, 3, 1, 2)


def tiny_model() -> nn.Module:
    """A grouped conv of group width 8 and a LayerNorm2d (both replaced), a stride-3 grouped
    conv (kept: stride), a classifier; bf16, which the spio layers' CPU fallback takes (under
    CPU autocast a float32 model would mix float32 and bf16 in the conv's backward)."""
    layers = nn.Sequential(
        nn.Conv2d(16, 16, 3, padding=1, groups=2),
        LayerNorm2d(16),
        nn.Conv2d(16, 16, 3, stride=3, padding=1, groups=2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    return layers.to(torch.bfloat16)


@pytest.fixture
def pair():
    return build_pair("tiny", tiny_model, torch.device("cpu"))


def test_pair_starts_from_the_same_weights_and_computes_the_same(pair):
    assert summary(pair.report) == (
        "replaced 2 modules: 1 Conv2dGw8, 1 LayerNorm2d; kept 1 (1x stride must be 1 or 2)"
    )
    assert type(pair.torch[0]) is nn.Conv2d and type(pair.spio[0]).__name__ == "Conv2dGw8"
    assert torch.equal(pair.torch[0].weight, pair.spio[0].weight)
    assert pair.torch[0].weight is not pair.spio[0].weight  # a copy: trained separately
    x = torch.randn(2, 16, 6, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert logits_rel_err(pair, x, torch.bfloat16) < 1e-2
    assert pair.torch.training and pair.spio.training


def test_summary_counts_kinds_conditions_and_rules():
    from spio.layers import TransformReport

    report = TransformReport(
        replaced=[("a", "Conv2dGw8"), ("b", "Conv2dGw8"), ("n", "LayerNorm2d")],
        skipped=[
            ("c", "Conv2dGw8.from_conv2d: stride must be 1 or 2, got (3, 3)"),
            ("d", "Conv2dGw8.from_conv2d: group width must be 8 (groups = C / 8 = 3), got 1"),
            ("e", "Conv2dGw8.from_conv2d: stride must be 1 or 2, got (1, 3)"),
        ],
        conditions={"a": "float32 weights: ...", "b": "float32 weights: ..."},
    )
    assert summary(report) == (
        "replaced 3 modules: 2 Conv2dGw8, 1 LayerNorm2d (2 with a condition); kept 3 "
        "(2x stride must be 1 or 2; 1x group width must be 8)"
    )
    assert summary(TransformReport()) == "replaced 0 modules: nothing; kept 0"


def test_training_steps_and_interleaved_timing_on_the_cpu(pair):
    x = torch.randn(4, 16, 6, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (4,))
    steps = {
        side: train_step(model, x, y, dtype="bf16", mode="eager")
        for side, model in (("torch", pair.torch), ("spio", pair.spio))
    }
    before = pair.spio[5].weight.detach().clone()
    losses = {side: step() for side, step in steps.items()}
    assert all(torch.isfinite(v) for v in losses.values())
    assert not torch.equal(before, pair.spio[5].weight)  # the optimizer stepped
    times = time_rounds(steps, rounds=2, steps=2, sync=lambda: None)
    c = compare(times["torch"], times["spio"])
    assert c.baseline.n == c.candidate.n == 2 and c.ratio > 0


def test_modes():
    m = nn.Linear(2, 2)
    assert compiled(m, "eager") is m
    assert MODES == ("eager", "compile", "reduce-overhead")
    with pytest.raises(ValueError, match="unknown mode"):
        compiled(m, "jit")
    with pytest.raises(ValueError, match="unknown dtype"):
        train_step(
            m, torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), dtype="fp8", mode="eager"
        )


def test_layer_inputs_and_descriptions(pair):
    x = torch.randn(3, 16, 6, 5, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    seen = layer_inputs(pair, x, "bf16")
    assert set(seen) == {"0", "1"}  # the replaced paths
    assert seen["0"].shape == (3, 16, 6, 5) and seen["0"].dtype == torch.bfloat16
    assert describe(pair.torch[0], seen["0"].shape) == "N3 C16 6x5 k3x3 pad 1,1 bias"
    assert describe(pair.torch[1], seen["1"].shape) == "C16 rows 90 (N3 6x5) eps 1e-05"
    assert not pair.torch[0]._forward_pre_hooks  # the hooks are removed


def test_layer_step_resets_the_gradients(pair):
    x = torch.randn(2, 16, 4, 4, dtype=torch.bfloat16).requires_grad_()
    step = layer_step(pair.spio[0], x, "bf16")
    step()
    assert x.grad is None and all(p.grad is None for p in pair.spio[0].parameters())


def test_device_times_per_call_and_name():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(name, device, start, us):
        return SimpleNamespace(
            name=name, device_type=device, time_range=SimpleNamespace(start=start, end=start + us)
        )

    events = [event("gemm", cuda, 0.0, 6.0), event("aten::mm", cpu, 0.0, 100.0),
              event("memset", cuda, 10.0, 1.0), event("gemm", cuda, 20.0, 4.0)]  # fmt: skip
    t = device_times(events, calls=2)
    assert t.total_us == 5.5 and t.by_name == {"gemm": 5.0, "memset": 0.5}
    assert t.top(1) == "gemm 5.0" and t.top(5, width=3) == "gem 5.0; mem 0.5"
    assert device_times([]).total_us == 0.0


def test_device_times_counts_overlapping_activities_once():
    """A PDL-launched kernel (spio's wgrad reduction) starts while its producer runs: the busy
    time counts the overlap once; the per-name durations keep each kernel's own span."""
    cuda = torch.autograd.DeviceType.CUDA

    def event(name, start, end):
        return SimpleNamespace(
            name=name, device_type=cuda, time_range=SimpleNamespace(start=start, end=end)
        )

    events = [event("wgrad", 0.0, 50.0), event("reduce", 5.0, 55.0), event("next", 60.0, 70.0),
              event("inside", 10.0, 20.0)]  # fmt: skip
    t = device_times(events)
    assert t.total_us == 65.0
    assert t.by_name == {"wgrad": 50.0, "reduce": 50.0, "next": 10.0, "inside": 10.0}


def test_the_kernels_only_one_step_has():
    """`spio bench e2e --layers` names the kernels of spio's step that torch's step lacks (spio's
    own, read inside whole steps): their durations, nothing shared."""
    from spio.bench.gpu_time import GpuTime

    spio_step = GpuTime(100.0, {"conv2d_gw8_fprop": 30.0, "gemm": 50.0, "bn": 20.0})
    torch_step = GpuTime(120.0, {"cudnn_conv": 50.0, "gemm": 50.0, "bn": 20.0})
    own = spio_step.only_in(torch_step)
    assert own.by_name == {"conv2d_gw8_fprop": 30.0} and own.total_us == 30.0
    assert torch_step.only_in(spio_step).by_name == {"cudnn_conv": 50.0}
    assert spio_step.only_in(spio_step).total_us == 0.0
