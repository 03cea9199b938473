"""Conv2dGw8.from_conv2d's padding: "same" (odd kernels) and "valid" convert to the numbers they
mean and compute what the nn.Conv2d computes; "same" with an even kernel (asymmetric in PyTorch)
is refused with the reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spio.layers import Conv2dGw8, transform
from spio.testing import assert_close, tolerance


@pytest.mark.parametrize(
    "kernel, padding, want",
    [
        (3, "same", (1, 1)),
        ((3, 5), "same", (1, 2)),
        ((7, 1), "same", (3, 0)),
        (5, "valid", (0, 0)),
        ((2, 4), "valid", (0, 0)),
    ],
)
def test_from_conv2d_string_padding(kernel, padding, want, seed):
    torch.manual_seed(seed)
    conv = nn.Conv2d(16, 16, kernel, padding=padding, groups=2)
    layer = Conv2dGw8.from_conv2d(conv)
    assert layer.padding == want
    x = torch.randn(2, 16, 9, 8)
    with torch.no_grad():
        got, ref = layer(x), conv(x)
    assert got.shape == ref.shape
    r, s = layer.kernel_size
    assert_close(got, ref, tolerance(torch.float32, depth=8 * r * s), where=f"seed={seed}")


@pytest.mark.parametrize("kernel, even", [(2, "R=2, S=2"), ((3, 4), "S=4"), ((6, 5), "R=6")])
def test_from_conv2d_same_with_even_kernel_is_refused(kernel, even):
    conv = nn.Conv2d(16, 16, kernel, padding="same", groups=2)
    with pytest.raises(ValueError, match=rf"padding='same' with an even kernel \({even}\)"):
        Conv2dGw8.from_conv2d(conv)
    model = nn.Sequential(conv)
    report = transform(model)
    assert model[0] is conv and "even kernel" in report.skipped[0][1], report
