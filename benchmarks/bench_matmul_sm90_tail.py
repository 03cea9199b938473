"""The Hopper matmul's split tail against the plain config it splits, interleaved:
`python benchmarks/bench_matmul_sm90_tail.py [--shapes "MxNxK;..."] [--rounds 5]`.

For each shape (fp16, B as (N, K)): 128 x 256 s4 plain, the same with `tail` at most 4, 8 and 16
splits per tail tile (`matmul_sm90.tail_plan`), and cuBLAS's `a @ b.t()`, each timed by
`spio.bench.timing.bench` (L2 flushed, median of 10) once per round, rounds interleaved so drift
hits every column alike; the median of the rounds and their spread are printed, with the
heuristic's pick. Each variant's
result is checked against cuBLAS's first. Kernel time only: the op as called is
`spio bench matmul --shapes`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

SHAPES = "777x5000x3000;12608x768x3072;2176x2176x2176;3000x3000x3000;5000x5000x5000;" \
    "1152x4608x1152;2048x11008x4096;6000x1000x3000;4096x11008x4096"  # fmt: skip
MAX_SPLITS = (4, 8, 16)


def runs_for(m: int, n: int, k: int) -> tuple[dict, dict]:
    """{name: zero-argument launch} for one shape, and the tail plans by max splits."""
    import torch

    from spio.cuda import device_attributes
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.matmul import MatmulParams

    dev = device_attributes(torch.cuda.current_device())
    p = MatmulParams(m, n, k, "float16", "float16", b_transposed=True)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream
    ref = a.float() @ b.float().t()
    plain, tail = k90.MatmulSm90Config(256, 4), k90.MatmulSm90Config(256, 4, tail=True)
    variants = [("n256 s4", plain, k90.TAIL_MAX_SPLITS)]
    variants += [(f"n256 s4 t max{most}", tail, most) for most in MAX_SPLITS]
    runs: dict[str, Callable[[], object]] = {}
    plans: dict[int, tuple[int, int]] = {}
    shipped = k90.TAIL_MAX_SPLITS
    try:
        for name, cfg, most in variants:
            k90.TAIL_MAX_SPLITS = most  # read by tail_plan when `bound` binds the launch
            run = k90.bound(p, cfg, dev)
            c.fill_(float("nan"))
            run(c, a, b, None, stream)
            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 1e-2:
                raise AssertionError(f"{m}x{n}x{k} {name}: max relative error {err}")
            runs[name] = lambda run=run: run(c, a, b, None, stream)
            if cfg.tail:
                plans[most] = k90.tail_plan(p, cfg, dev)
    finally:
        k90.TAIL_MAX_SPLITS = shipped
    runs["cublas"] = lambda: torch.matmul(a, b.t(), out=c)
    return runs, plans


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK;... (K a multiple of 8)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_matmul_sm90_tail needs an sm_90 GPU (H100 / H200)")
        return 2
    from bench_matmul_sm90 import parse_shapes

    from spio.bench.timing import bench
    from spio.cuda import device_attributes
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.matmul import MatmulParams

    dev = device_attributes(torch.cuda.current_device())
    print(
        torch.cuda.get_device_name(), f"{args.rounds} rounds, µs (median of rounds, ±half spread)"
    )
    for m, n, k in parse_shapes(args.shapes):
        runs, plans = runs_for(m, n, k)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                times[name].append(bench(fn, reps=10).median_ms * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        pick = k90.heuristic(MatmulParams(m, n, k, "float16", "float16", True), dev).label()
        print(f"{m}x{n}x{k}: pick {pick}, tail plans (dp_tiles, splits) by max splits {plans}")
        for name, v in times.items():
            spread = (max(v) - min(v)) / 2 / med[name]
            ratio = med["cublas"] / med[name]
            print(f"  {name:>14} {med[name]:8.1f} ±{spread:4.0%}  {ratio:.2f} of cuBLAS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
