"""`spio.layers.Conv2dGw8`: grouped conv2d with 8 channels per group, on spio's kernels."""

from __future__ import annotations

import math

import torch
from torch import nn

from spio.functional.conv2d_gw8 import conv2d_gw8
from spio.kernels.conv2d_gw8.params import (
    GROUP_WIDTH,
    MAX_KERNEL,
    STRIDES,
    normalize_padding,
    normalize_stride,
)


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return (v, v)
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(e, int) for e in v):
        return (int(v[0]), int(v[1]))
    raise TypeError(f"Conv2dGw8: {what} must be an int or a pair of ints, got {v!r}")


def _not_a_parameter(name: str, t: object) -> str:
    return (
        f"Conv2dGw8.from_conv2d: conv.{name} must be an nn.Parameter to be shared, got a computed "
        f"{type(t).__name__} (a parametrization such as weight_norm?); remove it first "
        f"(torch.nn.utils.parametrize.remove_parametrizations(conv, {name!r}) for "
        f"torch.nn.utils.parametrizations.*, torch.nn.utils.remove_weight_norm(conv, {name!r}) "
        "for the older torch.nn.utils.weight_norm) or keep the nn.Conv2d"
    )


def _numeric_padding(padding: str | tuple[int, ...], r: int, s: int) -> tuple[int, int]:
    """nn.Conv2d's padding as (pad_h, pad_w) for stride 1: "valid" is 0, "same" is k // 2 for an
    odd kernel; "same" with an even kernel (asymmetric in PyTorch) is a ValueError."""
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        even = [f"{name}={k}" for name, k in (("R", r), ("S", s)) if k % 2 == 0]
        if even:
            raise ValueError(
                f"Conv2dGw8.from_conv2d: padding='same' with an even kernel ({', '.join(even)}) "
                "pads one side more than the other, and spio pads both sides equally; use an odd "
                "kernel or keep the nn.Conv2d"
            )
        return (r // 2, s // 2)
    if isinstance(padding, str):
        raise ValueError(
            f"Conv2dGw8.from_conv2d: padding={padding!r} is not supported; use 'same', 'valid' "
            "or numbers"
        )
    return (int(padding[0]), int(padding[1]))


class Conv2dGw8(nn.Module):
    """Conv2d with groups = channels / 8, stride 1 or 2: a drop-in for such an nn.Conv2d.

    Args:
        channels: C (input = output channels), a multiple of 8.
        kernel_size: int or (R, S), each 1..7.
        padding: int, (pad_h, pad_w) or None for "same" (R // 2, S // 2).
        bias: learn a bias.
        stride: int or (stride_h, stride_w), each 1 or 2.
        device, dtype: of the parameters.

    Parameters are initialized like nn.Conv2d's. The output is channels_last; channels_last
    inputs avoid a conversion (see spio.functional.conv2d_gw8 for where it runs, the fallback
    and autocast).
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int | tuple[int, int],
        padding: int | tuple[int, int] | None = None,
        bias: bool = True,
        device=None,
        dtype=None,
        stride: int | tuple[int, int] = 1,
    ):
        super().__init__()
        if not isinstance(channels, int) or channels < GROUP_WIDTH or channels % GROUP_WIDTH:
            raise ValueError(
                f"Conv2dGw8: channels must be a positive multiple of {GROUP_WIDTH}, "
                f"got {channels!r}"
            )
        r, s = _pair(kernel_size, "kernel_size")
        if not (1 <= r <= MAX_KERNEL and 1 <= s <= MAX_KERNEL):
            raise ValueError(
                f"Conv2dGw8: kernel_size must be 1..{MAX_KERNEL} in each dim, got {(r, s)}; use "
                "nn.Conv2d for larger kernels"
            )
        self.channels = channels
        self.kernel_size = (r, s)
        self.padding = normalize_padding(padding, r, s)
        self.stride = normalize_stride(stride)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(channels, GROUP_WIDTH, r, s, **factory))
        self.bias = nn.Parameter(torch.empty(channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Conv2d's initialization: kaiming_uniform(a=sqrt(5)), bias U(-1/sqrt(fan_in), ...).
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(GROUP_WIDTH * self.kernel_size[0] * self.kernel_size[1])
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv2d_gw8(x, self.weight, self.bias, self.padding, self.stride)

    def extra_repr(self) -> str:
        stride = f", stride={self.stride}" if self.stride != (1, 1) else ""
        return (
            f"{self.channels}, kernel_size={self.kernel_size}, padding={self.padding}{stride}, "
            f"bias={self.bias is not None}"
        )

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d) -> Conv2dGw8:
        """A Conv2dGw8 computing what `conv` computes, sharing its weight and bias Parameters.

        Eligible: in_channels == out_channels == 8 * groups, stride 1 or 2, dilation 1, kernel
        1..7, zero padding: numeric, "valid" (0) or "same" with an odd kernel (k // 2; PyTorch
        pads an even kernel's "same" asymmetrically, which spio's symmetric padding cannot
        express), weight and bias plain Parameters (not computed by a parametrization such as
        weight_norm). Raises ValueError/TypeError naming the first rule `conv` breaks.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"Conv2dGw8.from_conv2d: expected nn.Conv2d, got {type(conv).__name__}")
        c = conv.in_channels
        if conv.out_channels != c:
            raise ValueError(
                f"Conv2dGw8.from_conv2d: out_channels ({conv.out_channels}) must equal "
                f"in_channels ({c})"
            )
        if conv.groups * GROUP_WIDTH != c:
            raise ValueError(
                f"Conv2dGw8.from_conv2d: group width must be {GROUP_WIDTH} (groups = C / 8 = "
                f"{c // GROUP_WIDTH}), got groups={conv.groups} ({c / conv.groups:g} per group)"
            )
        if any(v not in STRIDES for v in conv.stride):
            raise ValueError(
                f"Conv2dGw8.from_conv2d: stride must be 1 or 2, got {tuple(conv.stride)}"
            )
        if tuple(conv.dilation) != (1, 1):
            raise ValueError(
                f"Conv2dGw8.from_conv2d: dilation must be 1, got {tuple(conv.dilation)}"
            )
        if conv.padding_mode != "zeros":
            raise ValueError(
                f"Conv2dGw8.from_conv2d: padding_mode must be 'zeros', got {conv.padding_mode!r}"
            )
        r, s = conv.kernel_size
        if not (1 <= r <= MAX_KERNEL and 1 <= s <= MAX_KERNEL):
            raise ValueError(
                f"Conv2dGw8.from_conv2d: kernel_size must be 1..{MAX_KERNEL}, got {(r, s)}"
            )
        padding = _numeric_padding(conv.padding, r, s)
        weight, bias = conv.weight, conv.bias
        if not isinstance(weight, nn.Parameter):
            raise TypeError(_not_a_parameter("weight", weight))
        if bias is not None and not isinstance(bias, nn.Parameter):
            raise TypeError(_not_a_parameter("bias", bias))
        out = cls.__new__(cls)
        nn.Module.__init__(out)
        out.channels = c
        out.kernel_size = (r, s)
        out.padding = padding
        out.stride = (int(conv.stride[0]), int(conv.stride[1]))
        out.weight = weight
        out.bias = bias
        return out
