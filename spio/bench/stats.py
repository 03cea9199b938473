"""Median and spread of repeated measurements (µs per call, ms per training step, ratios).

The benchmarks that time many batches or rounds report the median and the 20th/80th percentiles,
like `spio.timing` does for CUDA-event timings, so a noisy row shows as a wide p20..p80.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stats:
    """Median, 20th and 80th percentiles and the count of `n` samples (in the caller's unit)."""

    median: float
    p20: float
    p80: float
    n: int

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the relative width of the middle 60% of the samples."""
        return (self.p80 - self.p20) / self.median if self.median else 0.0


def summarize(samples: Sequence[float]) -> Stats:
    """Stats of `samples` (at least one; a single sample is its own percentiles)."""
    if not samples:
        raise ValueError("summarize: no samples (time at least one batch or round)")
    values = sorted(samples)
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) >= 2 else values * 9
    return Stats(median=statistics.median(values), p20=q[1], p80=q[7], n=len(values))
