"""Two copies of one model from the same initialization: PyTorch's as built, and spio's after
`spio.layers.transform`, both on the device and channels_last.

The copy is a deepcopy of the built model, taken before the transform, so the two start with
the same weights and differ only in the layers spio replaced. `logits_rel_err` checks that they
still compute the same function.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from spio.layers import TransformReport, transform


@dataclass
class ModelPair:
    """PyTorch's model, spio's copy of it, and what the transform replaced."""

    name: str
    torch: nn.Module
    spio: nn.Module
    report: TransformReport


def build_pair(name: str, create: Callable[[], nn.Module], device: torch.device) -> ModelPair:
    """create() (seeded), moved to `device` channels_last, deep-copied, the copy transformed."""
    torch.manual_seed(0)
    base = create().to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload, unused-ignore]
    twin = copy.deepcopy(base)
    report = transform(twin)
    return ModelPair(name, base, twin, report)


def timm_model(name: str) -> Callable[[], nn.Module]:
    """A factory of timm's `name` with random weights (nothing is downloaded)."""

    def create() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False)

    return create


def summary(report: TransformReport) -> str:
    """One line of counts: replaced per layer type (and how many run under a condition, such as
    float32 weights needing autocast), kept per reason."""
    kinds = Counter(kind for _, kind in report.replaced)
    replaced = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "nothing"
    cond = f" ({len(report.conditions)} with a condition)" if report.conditions else ""
    text = f"replaced {len(report.replaced)} modules: {replaced}{cond}; kept {len(report.skipped)}"
    reasons = Counter(_rule(why) for _, why in report.skipped)
    if reasons:
        text += " (" + "; ".join(f"{n}x {why}" for why, n in reasons.most_common()) + ")"
    return text


def _rule(why: str) -> str:
    """The rule a kept module broke, without its values: "Conv2dGw8.from_conv2d: stride must be
    1 or 2, got (3, 3)" -> "stride must be 1 or 2"."""
    text = why.split(": ", 1)[-1]
    for stop in (",", " ("):
        text = text.split(stop, 1)[0]
    return text.strip()


def logits_rel_err(pair: ModelPair, inputs: torch.Tensor, dtype: torch.dtype) -> float:
    """max |spio - torch| / max |torch| of the two models' logits on `inputs` (eval mode, under
    autocast to `dtype`); both models are back in train mode after."""
    with torch.no_grad(), torch.autocast(inputs.device.type, dtype=dtype):
        pair.torch.eval()
        pair.spio.eval()
        try:
            want = pair.torch(inputs).double()
            got = pair.spio(inputs).double()
        finally:
            pair.torch.train()
            pair.spio.train()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
