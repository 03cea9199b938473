"""Model transform: swap eligible modules of a model for spio's layers, and report what changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeGuard

import torch.nn as nn


@dataclass
class TransformReport:
    """What `transform` did: the replaced module paths and why others were left alone."""

    replaced: list[tuple[str, str]] = field(default_factory=list)  # (path, new layer type)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    def __str__(self) -> str:
        lines = [
            f"spio.transform: replaced {len(self.replaced)} modules, skipped {len(self.skipped)}"
        ]
        lines += [f"  replaced {path} -> {kind}" for path, kind in self.replaced]
        lines += [f"  kept     {path}: {why}" for path, why in self.skipped]
        return "\n".join(lines)


def _is_grouped_conv_candidate(m: nn.Module) -> TypeGuard[nn.Conv2d]:
    return isinstance(m, nn.Conv2d) and m.groups > 1


def _is_layernorm2d_candidate(m: nn.Module) -> bool:
    # timm's LayerNorm2d (and similar) subclass nn.LayerNorm and normalize over channels of NCHW.
    return isinstance(m, nn.LayerNorm) and type(m).__name__ == "LayerNorm2d"


def _convert(module: nn.Module) -> tuple[nn.Module | None, str]:
    """Returns (replacement, "") or (None, reason) when the module isn't eligible."""
    from spio.layers.conv2d_gw8 import Conv2dGw8
    from spio.layers.layernorm_2d import LayerNorm2d

    if _is_grouped_conv_candidate(module):
        try:
            return Conv2dGw8.from_conv2d(module), ""
        except (ValueError, TypeError) as e:
            return None, str(e)
    if _is_layernorm2d_candidate(module):
        try:
            return LayerNorm2d.from_module(module), ""
        except (ValueError, TypeError) as e:
            return None, str(e)
    return None, ""


def transform(model: nn.Module, *, verbose: bool = False) -> TransformReport:
    """Replaces, in place, every eligible grouped conv (group width 8) and LayerNorm2d of `model`.

    Eligible: `nn.Conv2d` with 8 input channels per group, as many outputs as inputs, stride 1,
    dilation 1, kernel ≤ 7 → `spio.layers.Conv2dGw8`; timm-style `LayerNorm2d` →
    `spio.layers.LayerNorm2d`. Weights are shared, not copied. Returns a report of the swaps and of
    the candidates kept, with the reason.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"spio transform: model must be an nn.Module, got {type(model).__name__}")
    report = TransformReport()
    for path, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            full = f"{path}.{name}" if path else name
            new, why = _convert(child)
            if new is not None:
                setattr(parent, name, new)
                report.replaced.append((full, type(new).__name__))
            elif why:
                report.skipped.append((full, why))
    if verbose:
        print(report)
    return report
