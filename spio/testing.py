"""Test helpers for kernel correctness: derived tolerances, NaN poisoning, sampled sweeps, reports.

Used by spio's own tests and by anyone writing kernels with spio. Imports torch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TypeVar

import torch

from spio.settings import settings

T = TypeVar("T")

# Unit roundoff (half an ulp at 1.0) of each precision.
UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}


def tolerance(
    out_dtype: torch.dtype, depth: int, acc_dtype: torch.dtype = torch.float32, c: float = 4.0
) -> float:
    """Relative error bound of a reduction of `depth` terms accumulated in `acc_dtype`.

    The output is rounded once to `out_dtype` (one unit roundoff), and a sum of `depth` terms in
    `acc_dtype` has a typical (random-walk) error of sqrt(depth) unit roundoffs. `c` is a small
    safety factor. Compare with max|y - ref| / max|ref|.
    """
    if depth < 1:
        raise ValueError(f"tolerance: depth must be >= 1, got {depth}")
    return c * (UNIT_ROUNDOFF[out_dtype] + math.sqrt(depth) * UNIT_ROUNDOFF[acc_dtype])


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fills a floating tensor with NaN in place (so unwritten outputs fail) and returns it."""
    return t.fill_(float("nan"))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, where: str = "") -> None:
    """Asserts max|actual - expected| / max|expected| <= tol, with NaN checked explicitly.

    On failure the message names `where` and lists up to 16 worst elements with their indices,
    actual and expected values.
    """
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    bad_nan = ~torch.isfinite(a) & torch.isfinite(e)
    if bad_nan.any():
        idx = bad_nan.nonzero()[:16].tolist()
        raise AssertionError(
            f"{where}: {int(bad_nan.sum())} non-finite outputs (unwritten or overflowed), "
            f"first at {idx}"
        )
    scale = e.abs().max().item() if e.numel() else 0.0
    err = (a - e).abs()
    max_err = err.max().item() if err.numel() else 0.0
    rel = max_err / scale if scale > 0 else max_err
    if rel <= tol:
        return
    flat = err.flatten()
    worst = torch.topk(flat, min(16, flat.numel())).indices
    lines = [f"{where}: relative error {rel:.3e} > tolerance {tol:.3e} (max|ref| = {scale:.4g})"]
    for i in worst.tolist():
        index = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), a.shape))
        lines.append(
            f"  at {index}: actual {a.flatten()[i].item():.6g}, "
            f"expected {e.flatten()[i].item():.6g}"
        )
    raise AssertionError("\n".join(lines))


def sample(items: Sequence[T], limit: int | None = None, seed: int = 0) -> list[T]:
    """Returns items, or a reproducible random subset of at most `limit` (SPIO_MAX_TEST_PARAMS).

    The first and last items are always kept, since sweeps usually order them smallest to largest.
    """
    items = list(items)
    limit = settings().max_test_params if limit is None else limit
    if limit is None or len(items) <= limit:
        return items
    if limit < 2:
        return items[:limit]
    middle = random.Random(seed).sample(items[1:-1], limit - 2)
    keep = {id(x) for x in middle}
    return [items[0]] + [x for x in items[1:-1] if id(x) in keep] + [items[-1]]
