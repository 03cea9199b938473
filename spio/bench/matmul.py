"""`spio bench matmul`: spio's mma.sync GEMM vs cuBLAS (torch.matmul) in the same run.

Shapes: square M = N = K in 1024..8192, and LLM projections: M tokens (16..8192) x K 4096 x
N 4096 / 11008 with the weight stored (N, K) (nn.Linear's layout, b_transposed=True; cuBLAS gets
the same transposed view). fp16 and bf16, fp32 accumulation, output in the operand dtype.

Method: spio.bench.timing.bench (CUDA events, time-based warm-up, L2 flushed before every rep,
median and p20/p80). spio's column times the kernel launch of the config the op would pick
(the performance model, else the heuristic), with arguments prepared once, so Python dispatch
is not in the number; cuBLAS times `torch.matmul` on the same tensors. Compiles happen in a
warm-up pass; the timed pass runs under SPIO_ASSERT_NO_COMPILE. Each shape is also checked:
spio's result against cuBLAS's.

Targets (H100, issue 7): >= 70% of cuBLAS at 8192^3 (fp16 and bf16) and >= 60% on every square
size >= 2048. cuBLAS uses Hopper's wgmma; mma.sync's own ceiling is lower (benchmarks/mma_probe.py
measures it).

    spio bench matmul [--quick] [--csv out.csv] [--plot out.png] [--dtype fp16|bf16|both]
    spio bench matmul --sweep 8192    # every config at 8192^3 fp16, fastest first
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from spio.bench.progress import progress
from spio.bench.report import parse_args, plot, print_table, write_csv
from spio.bench.timing import bench

SQUARE = (1024, 2048, 4096, 8192)
TOKENS = (16, 64, 256, 1024, 4096, 8192)
LLM_N = (4096, 11008)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def shapes(quick: bool) -> list[tuple[str, int, int, int, bool]]:
    """(label, m, n, k, b_transposed) in report order."""
    sq = (2048, 8192) if quick else SQUARE
    tokens = (16, 4096) if quick else TOKENS
    out = [(f"{s}^3", s, s, s, False) for s in sq]
    out += [(f"{m}x4096x{n}", m, n, 4096, True) for n in LLM_N for m in tokens]
    return out


def _prepared_launch(a, b, c, b_transposed):
    """The op's kernel choice for these tensors, as a zero-argument launch, and its config."""
    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.select import op_config

    m, k = a.shape
    n = c.shape[1]
    dtype = str(a.dtype).removeprefix("torch.")
    p = mm.MatmulParams(m, n, k, dtype, dtype, b_transposed=b_transposed)
    dev = device_attributes(a.device.index or 0)
    cfg = op_config(mm.DEF, p, dev)  # what the op picks
    stream = torch.cuda.current_stream(a.device).cuda_stream
    mm.launch(p, cfg, c, a, b, stream=stream, device=dev)  # compiles and loads (warm-up)

    def run():
        mm.launch(p, cfg, c, a, b, stream=stream, device=dev)

    return run, cfg


def measure(label, m, n, k, b_transposed, dtype_name, reps) -> dict:
    from spio.settings import override

    dt = DTYPES[dtype_name]
    dev = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(m, k, device=dev).to(dt)
    b = torch.randn(*((n, k) if b_transposed else (k, n)), device=dev).to(dt)
    c = torch.empty(m, n, device=dev, dtype=dt)
    bm = b.t() if b_transposed else b
    run, cfg = _prepared_launch(a, b, c, b_transposed)
    with override(assert_no_compile=True):
        t_spio = bench(run, reps=reps, device=dev)
    t_cublas = bench(lambda: torch.matmul(a, bm), reps=reps, device=dev)
    run()
    ref = torch.matmul(a, bm).float()
    err = ((c.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    flops = 2 * m * n * k
    spio_tf, cublas_tf = t_spio.tflops(flops), t_cublas.tflops(flops)
    return {
        "shape": label,
        "dtype": dtype_name,
        "spio_tflops": spio_tf,
        "cublas_tflops": cublas_tf,
        "ratio": spio_tf / cublas_tf,
        "spio_ms": t_spio.median_ms,
        "spio_p20_ms": t_spio.p20_ms,
        "spio_p80_ms": t_spio.p80_ms,
        "cublas_ms": t_cublas.median_ms,
        "rel_err_vs_cublas": err,
        "config": f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.warps_m}x{cfg.warps_n} "
        f"s{cfg.stages} r{cfg.raster}",
    }


def _targets(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        if not r["shape"].endswith("^3"):
            continue
        size = int(r["shape"][:-2])
        goal = 0.70 if size == 8192 else 0.60 if size >= 2048 else None
        if goal is not None:
            verdict = "met" if r["ratio"] >= goal else "MISSED"
            lines.append(
                f"  {r['shape']:>7} {r['dtype']}: {r['ratio']:.0%} of cuBLAS "
                f"(target {goal:.0%}) {verdict}"
            )
    return lines


def sweep(size: int, dtype_name: str, reps: int) -> list[dict]:
    """Times every config of the family at size^3 (row-major B), fastest first, vs cuBLAS."""
    from spio.cuda import device_attributes
    from spio.kernels import matmul as mm
    from spio.kernels.loader import compile_specs
    from spio.settings import override

    dt = DTYPES[dtype_name]
    dev = torch.device("cuda", torch.cuda.current_device())
    attrs = device_attributes(dev.index)
    name = str(dt).removeprefix("torch.")
    p = mm.MatmulParams(size, size, size, name, name)
    cfgs = mm.configs(p, attrs)
    # fill the disk cache in parallel; launches below only load
    compile_specs([mm.spec(p, cfg, attrs) for cfg in cfgs], attrs.arch, progress=None)
    a = torch.randn(size, size, device=dev).to(dt)
    b = torch.randn(size, size, device=dev).to(dt)
    c = torch.empty(size, size, device=dev, dtype=dt)
    stream = torch.cuda.current_stream(dev).cuda_stream
    flops = 2 * size**3
    cublas = bench(lambda: torch.matmul(a, b), reps=reps, device=dev).tflops(flops)
    rows: list[dict] = []
    with override(assert_no_compile=True):
        for cfg in progress(cfgs, f"matmul {size}^3 {dtype_name}", "config"):

            def run(cfg=cfg):
                mm.launch(p, cfg, c, a, b, stream=stream, device=attrs)

            t = bench(run, reps=reps, device=dev).tflops(flops)
            rows.append(
                {"config": str(cfg).removeprefix("MatmulConfig"), "tflops": t, "ratio": t / cublas}
            )
    rows.sort(key=lambda r: -r["tflops"])
    heur = mm.heuristic(p, attrs)
    print(f"\nmatmul {size}^3 {dtype_name}: cuBLAS {cublas:.1f} TFLOP/s; heuristic {heur}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spio bench matmul",
        description=__doc__.split("\n")[0]
        + " Shapes: squares 1024-8192 and LLM projections (M tokens x 4096 x 4096/11008).",
    )
    ap.add_argument("--quick", action="store_true", help="a few shapes, fewer reps")
    ap.add_argument("--csv", type=Path, default=None, help="write the table as CSV")
    ap.add_argument(
        "--plot", type=Path, default=None, help="write a PNG bar chart (needs matplotlib)"
    )
    ap.add_argument(
        "--dtype", choices=("fp16", "bf16", "both"), default="both", help="default both"
    )
    ap.add_argument(
        "--sweep",
        type=int,
        default=None,
        metavar="SIZE",
        help="time every config at SIZE^3 (first dtype) and list them fastest first",
    )
    return ap


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Option combinations the parser cannot express (a usage error, before anything runs)."""
    if args.sweep is not None and args.sweep < 1:
        ap.error(f"--sweep SIZE: a matrix size of at least 1, got {args.sweep}")
    if args.sweep and args.plot:
        ap.error(
            "--plot draws the shape table; --sweep prints its configs (use --csv to keep them)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = parse_args(ap, argv, check_args)
    if not torch.cuda.is_available():
        print("spio bench matmul: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    if args.sweep:
        rows = sweep(args.sweep, "bf16" if args.dtype == "bf16" else "fp16", 10)
        print_table(rows[:20])
        if args.csv:
            write_csv(rows, args.csv)
        return 0
    dtypes = ("fp16", "bf16") if args.dtype == "both" else (args.dtype,)
    reps = 20 if args.quick else 50
    rows = []
    for label, m, n, k, bt in shapes(args.quick):
        for d in dtypes:
            rows.append(measure(label, m, n, k, bt, d, reps))
            print(
                f"  {label:>16} {d}: spio {rows[-1]['spio_tflops']:.1f} TFLOP/s, "
                f"cuBLAS {rows[-1]['cublas_tflops']:.1f} ({rows[-1]['ratio']:.0%})",
                flush=True,
            )
    print(f"\nmatmul on {torch.cuda.get_device_name()} (TFLOP/s, median, L2 flushed)")
    print_table(rows)
    print("\nTargets:")
    print("\n".join(_targets(rows)) or "  (no square shapes >= 2048 measured)")
    bad = [r for r in rows if r["rel_err_vs_cublas"] > 1e-2]
    if bad:
        print(f"\nWRONG RESULTS on {[r['shape'] + ' ' + r['dtype'] for r in bad]}")
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        for r in rows:
            r["label"] = f"{r['shape']} {r['dtype']}"
        plot(
            rows,
            "label",
            ["spio_tflops", "cublas_tflops"],
            args.plot,
            ylabel="TFLOP/s",
            title=f"matmul, {torch.cuda.get_device_name()}",
        )
    return 1 if bad else 0
