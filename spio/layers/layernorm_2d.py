"""`spio.layers.LayerNorm2d`: LayerNorm over the channels of (N, C, H, W), on spio's kernels."""

from __future__ import annotations

import torch
from torch import nn

from spio.functional.layernorm_2d import layernorm_2d


class LayerNorm2d(nn.Module):
    """LayerNorm over C of (N, C, H, W) activations; a numerical drop-in for timm's LayerNorm2d.

    Args:
        channels: C, the normalized size.
        eps: added to the variance.
        elementwise_affine: learn a per-channel weight (ones) and bias (zeros).
        bias: with elementwise_affine, whether to learn the bias too.
        device, dtype: of the parameters.

    The output is channels_last; channels_last inputs avoid a copy (see
    spio.functional.layernorm_2d for where it runs and the fallback).
    """

    def __init__(
        self,
        channels: int,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if not isinstance(channels, int) or channels < 1:
            raise ValueError(f"LayerNorm2d: channels must be a positive int, got {channels!r}")
        self.channels = channels
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(channels, **factory))
            self.bias = nn.Parameter(torch.zeros(channels, **factory)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_2d(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    @classmethod
    def from_module(cls, m: nn.Module) -> LayerNorm2d:
        """A LayerNorm2d computing what m computes, sharing m's weight and bias Parameters.

        Accepts spio's LayerNorm2d and timm-style LayerNorm2d modules: an nn.LayerNorm subclass
        named LayerNorm2d that normalizes the channels of NCHW input (normalized_shape == (C,)).
        A plain nn.LayerNorm normalizes the *last* dim and is rejected.
        """
        if isinstance(m, LayerNorm2d):
            out = cls(m.channels, m.eps, elementwise_affine=False)
            out.elementwise_affine = m.elementwise_affine
            out.weight, out.bias = m.weight, m.bias
            return out
        if not isinstance(m, nn.LayerNorm) or type(m).__name__ != "LayerNorm2d":
            raise TypeError(
                f"LayerNorm2d.from_module: expected a timm-style LayerNorm2d (an nn.LayerNorm "
                f"subclass over the channels of NCHW), got {type(m).__name__}; a plain "
                "nn.LayerNorm normalizes the last dim and is not equivalent"
            )
        shape = tuple(m.normalized_shape)
        if len(shape) != 1:
            raise ValueError(f"LayerNorm2d.from_module: normalized_shape must be (C,), got {shape}")
        out = cls(shape[0], m.eps, elementwise_affine=False)
        out.elementwise_affine = m.elementwise_affine
        out.weight = m.weight
        out.bias = m.bias
        return out
