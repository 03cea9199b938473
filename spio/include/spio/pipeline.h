/// A multi-stage cp.async pipeline over a ring of shared-memory slots, one barrier per stage.
///
/// Tiles 0 .. tiles-1 stream through Stages ring slots: while the block computes tile k from slot
/// k % Stages, the copies of tiles k+1 .. k+Stages-1 are in flight. The pairing of cp.async
/// commits and waits, the ring arithmetic and the barriers live here, once; kernels supply what
/// to load into a slot and what to compute from it.
///
/// Schedule (S = Stages; every thread of the block runs it):
///   prologue:   load tiles 0 .. S-2 into slots 0 .. S-2, one commit group each
///   iteration k: wait until tile k has landed (cp.async.wait_group S-2) and __syncthreads();
///                load tile k+S-1 into the slot tile k-1 used (free: every thread passed the
///                barrier, so compute(k-1) is done) and commit; then compute tile k
///   epilogue:   wait for all groups and __syncthreads(), so shared memory can be reused
/// A commit happens every iteration even when nothing is loaded (an empty group), so the group
/// count, and thus what wait_group S-2 means, stays uniform to the end.
///
/// Example (K loop of a matmul, 3 stages):
///     spio::Pipeline<3>::run(k_tiles,
///         [&](int k, int slot) { issue cp_async_16 copies of tile k into smem slot `slot` },
///         [&](int k, int slot) { ldmatrix + mma from slot `slot` });
#pragma once

#include "spio/async_copy.h"
#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// The ring of Stages shared-memory slots fed by cp.async. Block-wide.
///
/// Template parameters:
///   Stages   slots in the ring, >= 2 (2 = double buffering)
template <int Stages>
struct Pipeline {
    static_assert(Stages >= 2,
                  "spio::Pipeline<Stages>: Stages must be >= 2 (one slot computing, one loading); "
                  "for no overlap, copy and __syncthreads() directly");
    static constexpr int stages = Stages;

    /// The slot after `slot` in the ring.
    SPIO_HOST_DEVICE static constexpr int next(int slot) {
        return slot + 1 == Stages ? 0 : slot + 1;
    }

    /// The slot of tile k (k % Stages), as a constant when k is one (unrolled loops).
    SPIO_HOST_DEVICE static constexpr int slot_of(int k) { return k % Stages; }

    /// Runs the whole schedule above. Block-wide: every thread calls it with the same `tiles`.
    ///
    /// Parameters:
    ///   tiles     number of tiles to stream, >= 0
    ///   load      load(int tile, int slot): issues this thread's cp.async copies of tile into
    ///             slot (no commit; the pipeline commits)
    ///   compute   compute(int tile, int slot): consumes the slot (all threads' copies visible)
    template <typename Load, typename Compute>
    SPIO_DEVICE static void run(int tiles, Load&& load, Compute&& compute) {
#pragma unroll
        for (int s = 0; s < Stages - 1; ++s) {
            if (s < tiles) load(s, s);
            cp_async_commit();
        }
        int read_slot = 0;
        int write_slot = Stages - 1;
        for (int k = 0; k < tiles; ++k) {
            cp_async_wait<Stages - 2>();
            __syncthreads();
            if (k + Stages - 1 < tiles) load(k + Stages - 1, write_slot);
            cp_async_commit();
            compute(k, read_slot);
            read_slot = next(read_slot);
            write_slot = next(write_slot);
        }
        cp_async_wait<0>();
        __syncthreads();
    }
};

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
