"""Every config of a conv2d_gw8 pass timed at a few layers: the best of the space, the model's pick.

For each pass (fprop, dgrad, wgrad with its reduction) and layer (C, H = W, k, N; fp16, padding
k // 2, with bias) it compiles every config of the device's space in parallel, times each through
the family's tune runner (the launch `spio tune collect` times: spio.timing.bench, CUDA events, L2
flushed, median), and prints the 5 fastest, the performance model's pick and the same-size
elementwise pass (`x + 1`). It answers "is this the tiling or the kernel?": when every config of
the space lands at the same fraction of the elementwise pass, the limit is the kernel's structure.
Use it to compare two versions of a kernel source on the same GPU (the JIT recompiles a changed
`.cu`; the disk cache keys on the source text).

    python benchmarks/sweep_conv2d_gw8.py --kernel fprop,dgrad --points "64,56,3,128;512,7,7,128"
    python benchmarks/sweep_conv2d_gw8.py --csv sweep.csv      # every timing, for plotting
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_POINTS = "64,56,3,128;128,28,3,128;256,14,3,256;512,7,7,128"
PASSES = ("fprop", "dgrad", "wgrad")


def parse_points(text: str) -> list[tuple[int, int, int, int]]:
    """'C,HW,K,N;...' -> [(C, HW, K, N), ...]; a clear error for anything else."""
    points = []
    for item in text.split(";"):
        fields = item.strip().split(",")
        if len(fields) != 4 or not all(f.strip().isdigit() for f in fields):
            raise ValueError(
                f"--points: each point is C,HW,K,N (four integers, e.g. 64,56,3,128), "
                f"separated by ';'; got {item!r}"
            )
        c, hw, k, n = (int(f) for f in fields)
        points.append((c, hw, k, n))
    return points


def parse_passes(text: str) -> list[str]:
    passes = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in passes if p not in PASSES]
    if bad or not passes:
        raise ValueError(f"--kernel: a comma-separated subset of {PASSES}, got {text!r}")
    return passes


def _elementwise_us(numel: int, reps: int) -> float:
    """Median µs of `x + 1` over numel fp16 elements: the memory-bound yardstick of that size."""
    import torch

    from spio.timing import bench

    x = torch.empty(numel, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    return bench(lambda: torch.add(x, 1, out=y), reps=reps).median_ms * 1e3


def sweep(which: str, point: tuple[int, int, int, int], reps: int) -> tuple[list[dict], str]:
    """Timings of every config of pass `which` at `point` (rows), and the summary text."""
    import torch

    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.kernels import conv2d_gw8_fprop as fp
    from spio.kernels import conv2d_gw8_tune as tu
    from spio.kernels import conv2d_gw8_wgrad as wg
    from spio.kernels.conv2d_gw8_params import Conv2dGw8Params
    from spio.kernels.loader import compile_specs
    from spio.select import default_selector
    from spio.timing import bench

    c, hw, k, n = point
    dev = device_attributes(torch.cuda.current_device())
    kdef = {"fprop": fp.FPROP, "dgrad": fp.DGRAD, "wgrad": wg.WGRAD}[which]
    runner = {"fprop": tu.make_fprop_runner, "dgrad": tu.make_dgrad_runner}.get(
        which, tu.make_wgrad_runner
    )
    p = Conv2dGw8Params(
        n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=k // 2, pad_w=k // 2, has_bias=True,
        dtype="float16",
    )  # fmt: skip
    configs = kdef.configs(p, dev)
    t0 = time.monotonic()
    compile_specs([kdef.spec(p, cfg, dev) for cfg in configs], dev.arch)
    compile_s = time.monotonic() - t0
    pick = default_selector().select(kdef, p, dev)
    elem_us = _elementwise_us(n * c * hw * hw, reps)
    rows = []
    skipped = []
    for cfg in configs:
        try:
            run = runner(p, cfg)
        except OutOfResources as e:  # the space's estimate let through what the driver refuses
            skipped.append(f"  skipped {cfg}: {e}")
            continue
        us = bench(run, reps=reps, warmup_ms=3).median_ms * 1e3
        del run
        rows.append({"pass": which, "c": c, "hw": hw, "k": k, "n": n, "config": str(cfg),
                     "us": round(us, 2), "of_elementwise": round(elem_us / us, 3),
                     "model_pick": cfg == pick})  # fmt: skip
        torch.cuda.empty_cache()
    rows.sort(key=lambda r: r["us"])
    picked = [r for r in rows if r["model_pick"]]
    lines = [
        f"{which} C{c} {hw}^2 k{k} N{n}: {len(configs)} configs (compiled in {compile_s:.0f} s), "
        f"elementwise {elem_us:.1f} us"
    ]
    if picked:
        rank = rows.index(picked[0]) + 1
        lines.append(
            f"  model pick {pick}: {picked[0]['us']:.1f} us, {picked[0]['of_elementwise']:.2f} "
            f"of elementwise, rank {rank}, {picked[0]['us'] / rows[0]['us']:.3f}x the best"
        )
    for r in rows[:5]:
        lines.append(f"  {r['us']:8.1f} us  {r['of_elementwise']:.2f}  {r['config']}")
    return rows, "\n".join(lines + skipped)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fprop,dgrad,wgrad", help="passes, comma-separated")
    ap.add_argument("--points", default=DEFAULT_POINTS, help="C,HW,K,N;... (fp16, padding k//2)")
    ap.add_argument("--reps", type=int, default=20)
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

    every = []
    for which in passes:
        for point in points:
            rows, text = sweep(which, point, a.reps)
            print(text, flush=True)
            every += rows
            if a.csv:
                write_csv(every, a.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
