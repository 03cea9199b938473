"""The Hopper matmul at decode shapes: the swapped configs (`swap_ab`, C^T = B A^T in 16-, 32-
or 64-wide tiles of A) against the unswapped pick and cuBLAS, kernel time two ways:
`python benchmarks/bench_matmul_sm90_decode.py [--shapes "MxNxK;..."] [--csv F]`.

For each shape (fp16, B as (N, K), M <= 64): cuBLAS's `a @ b.t()`, the unswapped heuristic's
pick (`matmul_sm90.unswapped`), the unswapped split-K configs and plain 64/128/256-wide tiles,
and every swapped config of the space, each checked against fp64 first, then timed with the L2
flushed before every rep (`spio.bench.timing.bench`: B read from HBM, as a model's layers see
their weights) and replayed from a CUDA graph of 20 calls (`spio.bench.graph_timing`: B warm in
L2 when it fits, as issue 16's decode number is taken). Prints per shape the heuristic's pick,
the unswapped pick and the best of each measure, as fractions of cuBLAS's time; `--csv` writes
every config's row. Kernel time only: the op as called is `spio bench matmul --shapes`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHAPES = "1x4096x4096;16x4096x4096;32x4096x4096;64x4096x4096;16x11008x4096;16x4096x11008;" \
    "16x32000x4096;16x1024x4096;8x4096x1024;48x14336x4096"  # fmt: skip


def shape_rows(m: int, n: int, k: int) -> list[dict]:
    """Every timed config of one shape (and cuBLAS) as rows."""
    import torch

    from spio.bench.graph_timing import graph_time_us
    from spio.bench.timing import bench
    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.kernels import matmul_sm90 as k90

    dev = device_attributes(torch.cuda.current_device())
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(n, k, device="cuda").half()
    c = torch.empty(m, n, device="cuda", dtype=torch.half)
    p = mm.MatmulParams(m, n, k, "float16", "float16", b_transposed=True)
    ref = a.double() @ b.double().t()
    old = k90.unswapped(p, dev)
    space = [old, *(k90.MatmulSm90Config(w, s) for w, s in ((64, 4), (128, 6), (256, 4)))]
    space += [cfg for cfg in k90.configs(p, dev) if cfg.split_k > 1 or cfg.swap_ab]
    pick = k90.heuristic(p, dev)

    def times(fn) -> tuple[float, float]:
        return bench(fn, reps=30).median_ms * 1e3, graph_time_us(fn, calls=20).median

    timed = {"cublas": times(lambda: torch.matmul(a, b.t(), out=c))}
    for cfg in dict.fromkeys(space):  # in order, once each
        run = k90.bound(p, cfg, dev)
        c.fill_(float("nan"))
        run(c, a, b, None, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        if not err < 1e-2:
            raise AssertionError(f"{m}x{n}x{k} {cfg.label()}: relative error {err:.2e}")

        def call(run=run) -> None:  # the current stream: graph capture runs on a side one
            stream = torch.cuda.current_stream().cuda_stream
            if run.workspace is None:
                run(c, a, b, None, stream)
            else:
                ws = torch.empty(run.workspace, dtype=torch.float32, device="cuda")
                run(c, a, b, None, stream, ws)

        timed[cfg.label()] = times(call)
    flushed0, graph0 = timed["cublas"]
    return [
        {
            "shape": f"{m}x{n}x{k}",
            "config": label,
            "flushed_us": round(f, 2),
            "graph_us": round(g, 2),
            "of_cublas_flushed": round(flushed0 / f, 3),
            "of_cublas_graph": round(graph0 / g, 3),
            "pick": label == pick.label(),
            "unswapped_pick": label == old.label(),
        }  # fmt: skip
        for label, (f, g) in timed.items()
    ]


def summary(rows: list[dict]) -> str:
    """One line: cuBLAS, the pick, the unswapped pick, the best of each measure."""
    cublas = next(r for r in rows if r["config"] == "cublas")
    ours = [r for r in rows if r["config"] != "cublas"]
    pick = next(r for r in ours if r["pick"])
    old = next(r for r in ours if r["unswapped_pick"])
    best_f = min(ours, key=lambda r: r["flushed_us"])
    best_g = min(ours, key=lambda r: r["graph_us"])

    def show(r: dict) -> str:
        return f"{r['config']} {r['flushed_us']}/{r['graph_us']} us " \
            f"({r['of_cublas_flushed']}/{r['of_cublas_graph']})"  # fmt: skip

    return (
        f"{cublas['shape']}: cuBLAS {cublas['flushed_us']}/{cublas['graph_us']} us | pick "
        f"{show(pick)} | unswapped {show(old)} | best flushed {show(best_f)} | best graph "
        f"{show(best_g)}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="MxNxK;... (M <= 64, K a multiple of 8)")
    ap.add_argument("--csv", type=Path)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_matmul_sm90_decode needs an sm_90 GPU (H100 / H200)")
        return 2
    from spio.bench.matmul import parse_shapes
    from spio.bench.report import write_csv

    seed = torch.seed()
    print(f"seed {seed}, {torch.cuda.get_device_name()}; times flushed/graph, (of cuBLAS's)")
    rows: list[dict] = []
    for m, n, k in parse_shapes(args.shapes):
        shape = shape_rows(m, n, k)
        print(summary(shape), flush=True)
        rows += shape
    if args.csv:
        write_csv(rows, args.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
