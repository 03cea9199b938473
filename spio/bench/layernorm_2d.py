"""`spio bench layernorm2d`: spio's LayerNorm2d kernels vs PyTorch and an elementwise pass.

Shapes: docs/baseline.md's ConvNeXt-like stages at N=128 (C64@56², C128@28², C256@14², C512@7²)
and ConvNeXt widths up to C=1024 (C96@56², C192@28², C384@14², C768@7², C1024@7²); fp16 default.

Columns (GB/s, each counting the same bytes: spio's traffic per the kernel's header comment):
  spio        forward: the kernel the op picks (heuristic/model), launch only, no Python dispatch
  torch_cl    timm's way on a channels_last input: F.layer_norm(x.permute(0, 2, 3, 1)) (contiguous)
  torch_nchw  the same on a contiguous NCHW input (the permuted view is strided)
  add1        an elementwise pass of the same size, torch.add(x, 1, out=y): the practical ceiling
  backward: spio's dx kernel + the ordered dweight/dbias reduce vs aten.native_layer_norm_backward
  on the permuted channels_last view; the reference line is the measured copy bandwidth.
  copy_fwd, copy_bwd  the same-size copy yardstick: dst.copy_(src) of (traffic bytes / 2), so it
              reads and writes exactly the forward's (backward's) traffic, timed the same way;
              fwd_vs_copy, bwd_vs_copy are the copy's time over spio's (1.0 = copy speed)
  bwd_vs_bigcopy  spio's backward GB/s over the large-copy bandwidth (2 GiB copy): at these sizes
              (6-50 MB) even a plain copy or elementwise pass reaches only part of it (fixed
              launch and ramp costs), so both yardsticks are reported

Method: spio.bench.timing.bench (CUDA events, time-based warm-up, L2 flushed before every rep,
median, p20/p80). Compiles happen in a warm-up pass; the timed pass runs under
SPIO_ASSERT_NO_COMPILE. Each shape's outputs are checked against PyTorch's.

Targets (H100, issue 5): forward ≥ 85% of add1 and ≥ 4× torch_cl at N=128; backward ≥ 75% of
copy speed counting its real traffic (read x, dy; write dx; mean/rstd), reported against both
the same-size copy and the large-copy bandwidth.

`--sweep-bwd` then times every backward config (dx kernel + reduce) and the reduce alone at the
baseline shapes and prints the fastest five next to the heuristic's pick: the data for the
heuristic (docs/ops/layernorm_2d.md says which choices are measured and which expected).

    spio bench layernorm2d [--quick] [--csv out.csv] [--plot out.png] [--dtype fp16|bf16|fp32]
                           [--sweep-bwd]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from spio.bench.progress import progress
from spio.bench.report import parse_args, plot, print_table, write_csv
from spio.bench.timing import bench, copy_bandwidth_gbps

BASELINE = ((64, 56), (128, 28), (256, 14), (512, 7))
WIDTHS = ((96, 56), (192, 28), (384, 14), (768, 7), (1024, 7))
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
BATCH = 128


def shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(N, C, H=W) in report order."""
    out = [(BATCH, c, s) for c, s in BASELINE]
    if not quick:
        out += [(BATCH, c, s) for c, s in WIDTHS]
    return out


def _prepared(x, w, b, dy):
    """Zero-argument launches of the op's forward and backward kernels for these tensors."""
    from spio.cuda import device_attributes
    from spio.kernels import layernorm_2d as k
    from spio.kernels.layernorm_2d_params import LayerNorm2dParams
    from spio.kernels.loader import default_function_cache
    from spio.select import op_config

    p = LayerNorm2dParams.from_tensors(x, w, b)
    dev = device_attributes(x.device.index or 0)
    cache = default_function_cache()
    fwd_cfg = op_config(k.FWD, p, dev)  # the configs the op runs (at M's bucket)
    bwd_cfg = op_config(k.BWD, p, dev)
    fwd = cache.get(k.FWD, p.static(), fwd_cfg, dev)
    bwd = cache.get(k.BWD, p.static(), bwd_cfg, dev)
    red = True if k.needs_reduce(p) else None  # launch_backward derives the reduce variant
    stream = torch.cuda.current_stream(x.device).cuda_stream
    n, c, h, ww = x.shape
    y = torch.empty_like(x)
    mean = x.new_empty((n, h, ww), dtype=torch.float32)
    rstd = torch.empty_like(mean)
    dx = torch.empty_like(x)
    dw, db = torch.empty_like(w), torch.empty_like(b)
    parts = k.parts(bwd, p, bwd_cfg, dev)
    dwp = x.new_empty((parts, c), dtype=torch.float32)
    dbp = torch.empty_like(dwp)

    def forward():
        k.launch_forward(
            fwd,
            p,
            fwd_cfg,
            dev,
            x=x,
            weight=w,
            bias=b,
            y=y,
            mean=mean,
            rstd=rstd,
            eps=1e-6,
            stream=stream,
        )

    def backward():
        k.launch_backward(
            bwd,
            red,
            p,
            bwd_cfg,
            dev,
            x=x,
            dy=dy,
            mean=mean,
            rstd=rstd,
            weight=w,
            dx=dx,
            dweight=dw,
            dbias=db,
            dweight_part=dwp,
            dbias_part=dbp,
            stream=stream,
        )

    forward()
    backward()
    torch.cuda.synchronize()
    configs = f"fwd {_short(fwd_cfg)} | bwd {_short(bwd_cfg)}"
    return p, forward, backward, (y, dx, dw, db), configs


def _short(cfg) -> str:
    pf = " pf" if getattr(cfg, "prefetch", False) else ""
    return f"t{cfg.threads_per_row}xr{cfg.rows_per_block} v{cfg.vec_bytes}{pf}"


def _rel_err(a: torch.Tensor, e: torch.Tensor) -> float:
    a, e = a.float(), e.float()
    return ((a - e).abs().max() / e.abs().max().clamp_min(1e-30)).item()


def measure(n: int, c: int, s: int, dtype: torch.dtype, reps: int) -> dict:
    from spio.kernels import layernorm_2d as k
    from spio.settings import override

    dev = torch.device("cuda", torch.cuda.current_device())
    x = (3 + torch.randn(n, c, s, s, device=dev)).to(dtype).to(memory_format=torch.channels_last)
    x_nchw = x.contiguous()
    w, b = torch.randn(c, device=dev).to(dtype), torch.randn(c, device=dev).to(dtype)
    dy = torch.randn_like(x)
    p, forward, backward, (y, dx, dw, db), configs = _prepared(x, w, b, dy)
    with override(assert_no_compile=True):
        t_fwd = bench(forward, reps=reps, device=dev)
        t_bwd = bench(backward, reps=reps, device=dev)
    xp, dyp = x.permute(0, 2, 3, 1), dy.permute(0, 2, 3, 1)
    t_cl = bench(lambda: F.layer_norm(xp, (c,), w, b, 1e-6), reps=reps, device=dev)
    t_nchw = bench(
        lambda: F.layer_norm(x_nchw.permute(0, 2, 3, 1), (c,), w, b, 1e-6), reps=reps, device=dev
    )
    out = torch.empty_like(x)
    t_add = bench(lambda: torch.add(x, 1, out=out), reps=reps, device=dev)
    ref_y, mean, rstd = torch.native_layer_norm(xp, (c,), w, b, 1e-6)

    def torch_backward():
        torch.ops.aten.native_layer_norm_backward(
            dyp, xp, (c,), mean, rstd, w, b, [True, True, True]
        )

    t_tbwd = bench(torch_backward, reps=reps, device=dev)
    fwd_bytes = k.FWD.stats(p).bytes_moved
    bwd_bytes = k.BWD.stats(p).bytes_moved
    t_copy_fwd, t_copy_bwd = (
        _same_size_copy(nbytes, reps, dev) for nbytes in (fwd_bytes, bwd_bytes)
    )
    ref_dx, ref_dw, ref_db = torch.ops.aten.native_layer_norm_backward(
        dyp, xp, (c,), mean, rstd, w, b, [True, True, True]
    )
    return {
        "shape": f"C{c}@{s}x{s}",
        "spio_fwd_gbps": t_fwd.gbps(fwd_bytes),
        "torch_cl_gbps": t_cl.gbps(fwd_bytes),
        "torch_nchw_gbps": t_nchw.gbps(fwd_bytes),
        "add1_gbps": t_add.gbps(2 * x.numel() * x.element_size()),
        "fwd_vs_add1": t_add.median_ms / t_fwd.median_ms,
        "fwd_speedup": t_cl.median_ms / t_fwd.median_ms,
        "spio_bwd_gbps": t_bwd.gbps(bwd_bytes),
        "torch_bwd_gbps": t_tbwd.gbps(bwd_bytes),
        "bwd_speedup": t_tbwd.median_ms / t_bwd.median_ms,
        "copy_fwd_gbps": t_copy_fwd.gbps(fwd_bytes),
        "copy_bwd_gbps": t_copy_bwd.gbps(bwd_bytes),
        "fwd_vs_copy": t_copy_fwd.median_ms / t_fwd.median_ms,
        "bwd_vs_copy": t_copy_bwd.median_ms / t_bwd.median_ms,
        "spio_fwd_ms": t_fwd.median_ms,
        "spio_fwd_p20_ms": t_fwd.p20_ms,
        "spio_fwd_p80_ms": t_fwd.p80_ms,
        "spio_bwd_ms": t_bwd.median_ms,
        "err_y": _rel_err(y.permute(0, 2, 3, 1), ref_y),
        "err_dx": _rel_err(dx.permute(0, 2, 3, 1), ref_dx),
        "err_dw": _rel_err(dw, ref_dw),
        "err_db": _rel_err(db, ref_db),
        "configs": configs,
    }


def _same_size_copy(traffic_bytes: int, reps: int, dev: torch.device):
    """Timing of dst.copy_(src) over traffic_bytes / 2 bytes: the copy reads and writes exactly
    `traffic_bytes`, the speed a kernel moving that much data could reach at this size."""
    src = torch.empty(max(traffic_bytes // 2, 1), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    return bench(lambda: dst.copy_(src), reps=reps, device=dev)


def _ok(met: bool) -> str:
    return "met" if met else "MISSED"


def _targets(rows: list[dict], copy_gbps: float) -> list[str]:
    """Issue 5's targets per shape; the backward against both the same-size copy and the
    large-copy bandwidth (met/MISSED judged on each)."""
    lines = []
    for r in rows:
        fwd_ok = r["fwd_vs_add1"] >= 0.85 and r["fwd_speedup"] >= 4.0
        big = r["spio_bwd_gbps"] / copy_gbps
        lines.append(
            f"  {r['shape']:>11}: forward {r['fwd_vs_add1']:.0%} of add1 (>= 85%), "
            f"{r['fwd_speedup']:.1f}x torch (>= 4x) {_ok(fwd_ok)}; backward (>= 75% of copy) "
            f"{r['bwd_vs_copy']:.0%} of the same-size copy {_ok(r['bwd_vs_copy'] >= 0.75)}, "
            f"{big:.0%} of the large copy {_ok(big >= 0.75)}"
        )
    return lines


def sweep_backward(dtype: torch.dtype, reps: int, copy_gbps: float) -> None:
    """Every backward config at the baseline shapes, fastest first, vs the heuristic's."""
    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.kernels import layernorm_2d as k
    from spio.kernels.layernorm_2d_params import LayerNorm2dParams
    from spio.kernels.layernorm_2d_reduce import make_reduce_runner
    from spio.kernels.loader import compile_specs

    dev = device_attributes(torch.cuda.current_device())
    name = str(dtype).removeprefix("torch.")
    for c, s in BASELINE:
        p = LayerNorm2dParams(c=c, m=BATCH * s * s, dtype=name)
        nbytes = k.BWD.stats(p).bytes_moved
        best = k.BWD.heuristic(p, dev)
        cfgs = k.BWD.configs(p, dev)
        compile_specs([k.BWD.spec(p, cfg, dev) for cfg in cfgs], dev.arch)  # parallel, disk cache
        timed = []
        for cfg in progress(cfgs, f"C{c}@{s}x{s} backward", "config", leave=False):
            try:
                timed.append(
                    (bench(k.make_runner(p, cfg, backward=True), reps=reps).median_ms, cfg)
                )
            except OutOfResources:
                continue
        timed.sort(key=lambda t: t[0])
        red = make_reduce_runner(p, k.BWD_REDUCE.heuristic(p, dev))
        red_us = bench(red, reps=reps).median_ms * 1e3
        print(f"\n  C{c}@{s}x{s} backward ({len(timed)} configs; reduce alone {red_us:.1f} us):")
        for rank, (ms, cfg) in enumerate(timed):
            if rank < 5 or cfg == best:
                mark = "  <- heuristic" if cfg == best else ""
                print(f"    #{rank + 1:<3} {_short(cfg):<16} {ms * 1e3:7.1f} us "
                      f"{nbytes / ms / 1e6 / copy_gbps:5.0%} of copy{mark}")  # fmt: skip


def sweep_reduce(dtype: torch.dtype) -> None:
    """Every layernorm_2d_bwd_reduce config at the real parts count of the backward heuristic
    (N = 128, C256@14² and C512@7²), partials L2-resident as after the backward; marks the
    config the op derives (`backward_reduce_config`), so its rule can be checked against
    measurement."""
    from spio.cuda import device_attributes
    from spio.kernels import layernorm_2d as k
    from spio.kernels.layernorm_2d_params import LayerNorm2dParams
    from spio.kernels.layernorm_2d_reduce import make_reduce_runner
    from spio.kernels.loader import default_function_cache

    dev = device_attributes(torch.cuda.current_device())
    dname = str(dtype).removeprefix("torch.")
    for c, hw in ((256, 14), (512, 7)):
        p = LayerNorm2dParams(c=c, m=BATCH * hw * hw, dtype=dname)
        bwd_cfg = k.BWD.heuristic(p, dev)
        bwd = default_function_cache().get(k.BWD, p.static(), bwd_cfg, dev)
        parts = k.parts(bwd, p, bwd_cfg, dev)
        pick = k.backward_reduce_config(bwd, p, dev)  # the op's: for the most parts, any M
        cfgs = k.BWD_REDUCE.configs(p, dev)
        us = {
            cfg: bench(make_reduce_runner(p, cfg), reps=300, flush_l2=False).median_ms * 1e3
            for cfg in progress(cfgs, f"C{c}@{hw}x{hw} reduce", "config", leave=False)
        }
        best = min(us, key=us.__getitem__)
        print(f"\n  reduce C{c}@{hw}x{hw} parts={parts}: reduce_config {pick} {us[pick]:.2f} us, "
              f"fastest {best} {us[best]:.2f} us")  # fmt: skip
        for cfg, t in sorted(us.items(), key=lambda kv: kv[1]):
            print(f"    {cfg}: {t:6.2f} us{'  <- reduce_config' if cfg == pick else ''}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spio bench layernorm2d",
        description=__doc__.split("\n")[0]
        + " Shapes: the baseline stages (docs/baseline.md), ConvNeXt widths up to C=1024, N=128.",
    )
    ap.add_argument("--quick", action="store_true", help="the four baseline shapes, fewer reps")
    ap.add_argument("--csv", type=Path, default=None, help="write the table as CSV")
    ap.add_argument(
        "--plot", type=Path, default=None, help="write a PNG bar chart (needs matplotlib)"
    )
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="fp16", help="default fp16")
    ap.add_argument(
        "--sweep-bwd", action="store_true", help="also time every backward config (baseline shapes)"
    )
    ap.add_argument(
        "--sweep-reduce",
        action="store_true",
        help="also time every backward-reduce config (C256@14x14, C512@7x7)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if not torch.cuda.is_available():
        print("spio bench layernorm2d: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    reps = 20 if args.quick else 50
    copy_gbps = copy_bandwidth_gbps()
    rows = []
    for n, c, s in shapes(args.quick):
        rows.append(measure(n, c, s, DTYPES[args.dtype], reps))
        r = rows[-1]
        r["bwd_vs_bigcopy"] = r["spio_bwd_gbps"] / copy_gbps
        print(
            f"  {r['shape']:>11}: fwd spio {r['spio_fwd_gbps']:.0f} GB/s, torch "
            f"{r['torch_cl_gbps']:.0f}, add1 {r['add1_gbps']:.0f}; bwd spio "
            f"{r['spio_bwd_gbps']:.0f}, torch {r['torch_bwd_gbps']:.0f}, same-size copy "
            f"{r['copy_bwd_gbps']:.0f} ({r['bwd_vs_copy']:.0%})",
            flush=True,
        )
    print(
        f"\nlayernorm_2d {args.dtype} N={BATCH} on {torch.cuda.get_device_name()} "
        f"(GB/s of spio's traffic, median, L2 flushed); large-copy bandwidth {copy_gbps:.0f} "
        "GB/s; copy_fwd/copy_bwd: a copy of the same traffic"
    )
    print_table(rows)
    print("\nTargets:")
    print("\n".join(_targets(rows, copy_gbps)))
    if args.sweep_bwd:
        print("\nBackward configs (dx kernel + ordered reduce, median, L2 flushed):")
        sweep_backward(DTYPES[args.dtype], reps, copy_gbps)
    if args.sweep_reduce:
        print("\nBackward-reduce configs (median, partials in L2):")
        sweep_reduce(DTYPES[args.dtype])
    tol = {"fp16": 1e-2, "bf16": 5e-2, "fp32": 1e-4}[args.dtype]
    bad = [r["shape"] for r in rows if max(r["err_y"], r["err_dx"]) > tol]
    if bad:
        print(f"\nWRONG RESULTS (vs PyTorch, > {tol}) on {bad}")
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        series = ["spio_fwd_gbps", "torch_cl_gbps", "torch_nchw_gbps", "add1_gbps",
                  "spio_bwd_gbps", "torch_bwd_gbps", "copy_bwd_gbps"]  # fmt: skip
        plot(rows, "shape", series, args.plot, ylabel="GB/s", roofline=copy_gbps,
             title=f"layernorm_2d {args.dtype}, N={BATCH}")  # fmt: skip
    return 1 if bad else 0
