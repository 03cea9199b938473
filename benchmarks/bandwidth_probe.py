"""The GPU's read-only and copy bandwidth, measured the way the conv benchmarks time kernels.

    python benchmarks/bandwidth_probe.py [--mb 18.4,51.4,102.8]

The conv2d_gw8 weight gradient only reads (x and dy; its fp32 partials are small), while the
benchmarks' yardstick, the elementwise pass `x + 1`, reads and writes. This probe measures what
a kernel that only streams bytes in gets: a grid-stride loop of 16-byte loads (UNROLL of them in
flight per thread, streaming cache hint), folded into a value nothing reads, over each size in
--mb, for several CTA sizes, unroll depths and CTAs per SM; the same loads with each CTA reading
its own contiguous part (as the weight gradient's splits each stream their own tasks), of one
tensor or of two read in turn (x and dy); and a copy kernel of the same shape
over half the bytes (read + write of the same total), and `torch.add(x, 1)` and `torch.sum` as
PyTorch's. Timer: spio.timing.bench (CUDA events, L2 flushed before every rep, median), as
`benchmarks/sweep_conv2d_gw8.py` times the kernels; an empty launch is printed for its fixed
cost. The best read-only variant is the device limit a reads-only kernel is judged against.
"""

from __future__ import annotations

import argparse
import functools
import itertools

SOURCE = r"""
// UNROLL 16-byte loads of this thread's elements i, i + blockDim.x, ... (those below end) at
// once, folded into acc.
__device__ __forceinline__ void fold_loads(const uint4* __restrict__ base, unsigned long long i,
                                           unsigned long long end, unsigned& acc) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const unsigned long long j = i + (unsigned long long)u * blockDim.x;
        v[u] = j < end ? __ldcs(base + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
}

extern "C" __global__ void read_probe(const uint4* __restrict__ src, unsigned long long n,
                                      unsigned* __restrict__ out) {
    unsigned acc = 0;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
         i < n; i += step) {
        fold_loads(src, i, n, acc);
    }
    if (acc == 0x9e3779b9u) out[0] = acc;  // keeps the loads (a 2^-32 chance; harmless)
}

// Each CTA reads its own contiguous part instead (the weight gradient's splits: every resident CTA
// streams its own range of tasks): the data as `streams` equal tensors (x and dy: 2), CTA b
// reading part b of each, the tensors' steps in turn.
extern "C" __global__ void read_blocked(const uint4* __restrict__ src, unsigned long long n,
                                        unsigned* __restrict__ out, int streams) {
    unsigned acc = 0;
    const unsigned long long per_stream = n / streams;
    const unsigned long long part = (per_stream + gridDim.x - 1) / gridDim.x;
    const unsigned long long begin = blockIdx.x * part;
    const unsigned long long end = min(begin + part, per_stream);
    const unsigned long long step = (unsigned long long)blockDim.x * UNROLL;
    for (unsigned long long i = begin + threadIdx.x; i < end + threadIdx.x; i += step) {
        for (int t = 0; t < streams; ++t) fold_loads(src + t * per_stream, i, end, acc);
    }
    if (acc == 0x9e3779b9u) out[0] = acc;  // keeps the loads (a 2^-32 chance; harmless)
}

extern "C" __global__ void copy_probe(const uint4* __restrict__ src, unsigned long long n,
                                      uint4* __restrict__ dst) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
         i < n; i += step) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const unsigned long long j = i + (unsigned long long)u * blockDim.x;
            if (j < n) v[u] = __ldcs(src + j);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const unsigned long long j = i + (unsigned long long)u * blockDim.x;
            if (j < n) __stcs(dst + j, v[u]);
        }
    }
}
"""


def _kernels(unroll: int, arch: str):
    from spio.compiler import compile as spio_compile
    from spio.cuda import Module

    cubin = spio_compile(
        SOURCE, arch=arch, options=(f"-DUNROLL={unroll}",), name="bandwidth_probe.cu"
    )
    module = Module.load(cubin)
    return (
        module,
        module.function("read_probe", signature="plp"),
        module.function("copy_probe", signature="plp"),
        module.function("read_blocked", signature="plpi"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--mb", default="18.4,51.4,102.8", help="bytes read per pass, MB, comma-separated"
    )
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)
    import torch

    from spio.cuda import device_attributes
    from spio.timing import bench

    dev = device_attributes(torch.cuda.current_device())
    stream = torch.cuda.current_stream().cuda_stream

    def us(fn) -> float:
        return bench(fn, reps=a.reps, warmup_ms=5).median_ms * 1e3

    def launch_us(fn, grid: int, threads: int, args: list) -> float:
        return us(lambda: fn.launch(grid, threads, args, stream=stream))

    e = torch.zeros(1, device="cuda")
    empty = us(functools.partial(e.add_, 1))
    print(f"{torch.cuda.get_device_name()}: empty launch (x.add_(1), 1 element) {empty:.1f} us")
    kernels = {u: _kernels(u, dev.arch) for u in (4, 8)}
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    for mb in (float(v) for v in a.mb.split(",")):
        units = int(mb * 1e6) // 16
        src = torch.randint(0, 2**31, (units * 4,), dtype=torch.int32, device="cuda")
        dst = torch.empty(units * 2, dtype=torch.int32, device="cuda")  # half the bytes
        best_read, best_copy = (float("inf"), ""), (float("inf"), "")
        best_blocked = {1: (float("inf"), ""), 2: (float("inf"), "")}
        for (unroll, (_, read, copy, blocked)), threads, per_sm in itertools.product(
            kernels.items(), (256, 512, 1024), (1, 2, 4, 8)
        ):
            if threads * per_sm > dev.max_threads_per_sm:
                continue
            grid = dev.sm_count * per_sm
            what = f"unroll {unroll}, {threads} threads, {per_sm} CTAs/SM"
            best_read = min(best_read, (launch_us(read, grid, threads, [src, units, out]), what))
            t = launch_us(copy, grid, threads, [src, units // 2, dst])
            best_copy = min(best_copy, (t, what))
            for streams in best_blocked:
                t = launch_us(blocked, grid, threads, [src, units, out, streams])
                best_blocked[streams] = min(best_blocked[streams], (t, what))
        x = torch.empty(units * 4, dtype=torch.float16, device="cuda")  # half the bytes
        y = torch.empty_like(x)
        z = torch.zeros(units * 8, dtype=torch.float16, device="cuda")
        t_add = us(functools.partial(torch.add, x, 1, out=y))
        t_sum = us(functools.partial(torch.sum, z))
        t_read = best_read[0]
        print(
            f"{mb:.1f} MB read: read-only best {t_read:.1f} us ({units * 16 / t_read / 1e6:.2f} "
            f"TB/s; {best_read[1]}), copy of half best {best_copy[0]:.1f} us ({best_copy[1]}), "
            f"torch.add(x, 1) over half {t_add:.1f} us, torch.sum {t_sum:.1f} us; elementwise / "
            f"read-only time {t_add / t_read:.2f}; a contiguous part a CTA: "
            f"{best_blocked[1][0]:.1f} us ({best_blocked[1][1]}), as 2 tensors read in turn "
            f"{best_blocked[2][0]:.1f} us ({best_blocked[2][1]})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
