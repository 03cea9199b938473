"""The op calls `spio bench overhead` times: each spio op at a few shapes next to the PyTorch call
it replaces, and the three ways a model calls it.

The spio side calls `spio.functional`'s public ops exactly as a user does (so the benchmark
follows whatever the op's host path becomes); the PyTorch side is the call a model would make
instead. Both are wrapped in one lambda of the same shape, so the wrapper costs them the same.
All fp16; activations channels_last.

Passes (`PASSES`):
  fwd        y = op(inputs), no input requires grad (inference)
  fwd grad   the same with every input requiring grad (a layer inside a model): adds the cost of
             recording the autograd graph
  fwd+bwd    y = op(inputs); y.backward(gy); every input's .grad set back to None (so no
             accumulation kernel runs): a training step of the layer

A case marked "amp" calls both sides as a model's layer runs under mixed precision: inside
torch.autocast(fp16), the weight and bias float32 (a model's Parameters), the activation fp16.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

PASSES = ("fwd", "fwd grad", "fwd+bwd")
OPS = ("conv2d_gw8", "layernorm_2d", "matmul")
DTYPE = torch.float16
CL = torch.channels_last
EPS = 1e-6


@dataclass(frozen=True)
class Case:
    """One op at one shape: its inputs and the two calls to compare."""

    op: str  # the spio.functional op
    label: str  # the shape
    baseline: str  # the PyTorch call it is compared with
    inputs: Callable[[torch.device], tuple[torch.Tensor, ...]]
    spio: Callable[..., torch.Tensor]
    torch: Callable[..., torch.Tensor]


def _conv_inputs(
    n: int, c: int, hw: int, weight_dtype: torch.dtype = DTYPE
) -> Callable[[torch.device], tuple[torch.Tensor, ...]]:
    def make(device: torch.device) -> tuple[torch.Tensor, ...]:
        x = torch.randn(n, c, hw, hw, device=device, dtype=DTYPE).to(memory_format=CL)
        w = (0.2 * torch.randn(c, 8, 3, 3, device=device)).to(weight_dtype)
        b = (0.1 * torch.randn(c, device=device)).to(weight_dtype)
        return x, w, b

    return make


def _under_autocast(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """op called inside torch.autocast(DTYPE) on its first argument's device type."""

    def call(*args: torch.Tensor) -> torch.Tensor:
        with torch.autocast(args[0].device.type, dtype=DTYPE):
            return op(*args)

    return call


def _norm_inputs(n: int, c: int, hw: int) -> Callable[[torch.device], tuple[torch.Tensor, ...]]:
    def make(device: torch.device) -> tuple[torch.Tensor, ...]:
        x = (1 + torch.randn(n, c, hw, hw, device=device)).to(DTYPE).to(memory_format=CL)
        w = (1 + 0.1 * torch.randn(c, device=device)).to(DTYPE)
        b = (0.1 * torch.randn(c, device=device)).to(DTYPE)
        return x, w, b

    return make


def _matmul_inputs(m: int, n: int, k: int, b_transposed: bool):
    def make(device: torch.device) -> tuple[torch.Tensor, ...]:
        a = torch.randn(m, k, device=device, dtype=DTYPE)
        b = torch.randn(*((n, k) if b_transposed else (k, n)), device=device, dtype=DTYPE)
        return a, b

    return make


def conv_case(n: int, c: int, hw: int, stride: int = 1, amp: bool = False) -> Case:
    """conv2d_gw8 3x3 with bias; `amp`: as a model's layer under autocast (the module doc)."""
    import spio.functional as sf

    groups = c // 8
    strided = f" stride {stride}" if stride != 1 else ""
    baseline = f"F.conv2d(x, w, b, {f'stride={stride}, ' if strided else ''}padding=1, groups=C/8)"

    def spio_op(x, w, b):
        return sf.conv2d_gw8(x, w, b, padding=1, stride=stride)

    def torch_op(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=1, groups=groups)

    spio_call: Callable[..., torch.Tensor] = spio_op
    torch_call: Callable[..., torch.Tensor] = torch_op
    if amp:
        baseline += " under autocast(fp16), w and b float32"
        spio_call, torch_call = _under_autocast(spio_op), _under_autocast(torch_op)
    return Case(
        "conv2d_gw8",
        f"N{n} C{c} {hw}x{hw}{strided}{' amp' if amp else ''}",
        baseline,
        _conv_inputs(n, c, hw, torch.float32 if amp else DTYPE),
        spio_call,
        torch_call,
    )


def norm_case(n: int, c: int, hw: int) -> Case:
    import spio.functional as sf

    return Case(
        "layernorm_2d",
        f"N{n} C{c} {hw}x{hw}",
        "timm LayerNorm2d: F.layer_norm(x.permute(0,2,3,1), (C,), w, b, eps).permute(0,3,1,2)",
        _norm_inputs(n, c, hw),
        lambda x, w, b: sf.layernorm_2d(x, w, b, eps=EPS),
        lambda x, w, b: F.layer_norm(x.permute(0, 2, 3, 1), (c,), w, b, EPS).permute(0, 3, 1, 2),
    )


def linear_case(m: int, n: int, k: int) -> Case:
    import spio.functional as sf

    return Case(
        "matmul",
        f"{m}x{n}x{k} W(N,K)",
        "F.linear(a, w) (nn.Linear's weight layout)",
        _matmul_inputs(m, n, k, b_transposed=True),
        lambda a, w: sf.matmul(a, w, b_transposed=True),
        lambda a, w: F.linear(a, w),
    )


def square_case(m: int, n: int, k: int) -> Case:
    import spio.functional as sf

    return Case(
        "matmul",
        f"{m}x{n}x{k}",
        "torch.matmul(a, b)",
        _matmul_inputs(m, n, k, b_transposed=False),
        lambda a, b: sf.matmul(a, b),
        lambda a, b: torch.matmul(a, b),
    )


def cases(ops: tuple[str, ...] | list[str] = OPS) -> list[Case]:
    """The benchmark's cases of the chosen ops, in report order."""
    out: list[Case] = []
    if "conv2d_gw8" in ops:
        out += [conv_case(128, 512, 7), conv_case(128, 512, 7, amp=True)]
        out += [conv_case(128, 64, 56), conv_case(32, 128, 28)]
        # regnety_004's stride-2 C104 layer: its input gradient runs at a preferred carveout.
        out += [conv_case(128, 104, 56, stride=2)]
    if "layernorm_2d" in ops:
        out += [norm_case(128, 512, 7), norm_case(32, 128, 28)]
    if "matmul" in ops:
        out += [linear_case(16, 4096, 4096), square_case(4096, 4096, 4096)]
    return out


def pass_call(
    op: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...], pass_: str
) -> Callable[[], object]:
    """A zero-argument call of `op` for one pass. For the grad passes `args` must be leaves that
    require grad (`grad_leaves`); fwd+bwd runs the op once here to shape its output gradient."""
    if pass_ in ("fwd", "fwd grad"):
        return lambda: op(*args)
    if pass_ != "fwd+bwd":
        raise ValueError(f"pass_call: unknown pass {pass_!r}; one of {PASSES}")
    gy = torch.randn_like(op(*args).detach())  # the output's shape and memory format

    def step() -> None:
        op(*args).backward(gy)
        for t in args:
            t.grad = None

    return step


def grad_leaves(args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The same values as new leaf tensors that require grad (sharing storage)."""
    return tuple(t.detach().requires_grad_() for t in args)
