/// Ticket counters in global memory: CTAs of one grid count their arrivals on a 32-bit word, and
/// one waits for the others (sm_70+: the PTX memory model's .acquire / .release at GPU scope).
///
/// take(counter) adds 1 with acquire-release semantics at GPU scope and returns the count before:
/// the caller's arrival number. Issued by one thread after a CTA barrier, its release covers the
/// whole CTA's earlier global stores (the barrier orders them before it), and its acquire makes
/// the earlier takers' stores visible to it. wait_until(counter, n) spins with acquire loads
/// (GPU scope) until the count reaches n; a CTA barrier after it passes the visibility on to the
/// rest of the CTA. Read what other CTAs stored with loads that go to L2 (__ldcg), not the
/// non-coherent path.
///
/// Example (the CTAs of a grid each write a partial, the last to arrive sums them):
///     __shared__ unsigned arrival;
///     write_partial(...);
///     __syncthreads();
///     if (threadIdx.x == 0) arrival = spio::ticket::take(counter);
///     __syncthreads();
///     if (arrival == gridDim.x - 1) sum_partials(...);   // every partial is visible
///
/// A CTA that waits holds its SM slot: every CTA it waits for must be resident or able to become
/// so (the grid fits in one wave, or the waiting CTAs leave room for the rest). The counter must
/// start at zero; reset it once every CTA is past its last read of it. GPU test: the
/// conv2d_gw8 weight gradient's one-pass reduction (tests/gpu/kernels/test_conv2d_gw8_wgrad.py).
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
namespace spio::ticket {

/// Adds 1 to *counter (acq_rel, GPU scope); returns the value before.
SPIO_DEVICE unsigned take(unsigned* counter) {
    unsigned before;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(counter)
                 : "memory");
    return before;
}

/// The count at *counter with acquire semantics at GPU scope.
SPIO_DEVICE unsigned load_acquire(const unsigned* counter) {
    unsigned value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(counter) : "memory");
    return value;
}

/// Spins until *counter >= n (acquire loads, a short sleep between them).
SPIO_DEVICE void wait_until(const unsigned* counter, unsigned n) {
    while (load_acquire(counter) < n) __nanosleep(32);
}

}  // namespace spio::ticket
#endif
