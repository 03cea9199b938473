"""The benchmarks' timing: `spio.timing` (shared with `spio.tune`), under its old name."""

from spio.timing import Timing, bench, copy_bandwidth_gbps

__all__ = ["Timing", "bench", "copy_bandwidth_gbps"]
