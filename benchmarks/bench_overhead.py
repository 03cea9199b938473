"""Host µs per call of spio's ops next to PyTorch's:
`python benchmarks/bench_overhead.py [--quick] [--ops ...] [--csv F]`.

The same as `spio bench overhead`; see spio/bench/overhead.py for the cases, method and columns.
"""

from spio.bench.overhead import main

if __name__ == "__main__":
    raise SystemExit(main())
