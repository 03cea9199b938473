// One warp computes D = C + A * B with one typed fragment mma (tests/gpu/test_gpu_blocks.py).
//
// Compile-time options:
//   SPIO_T      __half or __nv_bfloat16 (operand type)
//   SPIO_K      16 (m16n8k16) or 8 (m16n8k8)
//   SPIO_LOAD   0: each thread fills its fragments element by element from global memory through
//                  the fragments' (row, col) mapping (validates fragment.h's tables)
//               1: A row-major and B [n][k] staged in shared memory, loaded with Mma*::load
//               2: A [k][m] and B [k][n] staged in shared memory, loaded with Mma*::load_trans
// Arguments: d (16 x 8 fp32, row-major, output), c (16 x 8 fp32), a (16 x K, row-major),
// b (K x 8, row-major: element (k, n) at b[k * 8 + n]).
#include "spio/gpu.h"

struct M { int v; __device__ M(int x) : v(x) {} };
struct N { int v; __device__ N(int x) : v(x) {} };
struct K { int v; __device__ K(int x) : v(x) {} };

using T = SPIO_T;
constexpr int KDIM = SPIO_K;

extern "C" __global__ void mma_test(float* d, const float* c, const T* a, const T* b) {
    spio::MmaA<T, KDIM, M, K> fa;
    spio::MmaB<T, KDIM, K, N> fb;
    spio::MmaC<M, N> fc;
    const int lane = spio::lane_id();
#if SPIO_LOAD == 0
    for (int e = 0; e < fa.elements; ++e) fa.set(e, a[fa.row(e).v * KDIM + fa.col(e).v]);
    for (int e = 0; e < fb.elements; ++e) fb.set(e, b[fb.row(e).v * 8 + fb.col(e).v]);
#else
    __shared__ __align__(16) T sa[16 * KDIM];
    __shared__ __align__(16) T sb[KDIM * 8];
    for (int i = lane; i < 16 * KDIM; i += 32) {
        const int m = i / KDIM, k = i % KDIM;
#if SPIO_LOAD == 1
        sa[m * KDIM + k] = a[i];      // [m][k], K contiguous
#else
        sa[k * 16 + m] = a[i];        // [k][m], M contiguous
#endif
    }
    for (int i = lane; i < KDIM * 8; i += 32) {
        const int k = i / 8, n = i % 8;
#if SPIO_LOAD == 1
        sb[n * KDIM + k] = b[i];      // [n][k], K contiguous
#else
        sb[k * 8 + n] = b[i];         // [k][n], N contiguous
#endif
    }
    __syncwarp();
#if SPIO_LOAD == 1
    fa.load(&sa[fa.ldmatrix_row().v * KDIM + fa.ldmatrix_col().v]);
    fb.load(&sb[fb.ldmatrix_col().v * KDIM + fb.ldmatrix_row().v]);
#else
    fa.load_trans(&sa[fa.ldmatrix_trans_col().v * 16 + fa.ldmatrix_trans_row().v]);
    fb.load_trans(&sb[fb.ldmatrix_trans_row().v * 8 + fb.ldmatrix_trans_col().v]);
#endif
#endif
    for (int e = 0; e < fc.elements; ++e) fc.set(e, c[fc.row(e).v * 8 + fc.col(e).v]);
    spio::mma(fc, fa, fb);
    fc.for_each([&](M m, N n, float v) { d[m.v * 8 + n.v] = v; });
    (void)lane;
}
