"""spio's mma.sync matmul vs cuBLAS:
`python benchmarks/bench_matmul.py [--quick] [--csv F] [--plot F]`.

The same as `spio bench matmul`; see spio/bench/matmul.py for the shapes, method and targets.
"""

from spio.bench.matmul import main

if __name__ == "__main__":
    raise SystemExit(main())
