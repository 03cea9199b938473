// C (16 x 8, fp32) = A (16 x KDIM) * B (KDIM x 8) by one warp, written with spio's typed layer:
// typed dims and tensors, SmemAllocator, Pipeline<STAGES> over 16-wide K tiles, typed fragments
// (tests/gpu/test_gpu_blocks.py and tests/host/include/test_gpu_blocks.py).
//
// Compile-time options: SPIO_T (__half or __nv_bfloat16), SPIO_KDIM (multiple of 16),
// SPIO_STAGES (>= 2). A is row-major [I][K], B row-major [K][J]; shared tiles keep those layouts,
// so A loads with ldmatrix and B with ldmatrix.trans. Launch: 1 block of 32 threads, dynamic
// shared memory = spio::smem_bytes<SmemA, SmemB>() (reported by the smem_bytes entry).
#include "spio/gpu.h"

struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };
struct J : spio::Dim<J> { using spio::Dim<J>::Dim; };
struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };
struct S : spio::Dim<S> { using spio::Dim<S>::Dim; };

using T = SPIO_T;
constexpr int KDIM = SPIO_KDIM;
constexpr int STAGES = SPIO_STAGES;

using GlobalA = spio::Tensor<const T, spio::Extent<I, 16, KDIM>, spio::Extent<K, KDIM, 1>>;
using GlobalB = spio::Tensor<const T, spio::Extent<K, KDIM, 8>, spio::Extent<J, 8, 1>>;
using GlobalC = spio::Tensor<float, spio::Extent<I, 16, 8>, spio::Extent<J, 8, 1>>;
using SmemA = spio::Tensor<T, spio::Extent<S, STAGES, 256>, spio::Extent<I, 16, 16>,
                           spio::Extent<K, 16, 1>>;
using SmemB = spio::Tensor<T, spio::Extent<S, STAGES, 128>, spio::Extent<K, 16, 8>,
                           spio::Extent<J, 8, 1>>;

extern "C" __global__ void smem_bytes(int* out) { *out = spio::smem_bytes<SmemA, SmemB>(); }

extern "C" __global__ void typed_matmul(float* c_ptr, const T* a_ptr, const T* b_ptr) {
    extern __shared__ __align__(16) unsigned char smem[];
    spio::SmemAllocator alloc(smem);
    auto sa = alloc.allocate<SmemA>();
    auto sb = alloc.allocate<SmemB>();
    const GlobalA a(a_ptr);
    const GlobalB b(b_ptr);
    const int lane = spio::lane_id();

    spio::MmaC<I, J> acc;
    acc.fill(0.0f);
    spio::Pipeline<STAGES>::run(
        KDIM / 16,
        [&](int tile, int slot) {
            const K k0(16 * tile);
            // A tile: 16 rows x 2 chunks of 8; B tile: 16 rows x 1 chunk.
            const I ai(lane / 2);
            const K ak(8 * (lane % 2));
            spio::cp_async_16(sa[S(slot)][ai][ak].get(), a[ai][k0 + ak].get());
            if (lane < 16) spio::cp_async_16(sb[S(slot)][K(lane)].get(), b[k0 + K(lane)].get());
        },
        [&](int, int slot) {
            spio::MmaA<T, 16, I, K> fa;
            spio::MmaB<T, 16, K, J> fb;
            fa.load(sa[S(slot)][fa.ldmatrix_row() + fa.ldmatrix_col()].get());
            fb.load_trans(sb[S(slot)][fb.ldmatrix_trans_row() + fb.ldmatrix_trans_col()].get());
            spio::mma(acc, fa, fb);
        });
    GlobalC c(c_ptr);
    acc.for_each([&](I i, J j, float v) { *c[i][j] = v; });
}
