"""The mma.sync ceiling: m16n8k16 throughput (fp16 and bf16, fp32 accumulators) vs cuBLAS.

A register-only probe: each warp runs `acc` independent accumulator chains of
`spio::mma_m16n8k16<T>` on operands held in registers, `iters` times; blocks of `warps` warps,
`blocks_per_sm` blocks per SM on every SM (the SM count comes from the device). No memory
traffic in the timed loop, so what it measures is the tensor-core issue rate of mma.sync: the
ceiling any mma.sync kernel (spio's matmul, conv) can reach. It sweeps a few occupancy and
chain-count points and reports the best, next to cuBLAS `torch.matmul` at 8192^3 measured in the
same run (cuBLAS uses wgmma on Hopper, which mma.sync cannot reach).

FLOPs per mma: 2 * 16 * 8 * 16 = 4096. Timing: spio.bench.timing.bench (CUDA events, time-based
warm-up, median of reps); the probe does not touch memory so L2 is not flushed for it; the
cuBLAS timing flushes L2.

    python benchmarks/mma_probe.py                  # sweep, table, best per dtype
    python benchmarks/mma_probe.py --csv out.csv
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch

from spio.bench.report import print_table, write_csv
from spio.bench.timing import bench
from spio.compiler import compile as spio_compile
from spio.compiler import kernel_resources
from spio.cuda import Module, device_attributes

SOURCE = r"""
#include "spio/mma.h"

using T = SPIO_T;
constexpr int ACC = SPIO_ACC;  // independent accumulator chains per warp

// ab: per lane 6 words (A fragment 4, B fragment 2) so the operands are not constants.
extern "C" __global__ void mma_probe(float* out, const unsigned* ab, int iters) {
    const int lane = threadIdx.x & 31;
    const unsigned a[4] = {ab[6 * lane], ab[6 * lane + 1], ab[6 * lane + 2], ab[6 * lane + 3]};
    const unsigned b[2] = {ab[6 * lane + 4], ab[6 * lane + 5]};
    float d[ACC][4];
#pragma unroll
    for (int j = 0; j < ACC; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < ACC; ++j) spio::mma_m16n8k16<T>(d[j], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ACC; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the chains alive
}
"""

DTYPES = {"fp16": ("__half", torch.float16), "bf16": ("__nv_bfloat16", torch.bfloat16)}
FLOPS_PER_MMA = 2 * 16 * 8 * 16


def cublas_tflops(dtype: torch.dtype, n: int = 8192) -> float:
    g = torch.Generator("cuda").manual_seed(0)
    a = torch.randn(n, n, generator=g, device="cuda").to(dtype)
    b = torch.randn(n, n, generator=g, device="cuda").to(dtype)
    return bench(lambda: torch.matmul(a, b), reps=20).tflops(2 * n**3)


def probe(
    type_name: str,
    dtype: torch.dtype,
    acc: int,
    warps: int,
    blocks_per_sm: int,
    iters: int,
    arch: str,
    sm_count: int,
) -> dict:
    cubin = spio_compile(
        SOURCE,
        arch=arch,
        options=(f"-DSPIO_T={type_name}", f"-DSPIO_ACC={acc}"),
        name="mma_probe.cu",
    )
    res = kernel_resources(cubin)["mma_probe"]
    fn = Module.load(cubin).function("mma_probe", signature="ppi")
    threads = 32 * warps
    grid = sm_count * blocks_per_sm
    g = torch.Generator("cuda").manual_seed(1)
    ab = (torch.rand(32 * 12, generator=g, device="cuda") * 2 - 1).to(dtype).view(torch.int32)
    out = torch.empty(grid * threads, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    t = bench(
        lambda: fn.launch(grid, threads, [out, ab, iters], stream=stream), flush_l2=False, reps=20
    )
    flops = grid * warps * iters * acc * FLOPS_PER_MMA
    return {
        "dtype": type_name,
        "acc": acc,
        "warps": warps,
        "blocks_per_sm": blocks_per_sm,
        "regs": res.registers,
        "local_B": res.local_bytes,
        "ms": t.median_ms,
        "tflops": t.tflops(flops),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=4096, help="loop trips per warp")
    ap.add_argument("--acc", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--blocks-per-sm", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("mma_probe needs a CUDA GPU (torch.cuda.is_available() is False)")
    dev = device_attributes()
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    rows, summary = [], []
    for name, (type_name, dtype) in DTYPES.items():
        ref = cublas_tflops(dtype)
        points = []
        for acc, warps, bps in itertools.product(args.acc, args.warps, args.blocks_per_sm):
            row = probe(type_name, dtype, acc, warps, bps, args.iters, arch, dev.sm_count)
            row["pct_cublas"] = 100.0 * row["tflops"] / ref
            points.append(row)
        rows += points
        best = max(points, key=lambda r: r["tflops"])
        summary.append(
            {
                "dtype": name,
                "mma_sync_tflops": best["tflops"],
                "cublas_8192_tflops": ref,
                "pct_cublas": best["pct_cublas"],
                "best_point": (
                    f"acc={best['acc']} warps={best['warps']} bps={best['blocks_per_sm']}"
                ),
            }
        )
    print(f"device: {dev.name} ({arch}, {dev.sm_count} SMs)")
    print_table(rows)
    print()
    print_table(summary)
    if args.csv:
        write_csv(rows, args.csv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
