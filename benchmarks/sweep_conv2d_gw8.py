"""Every config of a conv2d_gw8 pass timed at a few layers: the best of the space, the model's pick.

For each pass (fprop, dgrad, wgrad with its reduction) and layer (C, H = W, k, N, stride; fp16,
padding k // 2, with bias) it compiles every config of the device's space in parallel, times each
through the family's tune runner (the launch `spio tune collect` times: spio.timing.bench, CUDA
events, L2 flushed, median), and prints the 5 fastest, the performance model's pick, the
heuristic's, cuDNN's time for the same pass (`aten.convolution` / `convolution_backward`) and the
same-size elementwise pass (`x + 1`: x's size, or the larger of x and y). It answers "is this
the tiling or the kernel?": when every config of the space lands at the same fraction of the
elementwise pass, the limit is the kernel's structure.
Use it to compare two versions of a kernel source on the same GPU (the JIT recompiles a changed
`.cu`; the disk cache keys on the source text). Two runs differ by a few % per config with no
code change, and so does the order of two kernels timed in turn: with identical loop SASS, one
process holding both kernels read 1.005-1.008x when each config was timed new, old, old, new
and 1.05-1.08x at C440 7² (~16 µs calls) when timed old, new, old, new (docs/ops/conv2d_gw8.md,
"Thirty-second session"). For a small change, time both versions in one process in that
ABBA order rather than two sweeps.

    python benchmarks/sweep_conv2d_gw8.py --kernel fprop,dgrad --points "64,56,3,128;512,7,7,128"
    python benchmarks/sweep_conv2d_gw8.py --points "56,56,3,256,2"   # stride 2, input 56x56
    python benchmarks/sweep_conv2d_gw8.py --csv sweep.csv      # every timing, for plotting
    python benchmarks/sweep_conv2d_gw8.py --kernel wgrad --no-idle-warps --points "440,14,3,128,2"
    python benchmarks/sweep_conv2d_gw8.py --cp-async   # every pass without TMA rows
    python benchmarks/sweep_conv2d_gw8.py --warm-l2    # no L2 flush: operands resident
    ncu --kernel-name conv2d_gw8_wgrad --launch-skip 20 --launch-count 1 --set full \
        python benchmarks/sweep_conv2d_gw8.py --kernel wgrad --points "64,56,3,128" \
        --config "Conv2dGw8WgradConfig(block_p=14, block_q=64, warps=4, stages=3, splits_per_sm=4)"
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_POINTS = "64,56,3,128;128,28,3,128;256,14,3,256;512,7,7,128"
PASSES = ("fprop", "dgrad", "wgrad")


def parse_points(text: str) -> list[tuple[int, int, int, int, int]]:
    """'C,HW,K,N[,STRIDE];...' -> [(C, HW, K, N, STRIDE), ...] (HW the input's size, STRIDE 1
    when left out); a clear error for anything else."""
    points = []
    for item in text.split(";"):
        fields = item.strip().split(",")
        if len(fields) not in (4, 5) or not all(f.strip().isdigit() for f in fields):
            raise ValueError(
                f"--points: each point is C,HW,K,N or C,HW,K,N,STRIDE (integers, e.g. 64,56,3,128 "
                f"or 56,56,3,256,2), separated by ';'; got {item!r}"
            )
        c, hw, k, n, *rest = (int(f) for f in fields)
        stride = rest[0] if rest else 1
        if stride not in (1, 2):
            raise ValueError(f"--points: C,HW,K,N,STRIDE takes STRIDE 1 or 2, got {item!r}")
        points.append((c, hw, k, n, stride))
    return points


def parse_passes(text: str) -> list[str]:
    passes = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in passes if p not in PASSES]
    if bad or not passes:
        raise ValueError(f"--kernel: a comma-separated subset of {PASSES}, got {text!r}")
    return passes


def _elementwise_us(numel: int, reps: int, flush_l2: bool = True) -> float:
    """Median µs of `x + 1` over numel fp16 elements: the memory-bound yardstick of that size."""
    import torch

    from spio.timing import bench

    x = torch.empty(numel, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    return bench(lambda: torch.add(x, 1, out=y), reps=reps, flush_l2=flush_l2).median_ms * 1e3


def _cudnn_us(which: str, p, reps: int, flush_l2: bool = True) -> float:
    """Median µs of cuDNN's same pass (through aten, as F.conv2d and autograd call it)."""
    import torch

    from spio.timing import bench

    cl = torch.channels_last
    x = torch.randn(p.n, p.c, p.h, p.w, device="cuda", dtype=torch.float16).to(memory_format=cl)
    w = torch.randn(p.c, 8, p.r, p.s, device="cuda", dtype=torch.float16)
    b = torch.randn(p.c, device="cuda", dtype=torch.float16)
    stride, pad, groups = [p.stride_h, p.stride_w], [p.pad_h, p.pad_w], p.c // 8
    dy = torch.randn(p.n, p.c, p.p, p.q, device="cuda", dtype=torch.float16).to(memory_format=cl)
    conv_bwd = torch.ops.aten.convolution_backward
    mask = {"dgrad": [True, False, False], "wgrad": [False, True, True]}.get(which)
    if mask is None:

        def run():
            return torch.ops.aten.convolution(x, w, b, stride, pad, [1, 1], False, [0, 0], groups)
    else:

        def run():
            return conv_bwd(dy, x, w, [p.c], stride, pad, [1, 1], False, [0, 0], groups, mask)

    return bench(run, reps=reps, warmup_ms=3, flush_l2=flush_l2).median_ms * 1e3


def select_configs(configs: list, only: frozenset[str], where: str) -> list:
    """The configs whose text is in `only`; a ValueError naming the texts the space lacks."""
    chosen = [c for c in configs if str(c) in only]
    missing = sorted(only - {str(c) for c in chosen})
    if missing:
        raise ValueError(
            f"--config: not in the space of {where}: {missing} (write a config as the sweep "
            f"prints it, e.g. {str(configs[0])!r})"
        )
    return chosen


def sweep(
    which: str,
    point: tuple[int, int, int, int, int],
    reps: int,
    idle_warps: bool = True,
    wide_warps: bool = False,
    only: frozenset[str] = frozenset(),
    flush_l2: bool = True,
) -> tuple[list[dict], str]:
    """Timings of every config of pass `which` at `point` (rows), and the summary text;
    `idle_warps`: False for wgrad's space without its idle-warp CTAs (`with_idle_warps`);
    `wide_warps`: wgrad's space with its 8-warp CTAs (`warp_choices=WIDE_WARP_CHOICES`);
    `only`: just the configs of the space whose text (`str(config)`) is in it; `flush_l2`
    False: every call (cuDNN's and the elementwise pass's too) runs with the L2 as the previous
    call left it, the operands resident where they fit (a training step leaves the forward's
    input resident, the weight gradient's x not: docs/ops/conv2d_gw8.md, "Twenty-sixth
    session"); the rows' `l2` column says which."""
    import torch

    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.kernels.conv2d_gw8 import tune as tu
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.kernels.loader import compile_specs
    from spio.select import op_config
    from spio.timing import bench

    c, hw, k, n, stride = point
    dev = device_attributes(torch.cuda.current_device())
    kdef = {"fprop": fp.FPROP, "dgrad": fp.DGRAD, "wgrad": wg.WGRAD}[which]
    runner = {"fprop": tu.make_fprop_runner, "dgrad": tu.make_dgrad_runner}.get(
        which, tu.make_wgrad_runner
    )
    p = Conv2dGw8Params(
        n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=k // 2, pad_w=k // 2, has_bias=True,
        dtype="float16", stride_h=stride, stride_w=stride,
    )  # fmt: skip
    if which == "wgrad" and (not idle_warps or wide_warps):
        warps = wg.WIDE_WARP_CHOICES if wide_warps else None  # None: the space's own warps
        configs = wg.configs(p, dev, warp_choices=warps, with_idle_warps=idle_warps)
    else:
        configs = kdef.configs(p, dev)
    if only:
        configs = select_configs(configs, only, f"{which} at {point}")
    t0 = time.monotonic()
    compile_specs([kdef.spec(p, cfg, dev) for cfg in configs], dev.arch)
    compile_s = time.monotonic() - t0
    # What the op runs: the family's selection rule (every pass selects at the batch's bucket).
    sel = kdef.selection(p)
    pick = op_config(kdef, p, dev)
    guess = kdef.heuristic(sel, dev)
    elem_us = _elementwise_us(n * c * max(hw * hw, p.p * p.q), reps, flush_l2)
    cudnn_us = _cudnn_us(which, p, reps, flush_l2)
    rows = []
    skipped = []
    for cfg in configs:
        try:
            run = runner(p, cfg)
        except OutOfResources as e:  # the space's estimate let through what the driver refuses
            skipped.append(f"  skipped {cfg}: {e}")
            continue
        us = bench(run, reps=reps, warmup_ms=3, flush_l2=flush_l2).median_ms * 1e3
        del run
        rows.append({"pass": which, "c": c, "hw": hw, "k": k, "n": n, "stride": stride,
                     "config": str(cfg), "us": round(us, 2),
                     "of_elementwise": round(elem_us / us, 3), "cudnn_us": round(cudnn_us, 2),
                     "model_pick": cfg == pick, "heuristic": cfg == guess,
                     "l2": "flushed" if flush_l2 else "warm"})  # fmt: skip
        torch.cuda.empty_cache()
    rows.sort(key=lambda r: r["us"])
    lines = [
        f"{which} C{c} {hw}^2 k{k} N{n} stride {stride}: {len(configs)} configs (compiled in "
        f"{compile_s:.0f} s), elementwise {elem_us:.1f} us, cuDNN {cudnn_us:.1f} us"
        + (f" ({cudnn_us / rows[0]['us']:.2f}x the best config's time)" if rows else "")
    ]
    for label, key, cfg in (("model pick", "model_pick", pick), ("heuristic", "heuristic", guess)):
        found = [r for r in rows if r[key]]
        if found:
            r = found[0]
            lines.append(
                f"  {label} {cfg}: {r['us']:.1f} us, {r['of_elementwise']:.2f} of elementwise, "
                f"rank {rows.index(r) + 1}, {r['us'] / rows[0]['us']:.3f}x the best, "
                f"cuDNN/this {cudnn_us / r['us']:.2f}"
            )
    for r in rows[:5]:
        lines.append(f"  {r['us']:8.1f} us  {r['of_elementwise']:.2f}  {r['config']}")
    return rows, "\n".join(lines + skipped)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fprop,dgrad,wgrad", help="passes, comma-separated")
    ap.add_argument(
        "--points", default=DEFAULT_POINTS, help="C,HW,K,N[,STRIDE];... (fp16, padding k//2)"
    )
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--max-step-rows",
        type=int,
        help="fprop/dgrad: the kernel's longest unrolled row step (default: the module's, 12)",
    )
    ap.add_argument(
        "--cp-async",
        action="store_true",
        help="every pass: x (and dy) rows by cp.async even on sm_90 (the kernels before TMA rows)",
    )
    ap.add_argument(
        "--no-idle-warps",
        action="store_true",
        help="wgrad: without the CTAs whose warps do not divide the groups (the space before the "
        "twentieth session)",
    )
    ap.add_argument(
        "--wide-warps",
        action="store_true",
        help="wgrad: also the 8-warp CTAs (WIDE_WARP_CHOICES, outside the default space)",
    )
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="time only this config (its text as the sweep prints it; repeatable): e.g. one "
        "config under a profiler",
    )
    ap.add_argument(
        "--warm-l2",
        action="store_true",
        help="time every call without flushing the L2 first (operands resident where they fit)",
    )
    ap.add_argument("--csv", type=Path, help="write every timing here")
    a = ap.parse_args(argv)
    try:
        passes, points = parse_passes(a.kernel), parse_points(a.points)
    except ValueError as e:
        ap.error(str(e))
    import torch

    if not torch.cuda.is_available():
        print("sweep_conv2d_gw8 needs a CUDA GPU")
        return 2
    from spio.bench.report import write_csv

    if a.max_step_rows is not None:
        from spio.kernels.conv2d_gw8 import fprop

        fprop.MAX_STEP_ROWS = a.max_step_rows
    if a.cp_async:
        from spio.kernels.conv2d_gw8 import fprop, wgrad_tiling

        fprop.TMA_ROWS = False
        wgrad_tiling.TMA_ROWS = False

    every = []
    for which in passes:
        for point in points:
            rows, text = sweep(
                which,
                point,
                a.reps,
                not a.no_idle_warps,
                a.wide_warps,
                frozenset(a.config),
                flush_l2=not a.warm_l2,
            )
            print(text, flush=True)
            every += rows
            if a.csv:
                write_csv(every, a.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
