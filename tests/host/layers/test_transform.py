"""spio.layers.transform on CPU: eligible modules are swapped, outputs stay the same (fallback)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from spio.layers import Conv2dGw8, LayerNorm2d
from spio.layers.transform import transform
from spio.testing import assert_close, tolerance


class _TimmStyle(nn.LayerNorm):
    """timm's LayerNorm2d: LayerNorm over the channels of NCHW (permute, normalize, permute)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


_TimmStyle.__name__ = "LayerNorm2d"  # what timm calls it; the transform recognizes it by that


def _block() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(16, 16, 3, padding=1, groups=2, bias=True),  # group width 8: eligible
        _TimmStyle(16, eps=1e-6),  # eligible
        nn.Conv2d(16, 32, 1),  # not grouped: left alone silently
        nn.Conv2d(32, 32, 3, padding=1, groups=8),  # group width 4: kept, with the reason
        nn.Conv2d(32, 32, 3, padding=1, groups=4, stride=2),  # stride 2: kept, with the reason
    )


def test_transform_swaps_eligible_modules_and_keeps_outputs(seed):
    torch.manual_seed(seed)
    model = _block().eval()
    x = torch.randn(2, 16, 9, 7).to(memory_format=torch.channels_last)
    with torch.no_grad():
        before = model(x)
    report = transform(model)
    assert [p for p, _ in report.replaced] == ["0", "1"]
    assert isinstance(model[0], Conv2dGw8) and isinstance(model[1], LayerNorm2d)
    assert isinstance(model[2], nn.Conv2d) and isinstance(model[3], nn.Conv2d)
    skipped = dict(report.skipped)
    assert set(skipped) == {"3", "4"}
    assert "group" in skipped["3"] and "stride" in skipped["4"]
    with torch.no_grad():
        after = model(x)
    # The swapped layers run their float32 PyTorch fallback: only reduction order may differ
    # (conv: 8·3·3 products, then 16-channel LayerNorm statistics).
    assert_close(after, before, tolerance(torch.float32, depth=72), where=f"seed={seed}")
    text = str(report)
    assert "replaced 2 modules" in text and "kept" in text


def test_transform_shares_parameters():
    model = _block()
    w = model[0].weight
    transform(model)
    assert model[0].weight is w
