"""`spio.layers.LayerNorm2d`: LayerNorm over the channels of (N, C, H, W), on spio's kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from spio.functional.layernorm_2d import layernorm_2d

UNDER_COMPILE = ("spio", "pytorch")


class LayerNorm2d(nn.Module):
    """LayerNorm over C of (N, C, H, W) activations; a numerical drop-in for timm's LayerNorm2d.

    Args:
        channels: C, the normalized size.
        eps: added to the variance.
        elementwise_affine: learn a per-channel weight (ones) and bias (zeros).
        bias: with elementwise_affine, whether to learn the bias too.
        device, dtype: of the parameters.
        under_compile: what runs while torch.compile traces the layer: "spio" (the default:
            spio's op, as in eager mode) or "pytorch" (timm's permute + F.layer_norm, which
            inductor fuses with the neighbouring ops). Measured on an H100 (convnext_atto,
            batch 128, AMP training step vs timm's model): spio's op 1.07x (torch.compile) and
            1.12x (reduce-overhead), stepping aside 0.90x and 1.01x; docs/ops/overhead.md.
            An attribute: set it on a layer to change it.

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
        under_compile: str = "spio",
    ):
        super().__init__()
        if not isinstance(channels, int) or channels < 1:
            raise ValueError(f"LayerNorm2d: channels must be a positive int, got {channels!r}")
        if under_compile not in UNDER_COMPILE:
            raise ValueError(
                f"LayerNorm2d: under_compile must be one of {UNDER_COMPILE}, got {under_compile!r}"
            )
        self.under_compile = under_compile
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
        if torch.compiler.is_compiling() and self.under_compile == "pytorch":
            return _pytorch_layernorm_2d(x, self.weight, self.bias, self.eps)
        return layernorm_2d(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        text = f"{self.channels}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.under_compile != "spio":
            text += f", under_compile={self.under_compile!r}"
        return text

    @classmethod
    def from_module(cls, m: nn.Module) -> LayerNorm2d:
        """A LayerNorm2d computing what m computes, sharing m's weight and bias Parameters.

        Accepts spio's LayerNorm2d and timm-style LayerNorm2d modules: an nn.LayerNorm subclass
        named LayerNorm2d that normalizes the channels of NCHW input (normalized_shape == (C,)).
        A plain nn.LayerNorm normalizes the *last* dim and is rejected.
        """
        if isinstance(m, LayerNorm2d):
            out = cls(m.channels, m.eps, elementwise_affine=False, under_compile=m.under_compile)
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


def _pytorch_layernorm_2d(x, weight, bias, eps: float) -> torch.Tensor:
    """timm's LayerNorm2d, F.layer_norm over the channels of the permuted view, as the module
    spio replaced computes it (under autocast F.layer_norm runs in float32, as there). Outside
    autocast, float32 weight/bias with fp16/bf16 x run in float32, rounded back to x's dtype,
    as spio's kernels do."""
    c = x.shape[1]
    xp = x.permute(0, 2, 3, 1)
    mixed = any(t is not None and t.dtype != x.dtype for t in (weight, bias))
    if mixed and not torch.is_autocast_enabled(x.device.type):
        y = F.layer_norm(xp.float(), (c,), weight, bias, eps).to(x.dtype)
    else:
        y = F.layer_norm(xp, (c,), weight, bias, eps)
    return y.permute(0, 3, 1, 2)
