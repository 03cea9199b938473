"""spio.layers.transform on CPU: eligible modules are swapped, outputs stay the same (fallback)."""

from __future__ import annotations

import pytest
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
        nn.Conv2d(32, 32, 3, padding=1, groups=4, stride=2),  # stride 2: eligible
        nn.Conv2d(32, 32, 3, padding=1, groups=4, stride=3),  # stride 3: kept, with the reason
    )


@pytest.mark.smoke
def test_transform_swaps_eligible_modules_and_keeps_outputs(seed):
    torch.manual_seed(seed)
    model = _block().eval()
    x = torch.randn(2, 16, 9, 7).to(memory_format=torch.channels_last)
    with torch.no_grad():
        before = model(x)
    report = transform(model)
    assert [p for p, _ in report.replaced] == ["0", "1", "4"]
    assert isinstance(model[0], Conv2dGw8) and isinstance(model[1], LayerNorm2d)
    assert isinstance(model[2], nn.Conv2d) and isinstance(model[3], nn.Conv2d)
    assert isinstance(model[4], Conv2dGw8) and model[4].stride == (2, 2)
    skipped = dict(report.skipped)
    assert set(skipped) == {"3", "5"}
    assert "group" in skipped["3"] and "stride" in skipped["5"]
    with torch.no_grad():
        after = model(x)
    # The swapped layers run their float32 PyTorch fallback: only reduction order may differ
    # (conv: 8·3·3 products, then 16-channel LayerNorm statistics).
    assert_close(after, before, tolerance(torch.float32, depth=72), where=f"seed={seed}")
    text = str(report)
    assert "replaced 3 modules" in text and "kept" in text


def test_transform_shares_parameters():
    model = _block()
    w = model[0].weight
    transform(model)
    assert model[0].weight is w


def _one_conv(dtype: torch.dtype) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=2)).to(dtype)


def test_float32_conv_is_replaced_with_its_condition(seed):
    # The mixed-precision setup (float32 weights, autocast) is the main use, so float32 convs are
    # replaced; the report says what they need on CUDA instead of an unconditional "replaced".
    from spio.layers.transform import FLOAT32_CONDITION

    torch.manual_seed(seed)
    model = _one_conv(torch.float32)
    report = transform(model)
    assert report.replaced == [("0", "Conv2dGw8")] and report.conditions == {"0": FLOAT32_CONDITION}
    text = str(report)
    assert "replaced 1 modules (1 with a condition)" in text, text
    assert "replaced 0 -> Conv2dGw8 [float32 weights: on CUDA run it under torch.autocast" in text
    # The condition is the op's rule: float32 runs on the CPU fallback ...
    x = torch.randn(1, 16, 5, 5)
    assert model(x).shape == (1, 16, 5, 5)
    # ... and off the CPU (meta tensors take the GPU path's dtype rules) only under autocast.
    with pytest.raises(TypeError, match="run under torch.autocast"):
        model.to("meta")(x.to("meta"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_conv_is_replaced_unconditionally(dtype):
    model = _one_conv(dtype)
    report = transform(model)
    assert report.replaced == [("0", "Conv2dGw8")] and not report.conditions
    assert str(report).splitlines()[1] == "  replaced 0 -> Conv2dGw8"


def test_float64_conv_is_kept_with_the_reason():
    model = _one_conv(torch.float64)
    conv = model[0]
    # Replacing it would raise at every forward (float64 is no dtype of conv2d_gw8) ...
    with pytest.raises(TypeError, match="input dtype"):
        Conv2dGw8.from_conv2d(conv)(torch.randn(1, 16, 5, 5, dtype=torch.float64))
    # ... so the transform keeps the nn.Conv2d and says why.
    report = transform(model)
    assert model[0] is conv and not report.replaced
    assert report.skipped[0][0] == "0" and "weight dtype torch.float64" in report.skipped[0][1]
