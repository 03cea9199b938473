/// Ordered reduction of the conv2d_gw8 weight-gradient partials (the deterministic second pass):
///   dw[e] = sum_{slice = 0}^{slices-1} partial[slice][e]          e < C·8·R·S
///   db[k] = sum_{slice = 0}^{slices-1} bias_partial[slice][k]     k < C (when HAS_BIAS)
/// in ascending slice order, in fp32, rounded once to Elem.
///
/// Tiling: one thread per output element E (a flat index over the weight (C, 8, R, S) followed
///   by the bias (C)); blockIdx.x = E / THREADS. Consecutive threads read consecutive floats of
///   each slice, so every slice is read with full 128-byte coalescing.
/// Traffic: reads slices·(C·8·R·S + C)·4 B, writes (C·8·R·S + C)·2 B. Bound: DRAM (one add per
///   4 B read); small next to the wgrad kernel whenever slices·4 B << N·P·Q·4 B per channel.
/// Pipeline: none (independent loads; the slice loop is unrolled by 4 for memory parallelism).
/// Assumes: partial slices contiguous with a stride of C·8·R·S floats, bias slices of C floats.

extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_gw8_wgrad_reduce(Elem* __restrict__ grad_weight, Elem* __restrict__ grad_bias,
                            const float* __restrict__ partial,
                            const float* __restrict__ bias_partial, int slices) {
    const BlockIdx block(blockIdx.x);
    const E e = block.get<EB>().unfold() + E(threadIdx.x);
    const WeightSlices weight_slices(const_cast<float*>(partial));  // (E) of one slice; slices are WEIGHT_SIZE apart
    if (e < E(WEIGHT_SIZE)) {
        float sum = 0.f;
        const float* src = weight_slices[e].get();
#pragma unroll 4
        for (int slice = 0; slice < slices; ++slice) sum += src[static_cast<long long>(slice) * WEIGHT_SIZE];
        grad_weight[e.get()] = static_cast<Elem>(sum);
    } else if (HAS_BIAS && e < E(WEIGHT_SIZE + CHANNELS)) {
        const int k = e.get() - WEIGHT_SIZE;
        float sum = 0.f;
#pragma unroll 4
        for (int slice = 0; slice < slices; ++slice) {
            sum += bias_partial[static_cast<long long>(slice) * CHANNELS + k];
        }
        grad_bias[k] = static_cast<Elem>(sum);
    }
}
