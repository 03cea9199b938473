/// Ordered sum of matmul_sm90's split-K partials (its second pass):
///   C[e] = round_to_Out( (((ws[0][e] + ws[1][e]) + ...) + ws[SPLIT_K - 1][e]) + bias[e % n] )
/// for e < total = M·N, in fp32, slices in ascending order, the bias last, rounded once: the
/// order depends only on SPLIT_K, so the bits do not depend on the launch or the run.
///
/// Tiling: one thread per VEC consecutive elements of C (VEC = 4 when N % 4 == 0: a slice then
///   starts 16-byte aligned in the fresh workspace and e..e+3 share a row; else 1), THREADS per
///   CTA, a 1-D grid over M·N. Each thread issues its SPLIT_K loads (float4 or float) before the
///   adds, and stores C one element at a time (C needs only element alignment).
/// Traffic: reads SPLIT_K·M·N·4 B (mostly from L2: the main kernel wrote it just before), writes
///   M·N·sizeof(Out) B. Bound: latency at decode sizes (a few µs), memory beyond.
/// Launch: on sm_90 the host launches it with programmatic dependent launch (PDL; the main
///   kernel never triggers early, so at most the launch latency is hidden); `griddepcontrol.wait`
///   (first statement) holds every thread until that grid has completed and its partials are
///   visible. Partials are read with ld.global.cg (__ldcg): the non-coherent path assumes the
///   data never changes while the kernel lives. This kernel must not trigger its own dependents
///   early: the workspace is freed when the host call returns, and only the implicit trigger at
///   exit keeps a later dependent launch off it.
// The generated header defines Out (__half, __nv_bfloat16 or float), Element (the bias's type),
// SPLIT_K, VEC, HAS_BIAS and THREADS; see spio/kernels/matmul_sm90.py.
#include "spio/vector.h"

extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_splitk_reduce(Out* __restrict__ c, const float* __restrict__ ws,
                         const Element* __restrict__ bias, int n, long long total) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const long long e = (static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x) * VEC;
    if (e >= total) return;
    float sum[VEC];
    if constexpr (VEC == 4) {
        float4 part[SPLIT_K];
#pragma unroll
        for (int y = 0; y < SPLIT_K; ++y) {
            part[y] = __ldcg(reinterpret_cast<const float4*>(ws + y * total + e));
        }
        sum[0] = part[0].x, sum[1] = part[0].y, sum[2] = part[0].z, sum[3] = part[0].w;
#pragma unroll
        for (int y = 1; y < SPLIT_K; ++y) {
            sum[0] += part[y].x, sum[1] += part[y].y, sum[2] += part[y].z, sum[3] += part[y].w;
        }
    } else {
        float part[SPLIT_K];
#pragma unroll
        for (int y = 0; y < SPLIT_K; ++y) part[y] = __ldcg(ws + y * total + e);
        sum[0] = part[0];
#pragma unroll
        for (int y = 1; y < SPLIT_K; ++y) sum[0] += part[y];
    }
    const int col = static_cast<int>(e % n);  // VEC == 4: N % 4 == 0, so e..e+3 share a row
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
        if constexpr (HAS_BIAS) sum[v] += static_cast<float>(bias[col + v]);
        c[e + v] = static_cast<Out>(sum[v]);
    }
}
