/// Ordered sum of matmul_sm90's split tail (TAIL 1; its second pass): for each of the last
/// `tail` tiles of the raster order (tiles dp_tiles.., each split over `splits` CTAs along K),
///   C[e] = round_to_Out( (((part[0][e] + part[1][e]) + ...) + part[splits - 1][e]) + bias[col] )
/// in fp32, splits in ascending order, the bias last, rounded once: the order depends only on
/// the plan (dp_tiles, splits), so the bits do not depend on the launch or the run.
///
/// Tiling: partial p of the workspace is a tile's accumulators as the main kernel's 256
///   consumer threads held them (matmul_sm90.cu, store_partial: float4 j of thread t at float4
///   (p * ACC / 4 + j) * 256 + t); this kernel's thread t takes the same thread's values, so
///   consecutive threads read consecutive 16 bytes, and maps them to C with the accumulator
///   layout (spio::warpgroup::acc_row / acc_col; rows 64 (t / 128).. of the tile). A CTA sums
///   one float4 of every thread of one tail tile (grid = tail tiles x ACC / 4), each thread
///   issuing all `splits` (<= MAX_SPLITS) loads before its first add.
/// Traffic: reads splits x 128 x BLOCK_N x 4 B per tail tile (mostly from L2: the main kernel
///   wrote it just before), writes the tile's C. Bound: latency (one L2 round trip and the launch).
/// Assumes: ws 16-byte aligned (a fresh allocation), 1 <= splits <= MAX_SPLITS (Sm90Launch
///   checks), C element-aligned (pairs stored as one only where C and N allow); sm_90a.
/// Launch: on sm_90 the host launches it with programmatic dependent launch (PDL); as in
///   matmul_splitk_reduce.cu, `griddepcontrol.wait` holds every thread until the main kernel has
///   completed, the partials are read with ld.global.cg, and this kernel never triggers its own
///   dependents early (the workspace is freed when the host call returns).
// The generated header defines Out (__half, __nv_bfloat16 or float), Element (the bias's type),
// BLOCK_N, MAX_SPLITS and HAS_BIAS; see spio/kernels/matmul_tail_sum.py.
#include "spio/meta.h"
#include "spio/raster.h"
#include "spio/vector.h"
#include "spio/wgmma.h"

namespace {

constexpr int BLOCK_M = 128;
constexpr int THREADS = 256;         // the main kernel's consumer threads, one each
constexpr int CHUNKS = BLOCK_N / 8;  // float4s of accumulators per consumer thread (ACC / 4)

/// d[i], d[i + 1] (i even: adjacent columns col, col + 1 of one row) (+ bias) to C, rounded;
/// one store of both where `pairs` (N even and C 2-element aligned: col + 1 < n then too).
SPIO_DEVICE void store_pair(Out* __restrict__ c, const Element* __restrict__ bias, float lo,
                            float hi, int row, int col, int m, int n, bool pairs) {
    if (row >= m || col >= n) return;
    if constexpr (HAS_BIAS) {
        lo += static_cast<float>(bias[col]);
        if (col + 1 < n) hi += static_cast<float>(bias[col + 1]);
    }
    Out* dst = c + static_cast<long long>(row) * n + col;
    if (pairs) {
        if constexpr (spio::detail::is_same_v<Out, float>) {
            *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
        } else {
            *reinterpret_cast<unsigned*>(dst) = spio::round_pack2<Out>(lo, hi);
        }
    } else {
        dst[0] = static_cast<Out>(lo);
        if (col + 1 < n) dst[1] = static_cast<Out>(hi);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_tail_sum(Out* __restrict__ c, const float* __restrict__ ws,
                    const Element* __restrict__ bias, int m, int n, int dp_tiles, int splits,
                    int raster) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int tail = static_cast<int>(blockIdx.x) / CHUNKS;  // tail tile 0..
    const int j = static_cast<int>(blockIdx.x) % CHUNKS;     // the float4 of every thread
    const int t = static_cast<int>(threadIdx.x);
    int tile_m, tile_n;
    spio::grouped_tile(dp_tiles + tail, (m + BLOCK_M - 1) / BLOCK_M, (n + BLOCK_N - 1) / BLOCK_N,
                       raster, tile_m, tile_n);
    // Partial y of this tile: float4 ((tail * splits + y) * CHUNKS + j) * THREADS + t. Every
    // split's load is issued before the first add (one L2 round trip, not `splits`).
    const float4* src = reinterpret_cast<const float4*>(ws) +
                        (static_cast<long long>(tail) * splits * CHUNKS + j) * THREADS + t;
    float4 part[MAX_SPLITS];
#pragma unroll
    for (int y = 0; y < MAX_SPLITS; ++y) {
        if (y < splits) part[y] = __ldcg(src + static_cast<long long>(y) * CHUNKS * THREADS);
    }
    float4 sum = part[0];
#pragma unroll
    for (int y = 1; y < MAX_SPLITS; ++y) {
        if (y < splits) {
            sum.x += part[y].x, sum.y += part[y].y, sum.z += part[y].z, sum.w += part[y].w;
        }
    }
    // Accumulators 4 j .. 4 j + 3 of the thread's consumer warpgroup (rows 64 (t / 128).. of
    // the tile): two pairs of adjacent columns.
    const int wt = t % 128;
    const int row0 = tile_m * BLOCK_M + 64 * (t / 128);
    const int col0 = tile_n * BLOCK_N;
    const bool pairs =
        n % 2 == 0 && reinterpret_cast<unsigned long long>(c) % (2 * sizeof(Out)) == 0;
    store_pair(c, bias, sum.x, sum.y, row0 + spio::warpgroup::acc_row(wt, 4 * j),
               col0 + spio::warpgroup::acc_col(wt, 4 * j), m, n, pairs);
    store_pair(c, bias, sum.z, sum.w, row0 + spio::warpgroup::acc_row(wt, 4 * j + 2),
               col0 + spio::warpgroup::acc_col(wt, 4 * j + 2), m, n, pairs);
}
