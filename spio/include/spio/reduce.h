/// Warp and block reductions of fp32 values (shuffle-xor butterflies), and Welford statistics.
///
/// spio::warp::sum/max need all 32 lanes converged and return the result in every lane.
/// spio::block::sum<Warps> needs all Warps * 32 threads of a 1-D block and returns the result in
/// every thread. spio::Welford combines (count, mean, M2) partial statistics exactly (Chan et al.).
///
/// Example (mean and variance of one warp's values):
///     spio::Welford s = spio::warp::welford(spio::Welford::of(x));
///     float var = s.variance();          // population variance (M2 / count)
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Running statistics (count, mean, M2 = sum of squared deviations) of a set of values.
struct Welford {
    float count;
    float mean;
    float m2;

    /// The statistics of one value.
    SPIO_DEVICE static Welford of(float x) { return {1.0f, x, 0.0f}; }

    /// The statistics of no values.
    SPIO_DEVICE static Welford empty() { return {0.0f, 0.0f, 0.0f}; }

    /// Adds one value (Welford's update).
    SPIO_DEVICE void push(float x) {
        count += 1.0f;
        const float delta = x - mean;
        mean += delta / count;
        m2 += delta * (x - mean);
    }

    /// Population variance M2 / count (0 for an empty set).
    SPIO_DEVICE float variance() const { return count > 0.0f ? m2 / count : 0.0f; }
};

/// The statistics of the union of two disjoint sets (Chan's parallel combine); empty-safe.
SPIO_DEVICE Welford combine(const Welford& a, const Welford& b) {
    const float n = a.count + b.count;
    if (n == 0.0f) return Welford::empty();
    const float delta = b.mean - a.mean;
    const float wb = b.count / n;
    return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
}

namespace warp {

/// Sum of v over the 32 lanes of the warp, returned in every lane. Warp-wide, converged.
SPIO_DEVICE float sum(float v) {
#pragma unroll
    for (int offset = warp_size / 2; offset > 0; offset /= 2) {
        v += __shfl_xor_sync(full_warp_mask, v, offset);
    }
    return v;
}

/// Maximum of v over the 32 lanes of the warp, returned in every lane. Warp-wide, converged.
SPIO_DEVICE float max(float v) {
#pragma unroll
    for (int offset = warp_size / 2; offset > 0; offset /= 2) {
        v = fmaxf(v, __shfl_xor_sync(full_warp_mask, v, offset));
    }
    return v;
}

/// Welford statistics combined over the 32 lanes, returned in every lane. Warp-wide, converged.
SPIO_DEVICE Welford welford(Welford s) {
#pragma unroll
    for (int offset = warp_size / 2; offset > 0; offset /= 2) {
        Welford other;
        other.count = __shfl_xor_sync(full_warp_mask, s.count, offset);
        other.mean = __shfl_xor_sync(full_warp_mask, s.mean, offset);
        other.m2 = __shfl_xor_sync(full_warp_mask, s.m2, offset);
        s = combine(s, other);
    }
    return s;
}

}  // namespace warp

namespace block {

/// Sum of v over all Warps * 32 threads of a 1-D block, returned in every thread. Block-wide.
///
/// Template parameters:
///   Warps          warps in the block (blockDim.x == 32 * Warps)
/// Parameters:
///   v              this thread's value
///   smem_scratch   Warps floats of shared memory; reusable after the call returns (the call
///                  ends with a barrier)
template <int Warps>
SPIO_DEVICE float sum(float v, float* smem_scratch) {
    // Preconditions
    static_assert(Warps >= 1 && Warps <= 32,
                  "spio::block::sum<Warps>: Warps must be in [1, 32] (a block has at most 1024 "
                  "threads); pass blockDim.x / 32");  // WARPS
    v = warp::sum(v);
    if constexpr (Warps == 1) {
        return v;
    } else {
        const int lane = lane_id();
        const int warp = warp_id();
        if (lane == 0) smem_scratch[warp] = v;
        __syncthreads();
        float total = lane < Warps ? smem_scratch[lane] : 0.0f;
        total = warp::sum(total);
        __syncthreads();  // scratch may be reused by the caller
        return total;
    }
}

/// Maximum of v over all Warps * 32 threads of a 1-D block, returned in every thread. Block-wide.
///
/// Parameters as for block::sum.
template <int Warps>
SPIO_DEVICE float max(float v, float* smem_scratch) {
    // Preconditions
    static_assert(Warps >= 1 && Warps <= 32,
                  "spio::block::max<Warps>: Warps must be in [1, 32] (a block has at most 1024 "
                  "threads); pass blockDim.x / 32");  // WARPS
    v = warp::max(v);
    if constexpr (Warps == 1) {
        return v;
    } else {
        const int lane = lane_id();
        const int warp = warp_id();
        if (lane == 0) smem_scratch[warp] = v;
        __syncthreads();
        float m = smem_scratch[lane < Warps ? lane : 0];
        m = warp::max(m);
        __syncthreads();
        return m;
    }
}

}  // namespace block
}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
