"""timm models' training steps with and without spio.layers.transform:
`python benchmarks/bench_e2e.py [--models ...] [--modes ...] [--layers] [--csv F]`.

The same as `spio bench e2e`; see spio/bench/e2e.py for the models, method and columns.
"""

from spio.bench.e2e import main

if __name__ == "__main__":
    raise SystemExit(main())
