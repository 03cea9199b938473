"""The Hopper matmul kernel (spio/src/matmul_sm90.cu) against cuBLAS and spio's mma.sync kernel,
kernel time side by side in one run: `python benchmarks/bench_matmul_sm90.py [--quick] [--csv F]`.

Shapes: issue 16's (8192³, 4096³, 4096x11008x4096, 2048³, 16x4096x4096) and LLM projections
(M tokens x K 4096 x N 4096 / 11008), B stored (N, K) as nn.Linear keeps it (the kernel's
layout), fp16 and bf16 in and out. Method: spio.bench.timing.bench (CUDA events, L2 flushed
before every rep, median); cuBLAS runs `a @ b.t()`, the mma.sync column the config spio's op
picks, the sm90 column every config of its space (the best is reported, with the config, and the
`heuristic` pick the op runs): a kernel diagnostic; the op as called is `spio bench matmul`.
Each result is checked against cuBLAS's (max relative error).

`--shapes "MxNxK;..."` times other shapes (a held-out yardstick for the heuristic); the run ends
with the heuristic's regret over the shapes (its time over the best config's: median, p90,
max), the measure issue 13 asks of every family's selection.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

SHAPES = [(8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 4096), (2048, 2048, 2048),
          (16, 4096, 4096), (1024, 4096, 4096), (8192, 4096, 11008), (1, 4096, 4096),
          (64, 4096, 4096), (16, 11008, 4096), (16, 4096, 11008)]  # fmt: skip
QUICK = [(8192, 8192, 8192), (4096, 4096, 4096), (16, 4096, 4096)]
SPLIT_WORKSPACE_MAX = 1 << 30  # bytes of fp32 partials a timed split-K config may take


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """`spio bench matmul`'s --shapes parser ('MxNxK;...'), and K a multiple of 8 (the kernel
    moves rows in 16-byte pieces; the op would pad it, this bench times the kernel directly)."""
    from spio.bench.matmul import parse_shapes as op_shapes

    shapes = op_shapes(text)
    for m, n, k in shapes:
        if k % 8:
            raise ValueError(f"--shapes: K must be a multiple of 8 (16-byte rows), got {m}x{n}x{k}")
    return shapes


def regret_summary(rows: list[dict]) -> str:
    """The heuristic's regret (its time over the best config's) across rows: median, p90, max,
    and the worst shape."""
    import statistics

    regrets = sorted((r["heuristic_us"] / r["sm90_us"], r["shape"]) for r in rows)
    values = [v for v, _ in regrets]
    p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
    worst, shape = regrets[-1]
    return (
        f"heuristic regret over {len(values)} shapes: median {statistics.median(values):.3f}, "
        f"p90 {p90:.3f}, max {worst:.3f} ({shape})"
    )


def precompile(dtype_name: str) -> None:
    """Every variant of the space for B (N, K) in dtype_name, compiled in parallel (a variant
    does not depend on M, N, K; the space does: decode M adds the swapped widths)."""
    import torch

    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.loader import compile_specs

    dev = device_attributes(torch.cuda.current_device())
    specs = {}
    for m in (4096, 1, 17, 33):  # the swapped configs of each width at decode shapes
        p = mm.MatmulParams(m, 4096, 4096, dtype_name, dtype_name, b_transposed=True)
        for cfg in k90.configs(p, dev):
            # A split variant writes fp32 partials without the bias (what `bound` loads).
            q = replace(p, out_dtype="float32") if cfg.split_k > 1 else p
            specs[k90.spec(q, cfg, dev).title] = k90.spec(q, cfg, dev)
    compile_specs(list(specs.values()), dev.arch, progress=None)


def measure(
    m: int,
    n: int,
    k: int,
    dtype_name: str,
    reps: int,
    every: list,
    tma_store: bool = True,
    candidates: bool = False,
) -> dict:
    """The row of one shape; every config's TFLOP/s appended to `every`. `tma_store` False
    times every config with the register epilogue instead of the TMA store; `candidates` only
    the heuristic's candidates and the split-tail configs (the best is then theirs)."""
    import torch

    from spio.bench.timing import bench
    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.kernels import matmul_sm90 as k90
    from spio.select import op_config

    dt = getattr(torch, dtype_name)
    dev = device_attributes(torch.cuda.current_device())
    stream = torch.cuda.current_stream().cuda_stream
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(n, k, device="cuda").to(dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    p = mm.MatmulParams(m, n, k, dtype_name, dtype_name, b_transposed=True)
    flop = 2 * m * n * k

    ref = a @ b.t()
    t_cublas = bench(lambda: torch.matmul(a, b.t(), out=c), reps=reps).median_ms
    cfg = op_config(mm.DEF, p, dev)
    mm.launch(p, cfg, c, a, b, stream=stream, device=dev)
    t_mma = bench(lambda: mm.launch(p, cfg, c, a, b, stream=stream, device=dev), reps=reps)
    best = None
    pick = k90.heuristic(p, dev)
    t_pick = None
    space = k90.configs(p, dev)
    if candidates:
        space = [c for c in space if c in k90.HEURISTIC_CANDIDATES or c.tail or c == pick]
    for cfg90 in space:
        cfg90 = replace(cfg90, tma_store=tma_store)
        if cfg90.split_k * m * n * 4 > SPLIT_WORKSPACE_MAX:
            continue  # split-K's workspace (split_k x M x N fp32) would not fit comfortably
        if cfg90.tail and k90.tail_plan(p, cfg90, dev)[1] == 1:
            continue  # no split tail at this shape: it would run (and record) the plain variant
        c.fill_(float("nan"))
        run = k90.bound(p, cfg90, dev)
        run(c, a, b, None, stream)
        err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        t = bench(lambda run=run: run(c, a, b, None, stream), reps=reps).median_ms
        every.append({"shape": f"{m}x{n}x{k}", "dtype": dtype_name, "block_n": cfg90.block_n,
                      "stages": cfg90.stages, "cluster_m": cfg90.cluster_m,
                      "persistent": cfg90.persistent, "split_k": cfg90.split_k,
                      "tail": cfg90.tail, "swap_ab": cfg90.swap_ab,
                      "tflops": round(flop / t / 1e9, 1), "us": round(t * 1e3, 3)})  # fmt: skip
        if cfg90 == pick:
            t_pick = t
        if best is None or t < best[0]:
            best = (t, cfg90, err)
    assert best is not None and t_pick is not None
    t90, cfg90, err = best
    return {
        "shape": f"{m}x{n}x{k}", "dtype": dtype_name,
        "cublas_tflops": round(flop / t_cublas / 1e9, 1),
        "mma_sync_tflops": round(flop / t_mma.median_ms / 1e9, 1),
        "sm90_tflops": round(flop / t90 / 1e9, 1),
        "sm90_us": round(t90 * 1e3, 3),
        "sm90_of_cublas": round(t_cublas / t90, 3),
        "sm90_config": cfg90.label(), "sm90_max_rel_err": f"{err:.1e}",
        "heuristic_tflops": round(flop / t_pick / 1e9, 1),
        "heuristic_us": round(t_pick * 1e3, 3),
        "heuristic_config": pick.label(),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three shapes, fp16 only")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shapes", type=parse_shapes, help="MxNxK;... instead of the default shapes")
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--configs-csv", type=Path, help="every config's TFLOP/s per shape")
    ap.add_argument(
        "--registers",
        action="store_true",
        help="every config with the register epilogue (tma_store=False): the TMA store's baseline",
    )
    ap.add_argument(
        "--candidates",
        action="store_true",
        help="only the heuristic's candidates and the split-tail configs, not the whole space",
    )
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_matmul_sm90 needs an sm_90 GPU (H100 / H200)")
        return 2
    from spio.bench.report import print_table, write_csv

    rows: list[dict] = []
    every: list[dict] = []
    shapes = args.shapes or (QUICK if args.quick else SHAPES)
    for dtype_name in ("float16",) if args.quick or args.shapes else ("float16", "bfloat16"):
        precompile(dtype_name)
        for m, n, k in shapes:
            rows.append(
                measure(m, n, k, dtype_name, args.reps, every, not args.registers, args.candidates)
            )
            print(rows[-1], flush=True)
    print_table(rows)
    if args.csv:
        write_csv(rows, args.csv)
    if args.configs_csv:
        write_csv(every, args.configs_csv)
    print(regret_summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
