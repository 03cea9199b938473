"""spio's LayerNorm2d vs PyTorch and an elementwise pass:
`python benchmarks/bench_layernorm_2d.py [--quick] [--csv F] [--plot F] [--dtype fp16|bf16|fp32]`.

The same as `spio bench layernorm2d`; see spio/bench/layernorm_2d.py for the shapes, method and
targets.
"""

from spio.bench.layernorm_2d import main

if __name__ == "__main__":
    raise SystemExit(main())
