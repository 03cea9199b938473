/// Ordered reduction of the conv2d_gw8 weight-gradient partials (the deterministic second pass):
///   dw[e] = sum_{slice = 0}^{slices-1} partial[slice][e]          e < C·8·R·S
///   db[k] = sum_{slice = 0}^{slices-1} bias_partial[slice][k]     k < C (when HAS_BIAS)
/// in fp32, rounded once to WElem (the weight's type: Elem, or float under autocast with float32
/// weights), in a fixed order: PARTS = THREADS / 32 contiguous runs of
/// ceil(slices / PARTS) slices, each summed in ascending slice order, then the runs in ascending
/// order. The order depends only on (slices, THREADS), so results are bitwise reproducible.
///
/// Tiling: a CTA owns 32 consecutive output elements E (a flat index over the weight (C, 8, R, S)
///   followed by the bias (C)); blockIdx.x = E / 32. Warp `part` sums its run of slices, lane l
///   element E0 + l: 32 consecutive floats of a slice, one 128-byte line per load.
///   WEIGHT_SIZE = C·8·R·S is a multiple of 64, so no warp straddles weight and bias.
/// Traffic: reads slices·(C·8·R·S + C)·4 B, writes (C·8·R·S + C)·sizeof(WElem) B. Bound:
///   DRAM/L2 (one add per 4 B read). One thread per element (the first version) had 4 loads in
///   flight per thread and ~20 CTAs for a 3x3 C64 layer: latency-bound at ~10+ us; here PARTS
///   warps per element column and UNROLL independent loads per thread, the last partial group
///   too (guarded loads issued together, then the adds in slice order): a run shorter than
///   UNROLL no longer waits out one DRAM latency per slice (7-25 us on the H100 before). PARTS comes from the most
///   slices the wgrad launch writes at any batch (spio.kernels.conv2d_gw8.wgrad_reduce.
///   reduce_config): a run is <= UNROLL up to 256 slices; beyond, 32 warps sum ceil(slices / 32)
///   each (the wgrad space's 32 splits per SM write up to ~1000), UNROLL loads in flight at a
///   time; a smaller batch leaves some warps idle. The wgrad tune runner times this kernel too.
/// Launch: on sm_90+ the host launches this kernel with programmatic dependent launch (PDL), so
///   it may start while the wgrad kernel still runs; `griddepcontrol.wait` (first statement)
///   holds every thread until that grid has completed and its partials are visible. Partials
///   are read with ld.global.cg (__ldcg: L2, coherent): the non-coherent read-only path that a
///   const __restrict__ load may compile to assumes the data never changes while the kernel
///   lives, which an overlapping producer breaks.
/// Assumes: partial slices contiguous with a stride of C·8·R·S floats, bias slices of C floats.

#include "spio/device.h"

namespace {
constexpr int UNROLL = 8;  // independent loads in flight per thread before the ordered adds
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_gw8_wgrad_reduce(WElem* __restrict__ grad_weight, WElem* __restrict__ grad_bias,
                            const float* __restrict__ partial,
                            const float* __restrict__ bias_partial, int slices) {
    // PDL: wait for the wgrad kernel (a no-op without PDL or below sm_90).
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    __shared__ float smem_parts_raw[SmemParts::storage_size()];
    const SmemParts smem_parts(smem_parts_raw);  // (PART, LANE): each run's sum per element
    const BlockIdx block(blockIdx.x);
    const int lane = spio::lane_id();
    const PART part(spio::warp_id());
    const E e = block.get<EB>().unfold() + E(lane);
    // Slices this warp sums: [begin, end), in ascending order.
    const int per_part = (slices + PARTS - 1) / PARTS;
    const int begin = min(part.get() * per_part, slices);
    const int end = min(begin + per_part, slices);

    // Tensors take non-const pointers; the kernel only reads the partials.
    const WeightSlices weight_slices(const_cast<float*>(partial));  // (E) of slice 0
    const float* src = nullptr;  // element e of slice 0; slices are `stride` floats apart
    long long stride = 0;
    if (e < E(WEIGHT_SIZE)) {
        src = weight_slices[e].get();
        stride = WEIGHT_SIZE;
    } else if (HAS_BIAS && e < E(WEIGHT_SIZE + CHANNELS)) {
        src = bias_partial + (e.get() - WEIGHT_SIZE);
        stride = CHANNELS;
    }
    float sum = 0.f;
    if (src != nullptr) {
#pragma unroll 1
        for (int slice = begin; slice < end; slice += UNROLL) {
            float v[UNROLL];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                v[k] = slice + k < end ? __ldcg(src + static_cast<long long>(slice + k) * stride)
                                       : 0.f;
            }
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                if (slice + k < end) sum += v[k];
            }
        }
    }
    *smem_parts[part][LANE(lane)] = sum;
    __syncthreads();
    if (part == PART(0) && src != nullptr) {
        float total = 0.f;
#pragma unroll
        for (int k = 0; k < PARTS; ++k) total += *smem_parts[PART(k)][LANE(lane)];
        if (e < E(WEIGHT_SIZE)) {
            grad_weight[e.get()] = static_cast<WElem>(total);
        } else {
            grad_bias[e.get() - WEIGHT_SIZE] = static_cast<WElem>(total);
        }
    }
}
