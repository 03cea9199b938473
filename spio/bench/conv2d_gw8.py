"""`spio bench conv2d-gw8`: spio's grouped-conv kernels vs cuDNN vs an elementwise pass, same run.

Grid (docs/baseline.md): C 64/128/256/512 at 56²/28²/14²/7², kernel 3/5/7 (padding k // 2),
N 1/8/32/128/256, fp16, channels_last; passes fprop, dgrad (input gradient) and wgrad (weight +
bias gradient). For each point:

- spio: the kernel launch(es) of the config the performance model (else the heuristic) picks
  for this N, arguments prepared once, so Python dispatch is not in the number (the op selects
  at N's bucket: N rounded up to a power of two, at most 256). dgrad reads the forward weight
  directly (no transform pass). wgrad's ordered reduction pass is timed separately as well and
  reported (`wgrad_reduce_us`); the spio column of wgrad includes the reduction.
- cuDNN: `F.conv2d` (fprop) and `aten.convolution_backward` (dgrad / wgrad with bias) with
  `torch.backends.cudnn.benchmark = True`.
- elementwise: `x + 1` on the input activation, the memory-bound reference of that size.

Effective bandwidth as in docs/baseline.md: (input + output + weight bytes) / time, the same bytes
for all three passes; the elementwise pass counts its own read + write. `copy` is the measured
device-to-device copy bandwidth (read + write), the speed-of-light line of the plots.
Method: spio.bench.timing.bench (CUDA events, L2 flushed before every rep, median); the variants
the grid selects are compiled up front in parallel (`compile_jobs`), loaded when a point's
launches are prepared, and the timed calls run under SPIO_ASSERT_NO_COMPILE=1. `--csv` is
rewritten (atomically) after every point, so an interrupted run keeps what it measured.
Each point also checks spio's output against cuDNN's (`max_rel_err`).

    spio bench conv2d-gw8 [--quick] [--csv out.csv] [--plot out.png]
                          [--kernel fprop|dgrad|wgrad|all]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from spio.bench.progress import progress
from spio.bench.report import parse_args, plot, print_table, write_csv
from spio.bench.timing import bench, copy_bandwidth_gbps
from spio.settings import settings

SIZES = ((64, 56), (128, 28), (256, 14), (512, 7))
KERNELS_RS = (3, 5, 7)
BATCHES = (1, 8, 32, 128, 256)
QUICK = ((64, 56, 3, 32), (64, 56, 3, 128), (128, 28, 5, 32), (256, 14, 3, 256), (512, 7, 7, 8))
PASSES = ("fprop", "dgrad", "wgrad")
CL = torch.channels_last


def grid(quick: bool) -> list[tuple[int, int, int, int]]:
    """(C, H=W, k, N) points in report order."""
    if quick:
        return list(QUICK)
    return [(c, hw, k, n) for c, hw in SIZES for k in KERNELS_RS for n in BATCHES]


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.double().abs().max().item() or 1.0
    return (got.double() - want.double()).abs().max().item() / scale


class _Point:
    """Tensors and prepared launches of one grid point."""

    def __init__(self, c: int, hw: int, k: int, n: int, dtype: torch.dtype):
        from spio.cuda import device_attributes

        dev_index = torch.cuda.current_device()
        self.dev = device_attributes(dev_index)
        self.p = params(c, hw, k, n, dtype)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.x = torch.randn(n, c, hw, hw, device="cuda").to(dtype).contiguous(memory_format=CL)
        self.w = torch.randn(c, 8, k, k, device="cuda").to(dtype) * 0.1
        self.b = torch.randn(c, device="cuda").to(dtype)
        self.dy = torch.randn_like(self.x)

    def _kernels(self, which: str) -> list[tuple[Any, Any]]:
        """(config, loaded kernel) of each launch of the pass, from `variants` (as precompiled)."""
        from spio.kernels.loader import default_function_cache

        cache = default_function_cache()
        return [
            (cfg, cache.get(kdef, v, cfg, self.dev))
            for kdef, v, cfg in variants(self.p, which, self.dev)
        ]

    def spio_fprop(self) -> tuple[Callable[[], None], torch.Tensor]:
        from spio.kernels.conv2d_gw8 import fprop as fp

        [(cfg, kern)] = self._kernels("fprop")
        y = torch.empty_like(self.x)
        run = fp.FpropLaunch(kern, self.p, cfg)  # what the op launches, bound once
        return (lambda: run(y, self.x, self.w, self.b, self.stream)), y

    def spio_dgrad(self):
        from spio.kernels.conv2d_gw8 import fprop as fp

        [(cfg, kern)] = self._kernels("dgrad")
        dx = torch.empty_like(self.x)
        run = fp.DgradLaunch(kern, self.p, cfg)
        return (lambda: run(dx, self.dy, self.w, self.stream)), dx

    def spio_wgrad(self):
        from spio.kernels.conv2d_gw8 import wgrad as wg
        from spio.kernels.conv2d_gw8 import wgrad_reduce as rd

        [(cfg, kern), (rcfg, rkern)] = self._kernels("wgrad")
        slices = wg.num_slices(self.p, cfg, self.dev)
        partial = torch.empty(slices * self.w.numel(), device="cuda")
        bias_partial = torch.empty(slices * self.p.c, device="cuda")
        dw, db = torch.empty_like(self.w), torch.empty_like(self.b)

        run = wg.WgradLaunch(kern, None, self.p, cfg, self.dev)  # the first pass, bound once

        def wgrad():
            run.partials(partial, bias_partial, self.x, self.dy, self.stream)

        def reduce():
            rd.reduce_launch(
                rkern, self.p, rcfg, dw, db, partial, bias_partial, slices, self.stream
            )

        def both():
            wgrad()
            reduce()

        return both, reduce, dw


def _cudnn(pt: _Point, which: str) -> tuple[Callable[[], object], Callable[[], torch.Tensor]]:
    p = pt.p
    groups = p.c // 8
    if which == "fprop":

        def forward():
            return torch.nn.functional.conv2d(pt.x, pt.w, pt.b, padding=p.padding, groups=groups)

        return forward, forward
    mask = [which == "dgrad", which == "wgrad", which == "wgrad"]

    def run():
        return torch.ops.aten.convolution_backward(
            pt.dy,
            pt.x,
            pt.w,
            [p.c],
            [1, 1],
            list(p.padding),
            [1, 1],
            False,
            [0, 0],
            groups,
            mask,
        )

    def result():
        out = run()
        return out[0] if which == "dgrad" else out[1]

    return run, result


def params(c: int, hw: int, k: int, n: int, dtype: torch.dtype):
    """The layer of one grid point: padding k // 2, with bias, channels_last."""
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    return Conv2dGw8Params(
        n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=k // 2, pad_w=k // 2, has_bias=True,
        dtype=str(dtype).removeprefix("torch."),
    )  # fmt: skip


def variants(p, which: str, dev) -> list[tuple[Any, Any, Any]]:
    """(family, layer variant, config) of each kernel that pass `which` of layer p launches: the
    config the op selects for this N (`op_config`: every pass at N's bucket), and for wgrad the
    reduction sized by its slice count, as the op does.
    The precompile and the timed launches both take them from here."""
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
    from spio.select import op_config

    kdef = {"fprop": fp.FPROP, "dgrad": fp.DGRAD, "wgrad": wg.WGRAD}[which]
    cfg = op_config(kdef, p, dev)
    out = [(kdef, p.variant(), cfg)]
    if which == "wgrad":
        out.append((rd.WGRAD_REDUCE, p.variant(), rd.reduce_config(p, cfg, dev)))
    return out


def compile_jobs(points, passes: tuple[str, ...], dtype: torch.dtype, dev) -> list:
    """One CompileJob per distinct kernel the grid will launch (`variants` of every pass and
    point), so `compile_many` can build them in parallel instead of one by one at first use."""
    from spio.kernels.loader import compile_job

    distinct = {}
    for c, hw, k, n in points:
        for which in passes:
            for kdef, v, cfg in variants(params(c, hw, k, n, dtype), which, dev):
                distinct[(kdef.name, v, cfg)] = (kdef, v, cfg)
    return [compile_job(kdef.spec(v, cfg, dev), dev.arch) for kdef, v, cfg in distinct.values()]


def measure(
    c: int, hw: int, k: int, n: int, passes: tuple[str, ...], copy_gbps: float, dtype: torch.dtype
) -> list[dict]:
    from spio.kernels.conv2d_gw8.fprop import stats
    from spio.settings import override

    pt = _Point(c, hw, k, n, dtype)
    nbytes = stats(pt.p).bytes_moved
    elem_bytes = 2 * pt.x.numel() * pt.x.element_size()
    t_elem = bench(lambda: pt.x + 1)
    rows = []
    for which in passes:
        extra = {}
        if which == "fprop":
            run, out = pt.spio_fprop()
        elif which == "dgrad":
            run, out = pt.spio_dgrad()
        else:
            run, reduce, out = pt.spio_wgrad()
        run()  # first call (the kernels were compiled up front and loaded above)
        torch.cuda.synchronize()
        with override(assert_no_compile=True):
            t_spio = bench(run)
            if which == "wgrad":
                extra["wgrad_reduce_us"] = 1e3 * bench(reduce).median_ms
        cud_run, cud_result = _cudnn(pt, which)
        t_cudnn = bench(cud_run)
        err = _rel_err(out, cud_result())
        spio_gbps, cudnn_gbps = t_spio.gbps(nbytes), t_cudnn.gbps(nbytes)
        elem_gbps = t_elem.gbps(elem_bytes)
        rows.append(
            {
                "pass": which,
                "shape": f"C{c} {hw}x{hw} k{k} N{n}",
                "C": c,
                "HW": hw,
                "k": k,
                "N": n,
                "spio_us": 1e3 * t_spio.median_ms,
                "cudnn_us": 1e3 * t_cudnn.median_ms,
                "spio_GBps": spio_gbps,
                "cudnn_GBps": cudnn_gbps,
                "elementwise_GBps": elem_gbps,
                "spio_vs_cudnn": cudnn_gbps and spio_gbps / cudnn_gbps,
                "spio_vs_elementwise": spio_gbps / elem_gbps,
                "spio_pct_copy": 100 * spio_gbps / copy_gbps,
                "max_rel_err": err,
                **extra,
            }
        )
    return rows


def summarize(rows: list[dict]) -> list[str]:
    """The issue's targets, point by point aggregated per pass."""
    lines = []
    for which in PASSES:
        sel = [r for r in rows if r["pass"] == which]
        big = [r for r in sel if r["N"] >= 8]
        if not sel:
            continue
        if big:
            gm = math.exp(sum(math.log(max(r["spio_vs_cudnn"], 1e-9)) for r in big) / len(big))
            slower = [r["shape"] for r in big if r["spio_vs_cudnn"] < 1]
            lines.append(
                f"{which}: geomean speedup over cuDNN (N>=8) {gm:.2f}x; "
                f"slower than cuDNN at {len(slower)} points {slower[:6]}"
            )
        k3 = [r for r in sel if r["k"] == 3 and r["N"] >= 32]
        if k3:
            worst = min(r["spio_vs_elementwise"] for r in k3)
            lines.append(f"{which}: 3x3 N>=32 worst spio/elementwise {100 * worst:.0f}%")
    return lines


def _write_rows(rows: list[dict], path: Path) -> None:
    all_keys = list(dict.fromkeys(key for r in rows for key in r))
    write_csv([{key: r.get(key, "") for key in all_keys} for r in rows], path)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spio bench conv2d-gw8",
        description=__doc__.split("\n")[0]
        + " Grid: C 64-512 at 56x56-7x7, kernels 3/5/7, N 1-256 (docs/baseline.md).",
    )
    ap.add_argument("--quick", action="store_true", help="a handful of grid points")
    ap.add_argument("--csv", type=Path, help="write the rows to this CSV file (after every point)")
    ap.add_argument(
        "--plot", type=Path, help="PNG path; one plot per pass (suffix _<pass>); needs matplotlib"
    )
    ap.add_argument(
        "--kernel", choices=(*PASSES, "all"), default="all", help="which pass(es) (default all)"
    )
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="default fp16")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if not torch.cuda.is_available():
        print("spio bench conv2d-gw8: needs a CUDA GPU")
        return 2
    torch.backends.cudnn.benchmark = True
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    passes = PASSES if args.kernel == "all" else (args.kernel,)
    copy_gbps = copy_bandwidth_gbps(2**30 if args.quick else 2**31)
    print(f"device copy bandwidth (read + write): {copy_gbps:.0f} GB/s")
    points = grid(args.quick)
    from spio.compiler import compile_many
    from spio.cuda import device_attributes

    compile_many(
        compile_jobs(points, passes, dtype, device_attributes(torch.cuda.current_device())),
        progress=settings().progress,
    )
    rows: list[dict] = []
    for c, hw, k, n in progress(points, "conv2d_gw8", "shape"):
        rows += measure(c, hw, k, n, passes, copy_gbps, dtype)
        if args.csv:  # after every point: an interrupted run keeps what it measured
            _write_rows(rows, args.csv)
    cols = [
        "pass",
        "shape",
        "spio_us",
        "cudnn_us",
        "spio_GBps",
        "cudnn_GBps",
        "elementwise_GBps",
        "spio_vs_cudnn",
        "spio_vs_elementwise",
        "spio_pct_copy",
        "max_rel_err",
    ]
    print_table(rows, cols)
    for line in summarize(rows):
        print(line)
    if args.plot:
        for which in passes:
            sel = [r for r in rows if r["pass"] == which]
            path = args.plot.with_name(f"{args.plot.stem}_{which}{args.plot.suffix or '.png'}")
            plot(
                sel,
                "shape",
                ["spio_GBps", "cudnn_GBps", "elementwise_GBps"],
                path,
                ylabel="effective GB/s",
                roofline=copy_gbps,
                title=f"conv2d_gw8 {which} ({args.dtype}, channels_last)",
            )
    bad = [r for r in rows if not r["max_rel_err"] < 0.05]
    if bad:
        print(
            f"WARNING: {len(bad)} points differ from cuDNN by more than 5%: "
            f"{[(r['pass'], r['shape']) for r in bad]}"
        )
        return 1
    return 0
