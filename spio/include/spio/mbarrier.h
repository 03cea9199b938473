/// Shared-memory barriers with transaction counts (mbarrier) and the bulk copy that completes on
/// them (cp.async.bulk, the 1-D form of the tensor memory accelerator): sm_90+.
///
/// An mbarrier is a 64-bit word in shared memory. One thread initialises it with the number of
/// arrivals a phase needs (`init`, then `fence_init` and a CTA barrier before anyone uses it); a
/// producer announces the bytes a phase will receive and arrives (`arrive_expect_tx`), issues bulk
/// copies that count those bytes down as they land (`bulk_copy_g2s`); consumers wait for the
/// phase to complete (`wait(bar, parity)`, parity 0 for the first phase, then 1, 0, ...).
///
/// Example (one producer thread, 128 consumers):
///     __shared__ __align__(8) unsigned long long bar;
///     if (threadIdx.x == 0) { spio::mbarrier::init(&bar, 1); spio::mbarrier::fence_init(); }
///     __syncthreads();
///     if (threadIdx.x == 0) {
///         spio::mbarrier::arrive_expect_tx(&bar, bytes);
///         spio::mbarrier::bulk_copy_g2s(smem, gmem, bytes, &bar);
///     }
///     spio::mbarrier::wait(&bar, 0);      // smem now holds the bytes
///
/// Clusters (sm_90+): `arrive_cluster` arrives on the same barrier of another CTA of the cluster
/// (a consumer freeing a slot that a peer's multicast copy, spio/tma.h `load_2d_multicast`,
/// refills; the producer then waits with plain `wait`), `wait_cluster` acquires at cluster scope
/// (for a barrier guarding memory the peer wrote with ordinary stores; the matmul does not need
/// it); `spio::cluster` has the CTA's rank and the cluster barrier.
///
/// Defined where the compiler targets sm_90 or newer (SPIO_MBARRIER 1), else nothing
/// (SPIO_MBARRIER 0). Compile-tested on the host (tests/host/include/test_mbarrier.py); the GPU
/// test is tests/gpu/test_mbarrier.py.
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPIO_MBARRIER 1
namespace spio::mbarrier {

/// Initialises the barrier at `bar` (shared memory, 8-byte aligned) for `count` arrivals per
/// phase. One thread; follow with fence_init() and a CTA barrier. Each operation here also takes
/// the barrier as its shared-window address (`unsigned`, spio::smem_address): a kernel that
/// walks a ring of barriers as offsets converts no pointer per use.
SPIO_DEVICE void init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
SPIO_DEVICE void init(unsigned long long* bar, unsigned count) { init(smem_address(bar), count); }

/// Makes the initialisations visible to the async proxy and the cluster
/// (fence.mbarrier_init.release.cluster). The initialising thread, after its init() calls.
SPIO_DEVICE void fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// Arrives on the barrier and adds `bytes` to the transactions its current phase waits for.
SPIO_DEVICE void arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile(
        "{\n.reg .b64 state;\n"
        "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
        "r"(bytes)
        : "memory");
}
SPIO_DEVICE void arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    arrive_expect_tx(smem_address(bar), bytes);
}

/// Arrives on the barrier (no transaction bytes).
SPIO_DEVICE void arrive(unsigned bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(
                     bar)
                 : "memory");
}
SPIO_DEVICE void arrive(unsigned long long* bar) { arrive(smem_address(bar)); }

/// Waits until the barrier's phase of parity `parity` (0 for the first phase) has completed:
/// its arrivals are in and its transaction bytes have landed.
SPIO_DEVICE void wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
SPIO_DEVICE void wait(unsigned long long* bar, unsigned parity) { wait(smem_address(bar), parity); }

/// Arrives on the barrier at `bar`'s shared-memory offset in the CTA of rank `cta` of this
/// cluster (spio::cluster::rank; this CTA's own barrier when `cta` is its rank): mapa, then
/// mbarrier.arrive.shared::cluster with the default semantics (release at CTA scope), as
/// CUTLASS's ClusterBarrier::arrive(cta_id) does. A consumer frees a slot that a peer CTA's
/// multicast copy (tma::load_2d_multicast) refills: what it must order before the refill is its
/// own reads of the slot (wgmma, completed by wait_group before it arrives), not memory the peer
/// reads, so cluster scope is not needed; on an H100 the .release.cluster form compiled to
/// MEMBAR.ALL.GPU per arrival and ran the 2-CTA GEMM at 0.4-0.87x of the 1-CTA one.
/// Needs a cluster launch; the target CTA must still be running.
SPIO_DEVICE void arrive_cluster(unsigned long long* bar, unsigned cta) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(
            smem_address(bar)),
        "r"(cta)
        : "memory");
}

/// wait() with acquire semantics at cluster scope: for a barrier that other CTAs of the cluster
/// arrive on (arrive_cluster), so what they did before arriving is visible after the wait.
SPIO_DEVICE void wait_cluster(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(smem_address(bar)),
        "r"(parity)
        : "memory");
}

/// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared
/// memory in the background (cp.async.bulk); the bytes count down the barrier's current phase.
/// One thread per copy.
SPIO_DEVICE void bulk_copy_g2s(void* smem, const void* gmem, unsigned bytes,
                               unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(smem_address(smem)), "l"(gmem), "r"(bytes), "r"(smem_address(bar))
        : "memory");
}

}  // namespace spio::mbarrier

/// Thread-block clusters (a kernel declared with __cluster_dims__): the CTA's place in its
/// cluster and the cluster-wide barrier that orders mbarrier initialisation before any peer's
/// remote access, and keeps a CTA's shared memory alive until its peers are done with it.
namespace spio::cluster {

/// This CTA's rank in its cluster (%cluster_ctarank), 0 .. size() - 1.
SPIO_DEVICE unsigned rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/// The number of CTAs in this CTA's cluster (%cluster_nctarank): 1 without a cluster launch.
SPIO_DEVICE unsigned size() {
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
}

/// Arrives on the cluster barrier (barrier.cluster.arrive.release: this thread's earlier memory
/// operations, remote mbarrier arrivals included, are visible to the cluster before the barrier
/// completes). Every thread of the cluster arrives once, then waits (wait()); the pair may be
/// split to overlap independent work.
SPIO_DEVICE void arrive() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }

/// Waits until every thread of the cluster has arrived (barrier.cluster.wait.acquire).
SPIO_DEVICE void wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }

/// arrive() then wait(): a barrier across every thread of the cluster (after mbarrier
/// initialisation, `mbarrier::fence_init` first, before any peer arrives or copies remotely).
SPIO_DEVICE void sync() {
    arrive();
    wait();
}

}  // namespace spio::cluster
#else
#define SPIO_MBARRIER 0
#endif
