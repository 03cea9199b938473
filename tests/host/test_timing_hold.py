"""spio.timing.hold_cycles: the spin before each timed call outlasts the call's host time."""

from spio.timing import HOLD_MAX_US, HOLD_MIN_US, hold_cycles


def test_hold_is_at_least_the_minimum():
    assert hold_cycles(0.0, 2_000_000) == int(HOLD_MIN_US * 2000)
    assert hold_cycles(20.0, 1_000_000) == int(HOLD_MIN_US * 1000)


def test_hold_outlasts_a_long_host_enqueue():
    # 300 µs of host time at 1.98 GHz: twice that plus the margin, in cycles.
    cycles = hold_cycles(300.0, 1_980_000)
    assert cycles / 1980 > 2 * 300
    assert cycles == int((2 * 300 + 50) * 1980)


def test_hold_is_capped():
    assert hold_cycles(1e6, 2_000_000) == int(HOLD_MAX_US * 2000)
