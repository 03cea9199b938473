"""Reference implementations of conv2d_gw8 (PyTorch) and the dgrad weight transform.

The references compute in the dtype of their inputs: tests pass fp64 copies of the quantized
fp16/bf16 tensors the kernel saw. The same functions are the documented CPU fallback.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch.nn.grad

from spio.kernels.conv2d_gw8.params import GROUP_WIDTH


def fprop(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: tuple[int, int],
    stride: tuple[int, int] = (1, 1),
) -> torch.Tensor:
    """y = conv2d(x, weight, bias, stride, padding, groups C / 8)."""
    return F.conv2d(
        x, weight, bias, stride=stride, padding=padding, groups=x.shape[1] // GROUP_WIDTH
    )


def dgrad(
    grad_output: torch.Tensor,
    weight: torch.Tensor,
    input_hw: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int] = (1, 1),
) -> torch.Tensor:
    """dx of fprop for grad_output, as PyTorch computes it."""
    n, c = grad_output.shape[:2]
    return torch.nn.grad.conv2d_input(
        (n, c, *input_hw), weight, grad_output, stride=stride, padding=padding,
        groups=c // GROUP_WIDTH,
    )  # fmt: skip


def wgrad(
    x: torch.Tensor,
    grad_output: torch.Tensor,
    kernel_rs: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int] = (1, 1),
) -> torch.Tensor:
    """dw of fprop, as PyTorch computes it."""
    c = x.shape[1]
    return torch.nn.grad.conv2d_weight(
        x, (c, GROUP_WIDTH, *kernel_rs), grad_output, stride=stride, padding=padding,
        groups=c // GROUP_WIDTH,
    )  # fmt: skip


def bias_grad(grad_output: torch.Tensor) -> torch.Tensor:
    return grad_output.sum(dim=(0, 2, 3))


def transpose_weight(weight: torch.Tensor) -> torch.Tensor:
    """The dgrad kernel's weights: w'[g8 + c, k, r, s] = w[g8 + k, c, R-1-r, S-1-s].

    Transposes each 8x8 (out, in) block of a group and rotates the taps by 180 degrees, so that
    dx = conv2d_gw8(dy, w', padding=(R-1-pad_h, S-1-pad_w)). Returns a contiguous (C, 8, R, S).
    """
    c, cg, r, s = weight.shape
    w = weight.reshape(c // GROUP_WIDTH, GROUP_WIDTH, cg, r, s)
    return w.transpose(1, 2).flip(3, 4).reshape(c, cg, r, s).contiguous()
