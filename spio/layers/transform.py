"""Model transform: swap eligible modules of a model for spio's layers, and report what changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeGuard

import torch
import torch.nn as nn

# Conv2dGw8 runs float32 weights only where the op accepts float32 (conv2d_gw8's dtype rules).
FLOAT32_CONDITION = (
    "float32 weights: on CUDA run it under torch.autocast (fp16/bf16) or convert the model with "
    ".half() / .bfloat16(); a float32 CUDA forward without autocast raises TypeError (on the CPU, "
    "PyTorch's fallback takes float32)"
)


@dataclass
class TransformReport:
    """What `transform` did: the replaced module paths, the conditions some replacements run
    under, and why other candidates were left alone."""

    replaced: list[tuple[str, str]] = field(default_factory=list)  # (path, new layer type)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    conditions: dict[str, str] = field(default_factory=dict)  # replaced path -> what it needs

    def __str__(self) -> str:
        cond = f" ({len(self.conditions)} with a condition)" if self.conditions else ""
        lines = [
            f"spio.transform: replaced {len(self.replaced)} modules{cond}, "
            f"skipped {len(self.skipped)}"
        ]
        for path, kind in self.replaced:
            needs = f" [{self.conditions[path]}]" if path in self.conditions else ""
            lines.append(f"  replaced {path} -> {kind}{needs}")
        lines += [f"  kept     {path}: {why}" for path, why in self.skipped]
        return "\n".join(lines)


def _is_grouped_conv_candidate(m: nn.Module) -> TypeGuard[nn.Conv2d]:
    return isinstance(m, nn.Conv2d) and m.groups > 1


def _is_layernorm2d_candidate(m: nn.Module) -> bool:
    # timm's LayerNorm2d (and similar) subclass nn.LayerNorm and normalize over channels of NCHW.
    return isinstance(m, nn.LayerNorm) and type(m).__name__ == "LayerNorm2d"


def _conv_dtype_rule(conv: nn.Conv2d) -> tuple[str, str]:
    """("", "") when conv2d_gw8 runs conv's weight dtype everywhere; (condition, "") when only
    under a condition (float32); ("", reason) when never (float64, ...: kept)."""
    dtype = conv.weight.dtype
    if dtype in (torch.float16, torch.bfloat16):
        return "", ""
    if dtype == torch.float32:
        return FLOAT32_CONDITION, ""
    return "", (
        f"weight dtype {dtype} is not one conv2d_gw8 takes (float16/bfloat16, float32 on the CPU "
        "fallback or under CUDA autocast); convert the model first or keep the nn.Conv2d"
    )


def _convert(module: nn.Module) -> tuple[nn.Module | None, str, str]:
    """(replacement, condition, "") or (None, "", reason) when the module isn't eligible; the
    condition says what a replacement needs to run (empty when nothing)."""
    from spio.layers.conv2d_gw8 import Conv2dGw8
    from spio.layers.layernorm_2d import LayerNorm2d

    if _is_grouped_conv_candidate(module):
        try:
            new = Conv2dGw8.from_conv2d(module)
        except (ValueError, TypeError) as e:
            return None, "", str(e)
        condition, reason = _conv_dtype_rule(module)
        return (None, "", reason) if reason else (new, condition, "")
    if _is_layernorm2d_candidate(module):
        try:
            return LayerNorm2d.from_module(module), "", ""
        except (ValueError, TypeError) as e:
            return None, "", str(e)
    return None, "", ""


def transform(model: nn.Module, *, verbose: bool = False) -> TransformReport:
    """Replaces, in place, every eligible grouped conv (group width 8) and LayerNorm2d of `model`.

    Eligible: `nn.Conv2d` with 8 input channels per group, as many outputs as inputs, stride 1 or 2,
    dilation 1, kernel ≤ 7, zero padding (numbers, "valid", or "same" with odd kernels), float16,
    bfloat16 or float32 weights → `spio.layers.Conv2dGw8`; timm-style `LayerNorm2d` →
    `spio.layers.LayerNorm2d`. Weights are shared, not copied. Returns a report of the swaps and of
    the candidates kept, with the reason.

    float32 convs are replaced with a condition in the report (`TransformReport.conditions`):
    like `spio.functional.conv2d_gw8`, the layer runs float32 on CUDA only under torch.autocast
    (the mixed-precision training setup: float32 weights, fp16/bf16 compute) or after converting
    the model to half/bfloat16; without either, its CUDA forward raises TypeError rather than
    silently running PyTorch. Other dtypes (float64) are kept, with the reason.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"spio transform: model must be an nn.Module, got {type(model).__name__}")
    report = TransformReport()
    for path, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            full = f"{path}.{name}" if path else name
            new, condition, why = _convert(child)
            if new is not None:
                setattr(parent, name, new)
                report.replaced.append((full, type(new).__name__))
                if condition:
                    report.conditions[full] = condition
            elif why:
                report.skipped.append((full, why))
    if verbose:
        print(report)
    return report
