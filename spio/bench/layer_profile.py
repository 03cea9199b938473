"""`spio bench e2e --layers`: the layers spio replaced in a model, each at its shape in that
model, timed against the PyTorch module it replaced; and the model's whole GPU time per step.

Shapes come from forward hooks on PyTorch's model during one forward of the benchmark's batch
(under autocast, so the recorded dtype is the one the layer sees in training). Layers of equal
shape and settings are timed once and counted. A layer's time is one training step of it alone:
y = layer(x) under autocast, y.backward(gy), x's and the parameters' grads set back to None;
the GPU time is the GPU's busy time with its activities under torch.profiler
(spio.bench.gpu_time), so it includes autocast's weight casts and the gradient reductions, and
no host time; each side's longest GPU activities go to the CSV (`torch_kernels`,
`spio_kernels`). The model's GPU time per training step is measured the same way over eager
steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from spio.bench.gpu_time import GpuTime, profiled_gpu_time
from spio.bench.model_pair import ModelPair
from spio.bench.train_step import DTYPES, train_step

WARMUP = 3
LAYER_CALLS = 10


@dataclass(frozen=True)
class LayerInput:
    """What one replaced layer sees in the model: its input's shape and dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def layer_inputs(pair: ModelPair, inputs: torch.Tensor, dtype: str) -> dict[str, LayerInput]:
    """The input of every module the transform replaced (by path), from one forward of PyTorch's
    model on `inputs` under autocast to `dtype`."""
    seen: dict[str, LayerInput] = {}
    handles = []
    for path, _ in pair.report.replaced:

        def hook(module: nn.Module, args: tuple, path: str = path) -> None:
            x = args[0]
            seen.setdefault(path, LayerInput(tuple(x.shape), x.dtype))

        handles.append(pair.torch.get_submodule(path).register_forward_pre_hook(hook))
    try:
        with torch.no_grad(), torch.autocast(inputs.device.type, dtype=DTYPES[dtype]):
            pair.torch(inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


def describe(module: nn.Module, shape: tuple[int, ...]) -> str:
    """The layer's shape and settings, from the PyTorch module spio replaced."""
    n, c, h, w = shape
    if isinstance(module, nn.Conv2d):
        r, s = module.kernel_size
        pad = (
            module.padding
            if isinstance(module.padding, str)
            else ",".join(map(str, module.padding))
        )
        bias = "" if module.bias is None else " bias"
        return f"N{n} C{c} {h}x{w} k{r}x{s} pad {pad}{bias}"
    eps = getattr(module, "eps", None)
    return f"C{c} rows {n * h * w} (N{n} {h}x{w}) eps {eps:g}" if eps else f"C{c} N{n} {h}x{w}"


def layer_step(module: nn.Module, x: torch.Tensor, dtype: str) -> Callable[[], None]:
    """One training step of `module` alone on x (a leaf that requires grad)."""
    device = x.device.type
    with torch.no_grad(), torch.autocast(device, dtype=DTYPES[dtype]):
        gy = torch.randn_like(module(x))
    params = list(module.parameters())

    def step() -> None:
        with torch.autocast(device, dtype=DTYPES[dtype]):
            y = module(x)
        y.backward(gy)
        x.grad = None
        for p in params:
            p.grad = None

    return step


def _gpu_time(fn: Callable[[], object], calls: int, device: torch.device) -> GpuTime:
    for _ in range(WARMUP):
        fn()
    return profiled_gpu_time(fn, calls, device)


def profile_layers(pair: ModelPair, inputs: torch.Tensor, dtype: str) -> list[dict]:
    """One row per distinct replaced layer: shape, count, fwd+bwd GPU µs of each side, and
    each side's longest GPU activities (`torch_kernels`, `spio_kernels`: for the CSV)."""
    groups: dict[tuple, list[str]] = {}
    for path, shape_dtype in layer_inputs(pair, inputs, dtype).items():
        module = pair.torch.get_submodule(path)
        key = (type(module).__name__, describe(module, shape_dtype.shape), shape_dtype)
        groups.setdefault(key, []).append(path)
    rows = []
    for (kind, shape, layer_input), paths in groups.items():
        x = torch.randn(layer_input.shape, device=inputs.device, dtype=layer_input.dtype)
        x = x.to(memory_format=torch.channels_last).requires_grad_()
        times = {}
        for side, model in (("torch", pair.torch), ("spio", pair.spio)):
            step = layer_step(model.get_submodule(paths[0]), x, dtype)
            times[side] = _gpu_time(step, LAYER_CALLS, inputs.device)
        rows.append(
            {
                "model": pair.name,
                "layer": kind,
                "shape": shape,
                "dtype": str(layer_input.dtype).removeprefix("torch."),
                "count": len(paths),
                "torch_us": times["torch"].total_us,
                "spio_us": times["spio"].total_us,
                "speedup": times["torch"].total_us / times["spio"].total_us,
                "first": paths[0],
                "torch_kernels": times["torch"].top(),
                "spio_kernels": times["spio"].top(),
            }
        )
    return rows


def profile_steps(
    pair: ModelPair, inputs: torch.Tensor, labels: torch.Tensor, dtype: str, steps: int
) -> dict[str, GpuTime]:
    """The GPU time per eager training step of each model ({"torch": ..., "spio": ...}): busy
    µs and each activity's, so a kernel's time inside whole steps can be read (where its operands
    sit in the L2 as training leaves them, not as a layer repeated alone leaves them)."""
    out = {}
    for side, model in (("torch", pair.torch), ("spio", pair.spio)):
        step = train_step(model, inputs, labels, dtype=dtype, mode="eager")
        out[side] = _gpu_time(step, steps, inputs.device)
    return out
