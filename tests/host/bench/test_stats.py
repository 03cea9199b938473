"""spio.bench.stats: the median and p20/p80 the op-call and training-step benchmarks report."""

from __future__ import annotations

import pytest

from spio.bench.stats import Stats, summarize


def test_summarize_is_order_free_and_exact_on_known_samples():
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 9.0, 8.0, 7.0, 10.0, 11.0])
    assert s == summarize(sorted([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 9.0, 8.0, 7.0, 10.0, 11.0]))
    assert s.median == 6.0 and s.n == 11
    assert s.p20 == pytest.approx(3.0) and s.p80 == pytest.approx(9.0)  # inclusive quantiles
    assert s.spread == pytest.approx(1.0)


def test_one_sample_is_its_own_spread():
    assert summarize([2.5]) == Stats(2.5, 2.5, 2.5, 1)
    assert summarize([2.5]).spread == 0.0


def test_percentiles_bracket_the_median():
    s = summarize([3.0, 1.0, 100.0, 2.0])  # an outlier moves p80, not the median
    assert s.p20 <= s.median <= s.p80 and s.median == 2.5


def test_no_samples_is_an_error():
    with pytest.raises(ValueError, match="no samples"):
        summarize([])
