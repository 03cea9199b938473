/// LayerNorm2d backward, second pass: dweight[c] = Σ_p dweight_part[p, c] and dbias[c] =
/// Σ_p dbias_part[p, c] over the `parts` per-CTA partial rows of layernorm_2d_bwd.
///
/// Tiling: blockIdx.x picks a COLUMN of 32 channels, blockIdx.y the output (dweight, then dbias;
///   only dbias when there is no weight). THREAD = (SPLIT, LANE): warp `split` sums the partial
///   rows split, split + SPLITS, ... of channel COLUMN + lane in that order; the SPLITS sums are
///   then added in warp order through shared memory. Every sum has a fixed order, so the result
///   is bitwise reproducible (no atomics).
/// Traffic: reads parts·C·4 B per output once (coalesced 128-byte rows, from L2: the backward
///   just wrote them), writes C weights. Latency-bound: parts is the backward's grid (≈ resident
///   CTAs), so a warp's serial depth is parts / SPLITS loads, 8 of them in flight per thread.
/// Pipeline: the unrolled row loop; one barrier between the per-warp sums and the combine.
/// Assumes: partial rows of C fp32 contiguous; dweight/dbias hold C elements of WEIGHT.
#include "spio/spio.h"

extern "C" __global__ void __launch_bounds__(SPLITS * 32)
layernorm_2d_bwd_reduce(float* dweight_part, float* dbias_part, WEIGHT* dweight, WEIGHT* dbias,
                        int parts) {
    // Preconditions
    static_assert(THREAD::size() == SPLITS * 32,
                  "layernorm_2d_bwd_reduce: the CTA is SPLITS warps of 32 channels");  // THREADS
    static_assert(HAS_WEIGHT || HAS_BIAS,
                  "layernorm_2d_bwd_reduce: nothing to reduce without weight or bias; skip the "
                  "launch");

    // ---- setup: which output, which channel, which partial rows
    __shared__ float smem_sums[SUMS::storage_size()];
    const bool bias_pass = !HAS_WEIGHT || blockIdx.y == 1;
    const PARTIALS partials(bias_pass ? dbias_part : dweight_part);
    const OUT out(bias_pass ? dbias : dweight);
    const SUMS sums(smem_sums);
    const THREAD thread(threadIdx.x);
    const C channel = COLUMN(static_cast<int>(blockIdx.x)) + thread.get<LANE>();
    const bool channel_ok = channel < C(CHANNELS);

    // ---- main loop: this warp's partial rows, in order
    float total = 0.0f;
    if (channel_ok) {
#pragma unroll 8  // 8 independent loads in flight per thread; the adds stay in row order
        for (PART p(thread.get<SPLIT>().get()); p < PART(parts); p = p + PART(SPLITS)) {
            total += *partials[p][channel].get();
        }
    }
    *sums[thread.coordinates()].get() = total;
    __syncthreads();

    // ---- epilogue: the SPLITS sums of each channel, in warp order
    if (thread.get<SPLIT>() == SPLIT(0) && channel_ok) {
        float result = 0.0f;
        for (int s = 0; s < SPLITS; ++s) result += *sums[SPLIT(s)][thread.get<LANE>()].get();
        *out[channel].get() = static_cast<WEIGHT>(result);
    }
}
