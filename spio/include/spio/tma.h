/// Tensor memory accelerator (TMA) copies: a tile of a global tensor into shared memory through a
/// tensor map, completing on an mbarrier (cp.async.bulk.tensor), and back out (store_2d, in
/// bulk groups): sm_90+.
///
/// The host encodes the map (`spio.cuda.tensor_map.tiled`: dtype, shape, strides, box, swizzle)
/// and passes it by value, signature letter 't'; the kernel takes it as a
/// `const __grid_constant__ spio::tma::Descriptor` parameter, so it stays in parameter space
/// where the copy reads it. One thread issues a copy; the box's bytes count down the barrier's
/// current phase (announce them with mbarrier::arrive_expect_tx first). Coordinates are in
/// elements, innermost first (c0 is the column of a row-major matrix), and may reach outside the
/// tensor: those elements are filled with zero (or NaN, as encoded). The shared-memory
/// destination is 128-byte aligned, 1024-byte aligned for the 128-byte swizzle, whose layout is
/// the one spio/wgmma.h's Swizzle::B128 descriptors read: 16-byte chunk c of box row r at chunk
/// c ^ (r % 8) of that row.
///
/// Example (a 64 x 64 fp16 tile at row m0, column k0 of a row-major A):
///     extern "C" __global__ void k(const __grid_constant__ spio::tma::Descriptor a_map, ...) {
///         __shared__ __align__(1024) __half tile[64 * 64];
///         __shared__ __align__(8) unsigned long long bar;
///         ... init bar for 1 arrival, fence_init, __syncthreads ...
///         if (threadIdx.x == 0) {
///             spio::mbarrier::arrive_expect_tx(&bar, sizeof tile);
///             spio::tma::load_2d(tile, &a_map, k0, m0, &bar);
///         }
///         spio::mbarrier::wait(&bar, 0);
///
/// Defined where the compiler targets sm_90 or newer (SPIO_TMA 1), else nothing (SPIO_TMA 0).
/// Compile-tested on the host (tests/host/include/test_tma.py); the GPU test is
/// tests/gpu/test_tma.py.
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPIO_TMA 1
namespace spio::tma {

/// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h is not needed).
struct alignas(64) Descriptor {
    unsigned long long opaque[16];
};

/// Fetches the descriptor into the TMA unit's cache ahead of the first copy (optional).
SPIO_DEVICE void prefetch(const Descriptor* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

/// Copies the box whose first element is at (c0, c1) (innermost first) of the 2-D tensor `map`
/// describes into shared memory at `smem`; its bytes count down `bar`'s current phase.
SPIO_DEVICE void load_2d(void* smem, const Descriptor* map, int c0, int c1,
                         unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_address(smem)),
        "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar))
        : "memory");
}

/// The same for a 3-D tensor (c0 innermost). The overload taking `unsigned` takes shared-window
/// addresses (spio::smem_address) of the destination and the barrier.
SPIO_DEVICE void load_3d(unsigned smem, const Descriptor* map, int c0, int c1, int c2,
                         unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
SPIO_DEVICE void load_3d(void* smem, const Descriptor* map, int c0, int c1, int c2,
                         unsigned long long* bar) {
    load_3d(smem_address(smem), map, c0, c1, c2, smem_address(bar));
}

/// Copies the box at (c0, c1) of `map` into shared memory at `smem` in every CTA of the
/// cluster whose bit is set in `cta_mask` (bit r: the CTA of rank r, spio::cluster::rank), at
/// the same shared-memory offset in each; the bytes count down the barrier at `bar`'s offset in
/// each destination CTA, so every receiving CTA announces them on its own barrier. One copy from
/// L2 feeds all of them: a cluster of CTAs that share an operand tile each issue a slice of it
/// (cp.async.bulk.tensor ... .multicast::cluster). Needs a cluster launch (__cluster_dims__);
/// the peers' barriers must be initialised before the first copy (a cluster barrier after
/// fence_init), and a CTA must not exit while a peer's copy may still write into it.
SPIO_DEVICE void load_2d_multicast(void* smem, const Descriptor* map, int c0, int c1,
                                   unsigned long long* bar, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_address(smem)),
        "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar)), "h"(cta_mask)
        : "memory");
}

/// Copies the box at (c0, c1) of the 2-D tensor `map` describes from shared memory at `smem`
/// (laid out as load_2d writes a box, the map's swizzle included; 128-byte aligned, 1024 for
/// the 128-byte swizzle) to global memory; elements outside the tensor are not written, so a
/// ragged edge needs no masking. Asynchronous (cp.async.bulk.tensor ... .bulk_group): the
/// issuing thread groups its stores with store_commit, and before anyone rewrites `smem` (or
/// the CTA exits) waits with store_wait_read. Ordinary shared-memory stores the copy reads need
/// fence.proxy.async.shared::cta (spio::warpgroup::fence_async_proxy) in each writing thread,
/// then a barrier, before the copy is issued.
SPIO_DEVICE void store_2d(const Descriptor* map, int c0, int c1, const void* smem) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::
                     "l"(map),
                 "r"(c0), "r"(c1), "r"(smem_address(smem))
                 : "memory");
}

/// Closes this thread's bulk stores issued since the last commit into one group.
SPIO_DEVICE void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

/// Waits until at most N of this thread's committed store groups are still reading their
/// shared memory (the older ones have read it: it may be rewritten).
template <int N>
SPIO_DEVICE void store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

/// Waits until at most N of this thread's committed store groups are incomplete (their writes
/// to global memory done).
template <int N>
SPIO_DEVICE void store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace spio::tma
#else
#define SPIO_TMA 0
#endif
