/// cp.async: asynchronous global -> shared copies (sm_80+), grouped with commit/wait.
///
/// Each thread issues its own copies; cp_async_commit() closes the thread's current group and
/// cp_async_wait<N>() blocks until at most N of the thread's groups are still in flight. Another
/// thread's copies become visible only after both the wait and a barrier (__syncthreads()).
///
/// Example (double buffer, one 16-byte chunk per thread and stage):
///     spio::cp_async_16(&smem[stage][tid], &gmem[k][tid], k < k_end);   // zero-fill past the end
///     spio::cp_async_commit();
///     spio::cp_async_wait<1>();   // the previous stage has landed (for this thread)
///     __syncthreads();            // ... and for every thread
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Copies 16 bytes global -> shared, bypassing L1 (cp.async.cg).
///
/// Parameters:
///   smem   destination in shared memory, 16-byte aligned
///   gmem   source in global memory, 16-byte aligned; when pred is false it is not read and
///          need not be a valid address (PTX ignore-src: "the data from the source location
///          src is ignored completely")
///   pred   false writes 16 zero bytes instead: masked loads of halos and tails
SPIO_DEVICE void cp_async_16(void* smem, const void* gmem, bool pred = true) {
    asm volatile(
        "{\n"
        "  .reg .pred ignore;\n"
        "  setp.eq.u32 ignore, %2, 0;\n"
        "  cp.async.cg.shared.global [%0], [%1], 16, ignore;\n"
        "}\n" ::"r"(smem_address(smem)),
        "l"(gmem), "r"(static_cast<unsigned>(pred))
        : "memory");
}

/// cp_async_16 to a destination already in the shared window (`smem_address`).
SPIO_DEVICE void cp_async_16(unsigned smem, const void* gmem, bool pred = true) {
    asm volatile(
        "{\n"
        "  .reg .pred ignore;\n"
        "  setp.eq.u32 ignore, %2, 0;\n"
        "  cp.async.cg.shared.global [%0], [%1], 16, ignore;\n"
        "}\n" ::"r"(smem),
        "l"(gmem), "r"(static_cast<unsigned>(pred))
        : "memory");
}

/// Copies 8 bytes global -> shared through L1 (cp.async.ca); pred false zero-fills. 8-byte aligned.
SPIO_DEVICE void cp_async_8(void* smem, const void* gmem, bool pred = true) {
    asm volatile(
        "{\n"
        "  .reg .pred ignore;\n"
        "  setp.eq.u32 ignore, %2, 0;\n"
        "  cp.async.ca.shared.global [%0], [%1], 8, ignore;\n"
        "}\n" ::"r"(smem_address(smem)),
        "l"(gmem), "r"(static_cast<unsigned>(pred))
        : "memory");
}

/// Copies 4 bytes global -> shared through L1 (cp.async.ca); pred false zero-fills. 4-byte aligned.
SPIO_DEVICE void cp_async_4(void* smem, const void* gmem, bool pred = true) {
    asm volatile(
        "{\n"
        "  .reg .pred ignore;\n"
        "  setp.eq.u32 ignore, %2, 0;\n"
        "  cp.async.ca.shared.global [%0], [%1], 4, ignore;\n"
        "}\n" ::"r"(smem_address(smem)),
        "l"(gmem), "r"(static_cast<unsigned>(pred))
        : "memory");
}

/// Closes the calling thread's current group of cp.async copies (an empty group is legal).
SPIO_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Waits until at most N of the calling thread's committed groups are still pending.
///
/// Template parameters:
///   N   groups allowed in flight, a compile-time constant >= 0
template <int N>
SPIO_DEVICE void cp_async_wait() {
    static_assert(N >= 0,
                  "spio::cp_async_wait<N>: N is a count of pending groups and must be >= 0; "
                  "use 0 to wait for everything");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Waits until all of the calling thread's cp.async copies (committed or not) have landed.
SPIO_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
