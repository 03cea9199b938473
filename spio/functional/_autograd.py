"""The eager path's autograd helper: backward functions that build no graph of their own."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable

_grad_enabled = torch.is_grad_enabled


def first_order(backward: Callable[..., Any]) -> Callable[..., Any]:
    """`backward` of a torch.autograd.Function whose gradients are not differentiable again:
    `once_differentiable` (a second backward through them raises), but the usual call (grad mode
    off in the backward: no create_graph) skips its no_grad block, about a microsecond."""
    slow = once_differentiable(backward)

    @functools.wraps(backward)
    def wrapper(ctx: Any, *grads: Any) -> Any:
        if _grad_enabled():
            return slow(ctx, *grads)
        return backward(ctx, *grads)

    return wrapper
