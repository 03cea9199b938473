"""What a bias costs each library, cuBLAS and spio, kernels timed with the L2 flushed.

`python benchmarks/bench_matmul_bias_cost.py [--shapes "MxNxK;..."]
[--reps 15] [--dtype fp16,bf16] [--seed S]`.

Per shape (B as (N, K), nn.Linear's layout) and dtype: `torch.matmul(a, w.t())`,
`torch.addmm(bias, a, w.t())` (cuBLASLt's bias epilogue), and `spio.functional.matmul` without
and with the bias, each once per rep in a fresh random order, the L2 flushed before each, CUDA
events; the median per variant, its speed against `torch.matmul`'s, and the CUDA kernels each
call runs (the profiler's names: which cuBLAS kernel, which tile). The twenty-fourth session
found spio's bias costing 3.5-10% where cuBLAS's cost -2% to +3% (docs/ops/matmul.md).
"""

from __future__ import annotations

import argparse
import random
import statistics

SHAPES = "8192x8192x8192;4096x11008x4096;4096x4096x4096;2048x2048x2048"


def kernel_names(fn) -> list[str]:
    """The CUDA kernels (and memsets) one call of `fn` runs."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]


def measure(m: int, n: int, k: int, dt, reps: int, seed: int) -> dict[str, dict]:
    import torch

    import spio.functional as sf
    from spio.cuda import device_attributes

    a = torch.randn(m, k, device="cuda").to(dt)
    w = torch.randn(n, k, device="cuda").to(dt)
    bias = torch.randn(n, device="cuda").to(dt)
    fns = {
        "torch.matmul": lambda: torch.matmul(a, w.t()),
        "torch.addmm(bias)": lambda: torch.addmm(bias, a, w.t()),
        "spio": lambda: sf.matmul(a, w, b_transposed=True),
        "spio(bias)": lambda: sf.matmul(a, w, bias=bias, b_transposed=True),
    }
    for ours, theirs in (("spio", "torch.matmul"), ("spio(bias)", "torch.addmm(bias)")):
        ref = fns[theirs]().float()
        err = ((fns[ours]().float() - ref).abs().max() / ref.abs().max()).item()
        if not err <= 1e-2:
            raise SystemExit(f"{ours} at {m}x{n}x{k}: relative error {err:.2e} against cuBLAS")
    names = {name: kernel_names(fn) for name, fn in fns.items()}
    # The paired bench's timer (this script runs beside it: benchmarks/ is on sys.path).
    from bench_matmul_sm90_paired import flushed_times

    times = flushed_times(fns, reps, seed, device_attributes(torch.cuda.current_device()).l2_bytes)
    med = {name: statistics.median(t) for name, t in times.items()}
    return {
        name: {"us": med[name], "tflops": 2 * m * n * k / med[name] / 1e6,
               "of_matmul": med["torch.matmul"] / med[name], "kernels": names[name]}
        for name in fns
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK;... (B as (N, K))")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dtype", default="fp16,bf16")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    import torch

    from spio.bench.matmul import DTYPES, parse_shapes

    seed = random.randrange(2**31) if a.seed is None else a.seed
    print(f"seed {seed}, {torch.cuda.get_device_name()}", flush=True)
    for m, n, k in parse_shapes(a.shapes):
        for dname in a.dtype.split(","):
            rows = measure(m, n, k, DTYPES[dname], a.reps, seed)
            plain, biased = rows["spio"]["us"], rows["spio(bias)"]["us"]
            t_plain, t_biased = rows["torch.matmul"]["us"], rows["torch.addmm(bias)"]["us"]
            print(
                f"{m}x{n}x{k} {dname}: a bias costs cuBLAS {t_biased / t_plain - 1:+.1%}, "
                f"spio {biased / plain - 1:+.1%}",
                flush=True,
            )
            for name, r in rows.items():
                print(f"  {name:18s} {r['us']:8.1f} us {r['tflops']:5.0f} TFLOP/s "
                      f"{r['of_matmul']:.3f} of torch.matmul  {', '.join(r['kernels'])}",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
