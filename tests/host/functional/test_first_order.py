"""spio.functional._autograd.first_order: once_differentiable's contract at no cost when unused."""

from __future__ import annotations

import pytest
import torch

from spio.functional._autograd import first_order


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @first_order
    def backward(ctx, grad):
        return grad * 2


def test_gradient_is_returned_and_is_not_differentiable_again():
    x = torch.randn(5, requires_grad=True)
    _Twice.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full((5,), 2.0))
    seed = torch.ones(5, requires_grad=True)  # a differentiable incoming gradient
    (g,) = torch.autograd.grad(_Twice.apply(x), x, grad_outputs=seed, create_graph=True)
    assert torch.equal(g, torch.full((5,), 2.0))
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()
    assert _Twice.backward.__name__ == "backward"
