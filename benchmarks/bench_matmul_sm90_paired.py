"""Issue 16's large products measured in pairs: spio and cuBLAS alternately, so the GPU's clock
drift over a run (an H100 throttles under 8192³: whichever library ran first was up to 16% faster)
falls on both alike. `python benchmarks/bench_matmul_sm90_paired.py [--shapes "MxNxK;..."]
[--pairs 15] [--dtype fp16,bf16] [--bias] [--out-dtype fp32]`.

For each shape (B as (N, K), nn.Linear's layout) and dtype:
- as called: `--pairs` pairs of batches, each batch back-to-back eager calls of the op
  (`spio.functional.matmul`) or of PyTorch's call for it (`torch.matmul`; with `--bias` /
  `--out-dtype fp32` `spio.bench.matmul.torch_equivalent`'s addmm / mm) and its final
  synchronize, wall time per call (host path included), the two batches of a pair in a
  random order; the ratio cuBLAS / spio per pair, median and p10-p90 over the pairs. Where
  one weight is small (decode shapes) also with the calls cycling through weights of 3x the L2
  in all, as a model's successive layers read theirs from HBM (back-to-back calls on one weight
  keep it in L2).
- kernels, L2 flushed before every launch: per rep, cuBLAS and each Hopper config (the
  heuristic's pick and the 256-wide alternatives it chooses among at large products) once each
  in a fresh random order, CUDA events; per config the median time and the median over reps of
  cuBLAS's time / its time in the same rep.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace

SHAPES = "8192x8192x8192;4096x11008x4096;4096x4096x4096;2048x2048x2048;8192x4096x11008"


def _q(values: list[float], f: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(f * (len(v) - 1))))]


def alternatives():
    """The Hopper configs timed beside the pick: the 256-wide family at large products."""
    from spio.kernels import matmul_sm90 as k90

    base = k90.MatmulSm90Config(256, 4)
    return [
        base,
        replace(base, stages=3, persistent=True),
        replace(base, persistent=True),
        replace(base, stages=3, cluster_m=2, persistent=True),
        replace(base, stages=3, cluster_m=2),
        replace(base, tail=True),
    ]


def as_called(
    m: int,
    n: int,
    k: int,
    dt,
    pairs: int,
    seed: int,
    weights: int = 1,
    bias: bool = False,
    out_dtype=None,
) -> dict:
    """Pairs of batches of eager op calls, spio and torch alternately. `weights` > 1: the calls
    cycle through that many weight matrices (a model's successive layers: each read from HBM
    once the set outgrows the L2). `bias`, `out_dtype`: the epilogue's variants, PyTorch's side
    the call a PyTorch user makes for them (`spio.bench.matmul.torch_equivalent`)."""
    import itertools

    import torch

    import spio.functional as sf
    from spio.bench.matmul import torch_equivalent

    a = torch.randn(m, k, device="cuda").to(dt)
    ws = [torch.randn(n, k, device="cuda").to(dt) for _ in range(weights)]
    bias_t = torch.randn(n, device="cuda").to(dt) if bias else None
    spio_calls = [
        lambda w=w: sf.matmul(a, w, bias=bias_t, out_dtype=out_dtype, b_transposed=True) for w in ws
    ]
    torch_calls = [torch_equivalent(a, w.t(), bias_t, out_dtype) for w in ws]
    ref = torch_calls[0]().float()
    err = ((spio_calls[0]().float() - ref).abs().max() / ref.abs().max()).item()
    _check(err, f"the op at {m}x{n}x{k}")
    once = _wall(torch_calls[0], 3)
    calls = max(3, int(20e-3 / once))  # ~20 ms of work per batch
    nxt_spio = itertools.cycle(spio_calls).__next__
    nxt_torch = itertools.cycle(torch_calls).__next__
    fns = {"spio": lambda: nxt_spio()(), "torch": lambda: nxt_torch()()}
    rng = random.Random(seed)
    per = {"spio": [], "torch": []}
    for _ in range(pairs):
        order = ["spio", "torch"]
        rng.shuffle(order)
        for name in order:
            per[name].append(_wall(fns[name], calls))
    ratios = [t / s for s, t in zip(per["spio"], per["torch"], strict=True)]
    flop = 2 * m * n * k
    return {
        "spio_us": statistics.median(per["spio"]) * 1e6,
        "torch_us": statistics.median(per["torch"]) * 1e6,
        "spio_tflops": flop / statistics.median(per["spio"]) / 1e12,
        "torch_tflops": flop / statistics.median(per["torch"]) / 1e12,
        "ratio": statistics.median(ratios),
        "ratio_p10": _q(ratios, 0.1),
        "ratio_p90": _q(ratios, 0.9),
        "calls": calls,
        "rel_err": err,
    }


# Largest relative error (max |spio - cuBLAS| / max |cuBLAS|) a result may have: both accumulate
# in fp32 and round to 16 bits; split-K sums in another order (the tests take 1e-2 too).
MAX_REL_ERR = 1e-2


def _check(err: float, what: str) -> None:
    """Stops the run on a wrong (or NaN) result: its timing would mean nothing."""
    if not err <= MAX_REL_ERR:
        raise SystemExit(f"{what}: relative error {err:.2e} against cuBLAS, above {MAX_REL_ERR}")


def _wall(fn, calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls, the final synchronize included."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls


def flushed_times(runs: dict, reps: int, seed: int, l2_bytes: int) -> dict[str, list[float]]:
    """µs of each of `runs` (name -> callable), every one once per rep in a fresh random order,
    the L2 flushed (a 2x-L2 buffer zeroed) before each, timed with CUDA events."""
    import torch

    flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        order = list(runs)
        rng.shuffle(order)
        events = []
        for name in order:
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            runs[name]()
            e.record()
            events.append((name, s, e))
        torch.cuda.synchronize()
        for name, s, e in events:
            times[name].append(s.elapsed_time(e) * 1e3)
    return times


def kernels(
    m: int, n: int, k: int, dt, reps: int, seed: int, bias: bool = False, out_dtype=None
) -> list[dict]:
    """cuBLAS and each config once per rep, shuffled, L2 flushed before each."""
    import torch

    from spio.bench.matmul import torch_equivalent
    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.kernels import matmul_sm90 as k90

    dev = device_attributes(torch.cuda.current_device())
    name = str(dt).removeprefix("torch.")
    out_dt = out_dtype or dt
    out_name = str(out_dt).removeprefix("torch.")
    p = mm.MatmulParams(m, n, k, name, out_name, b_transposed=True, has_bias=bias)
    pick = k90.heuristic(p, dev)
    configs = [pick] + [c for c in alternatives() if c != pick]
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(n, k, device="cuda").to(dt)
    bias_t = torch.randn(n, device="cuda").to(dt) if bias else None
    c = torch.empty(m, n, device="cuda", dtype=out_dt)
    # PyTorch's call allocates its output: host work only, outside the events' GPU time.
    runs = {"cublas": torch_equivalent(a, b.t(), bias_t, out_dtype)}
    ref = runs["cublas"]().float()
    stream = torch.cuda.current_stream().cuda_stream
    errs = {}
    for cfg in configs:
        if cfg.tail and k90.tail_plan(p, cfg, dev)[1] == 1:
            continue  # no split tail at this shape
        run = k90.bound(p, cfg, dev)
        c.fill_(float("nan"))
        run(c, a, b, bias_t, stream)
        errs[cfg.label()] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        _check(errs[cfg.label()], f"{cfg.label()} at {m}x{n}x{k}")
        runs[cfg.label()] = lambda run=run: run(
            c, a, b, bias_t, torch.cuda.current_stream().cuda_stream
        )
    for fn in runs.values():  # warm
        fn()
    times = flushed_times(runs, reps, seed, dev.l2_bytes)
    flop = 2 * m * n * k
    out = []
    for name, t in times.items():
        if name == "cublas":
            continue
        ratios = [cb / x for cb, x in zip(times["cublas"], t, strict=True)]
        out.append(
            {
                "config": name,
                "pick": name == pick.label(),
                "us": statistics.median(t),
                "tflops": flop / statistics.median(t) / 1e6,
                "of_cublas": statistics.median(ratios),
                "of_cublas_p10": _q(ratios, 0.1),
                "of_cublas_p90": _q(ratios, 0.9),
                "rel_err": errs[name],
            }
        )
    out.append({"config": "cublas", "us": statistics.median(times["cublas"]),
                "tflops": flop / statistics.median(times["cublas"]) / 1e6})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK;... (B as (N, K))")
    ap.add_argument("--pairs", type=int, default=15, help="pairs of op-call batches per shape")
    ap.add_argument("--reps", type=int, default=15, help="kernel reps (each config once a rep)")
    ap.add_argument("--dtype", default="fp16,bf16")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-kernels", action="store_true", help="the op as called only")
    ap.add_argument("--bias", action="store_true", help="add a bias (N,) in the epilogue")
    ap.add_argument("--out-dtype", choices=("same", "fp32"), default="same",
                    help="the output's dtype: the operands' (default) or fp32")  # fmt: skip
    a = ap.parse_args(argv)
    import torch

    from spio.bench.matmul import DTYPES, OUT_DTYPES, parse_shapes

    seed = random.randrange(2**31) if a.seed is None else a.seed
    out_dtype = OUT_DTYPES[a.out_dtype]
    epilogue = f"out {a.out_dtype}{', bias' if a.bias else ''}"
    print(f"seed {seed}, {torch.cuda.get_device_name()}, {epilogue}", flush=True)
    for m, n, k in parse_shapes(a.shapes):
        for dname in a.dtype.split(","):
            dt = DTYPES[dname]
            # A weight set of 3x the L2 when one weight is small: the layers of a model.
            size = n * k * dt.itemsize
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            rotate = min(64, -(-3 * l2 // size)) if size < l2 else 1
            for weights in sorted({1, rotate}):
                r = as_called(m, n, k, dt, a.pairs, seed, weights, a.bias, out_dtype)
                print(f"{m}x{n}x{k} {dname} as called ({weights} weight{'s'[:weights > 1]}): "
                      f"spio {r['spio_us']:.1f} / torch {r['torch_us']:.1f} us, "
                      f"{r['spio_tflops']:.1f} / {r['torch_tflops']:.1f} TFLOP/s, ratio "
                      f"{r['ratio']:.3f} (p10-p90 {r['ratio_p10']:.3f}-{r['ratio_p90']:.3f}, "
                      f"{r['calls']} calls a batch, rel err {r['rel_err']:.1e})",
                      flush=True)  # fmt: skip
            if a.no_kernels:
                continue
            for row in kernels(m, n, k, dt, a.reps, seed, a.bias, out_dtype):
                if row["config"] == "cublas":
                    print(f"    cublas {row['tflops']:.0f} TFLOP/s", flush=True)
                    continue
                mark = "*" if row["pick"] else " "
                print(f"  {mark} {row['config']:<28s} {row['tflops']:.0f} TFLOP/s, of cuBLAS "
                      f"{row['of_cublas']:.3f} (p10-p90 {row['of_cublas_p10']:.3f}-"
                      f"{row['of_cublas_p90']:.3f}), rel err {row['rel_err']:.1e}",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
