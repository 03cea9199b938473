"""spio's conv2d_gw8 kernels vs cuDNN vs an elementwise pass:
`python benchmarks/bench_conv2d_gw8.py [--quick] [--csv F] [--plot F]
[--kernel fprop|dgrad|wgrad|all]`.

The same as `spio bench conv2d-gw8`; see spio/bench/conv2d_gw8.py for the grid, method and targets.
"""

from spio.bench.conv2d_gw8 import main

if __name__ == "__main__":
    raise SystemExit(main())
