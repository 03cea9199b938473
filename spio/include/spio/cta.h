/// CTA-wide loops (work spread over the threads of a block with compile-time trip counts) and
/// named barriers (a barrier among some of a block's warps).
///
/// Example (copy COUNT 16-byte chunks with a CTA of THREADS threads, no loop counter at run
/// time):
///     spio::for_each_strided<COUNT, THREADS>([&](int t) { dst[t] = src[t]; });
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Calls f(t) for every t = threadIdx.x + k * THREADS below COUNT: a CTA-strided loop with a
/// compile-time trip count, unrolled, so a block-wide copy carries no loop counter (the conv
/// kernels' weight-gradient epilogue; their per-row copies precompute each thread's slots). THREADS is
/// the block's thread count (1-D blocks); the bound check is compiled out when THREADS divides
/// COUNT.
template <int COUNT, int THREADS, typename F>
SPIO_DEVICE void for_each_strided(F&& f) {
    static_assert(COUNT >= 0 && THREADS > 0, "spio::for_each_strided: COUNT >= 0, THREADS > 0");
#pragma unroll
    for (int k = 0; k < (COUNT + THREADS - 1) / THREADS; ++k) {
        const int t = static_cast<int>(threadIdx.x) + k * THREADS;
        if (COUNT % THREADS == 0 || t < COUNT) f(t);
    }
}

/// Barrier `id` (1-15; 0 is __syncthreads') among THREADS threads of the block (whole warps):
/// each warp that reaches it waits until THREADS threads have, and their shared-memory accesses
/// before it are ordered before those after it (bar.sync id, THREADS). Lets one warpgroup
/// synchronise without stopping the others.
template <int THREADS>
SPIO_DEVICE void named_barrier_sync(unsigned id) {
    static_assert(THREADS > 0 && THREADS % 32 == 0, "spio::named_barrier_sync: whole warps");
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
