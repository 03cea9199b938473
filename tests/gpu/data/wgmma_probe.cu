// One warpgroup computes D (64 x N, fp32) = A (64 x 32) B (32 x N) with two wgmma m64nNk16
// (the second accumulating), operands staged by ordinary stores into the no-swizzle core-matrix
// layout of spio/wgmma.h. A is row-major (K contiguous), bt is B transposed (N x 32, K
// contiguous), out is D row-major. T is SPIO_T (compile with -DSPIO_T=__half or __nv_bfloat16).
// wgmma_probe_sw128_N: the same with K = 64 in the 128-byte swizzled layout (below), also for
// N = 16 and 32 (the narrow tiles of the Hopper matmul's swapped decode configs).
// bulk_wgmma_probe_128: A and bt given already in core-matrix order, brought in by one thread's
// cp.async.bulk copies completing on an mbarrier (spio/mbarrier.h), then the same product.
// tma_wgmma_probe_128: A (64 x 64) and bt (128 x 64) row-major, brought in by TMA tensor maps
// with the 128-byte swizzle (spio/tma.h), then the K = 64 swizzled product: the Hopper
// matmul's main-loop step.
// Used by tests/host/include/test_wgmma.py (compile, SASS) and tests/gpu/test_wgmma.py (values).
#include "spio/mbarrier.h"
#include "spio/tma.h"
#include "spio/wgmma.h"

#if !SPIO_WGMMA
#error "wgmma_probe.cu needs sm_90a (spio/wgmma.h defines nothing elsewhere)"
#endif

using T = SPIO_T;
constexpr int K = 32;

// Element (r, k) of a (rows x K) K-major operand in the core-matrix layout: 8x8 cores of 128
// bytes, core (r / 8, k / 8) at ((r / 8) (K / 8) + k / 8) 64 elements; so the cores adjacent
// along K are 128 bytes apart (LBO) and those adjacent along rows K / 8 * 128 bytes (SBO).
__device__ int core_index(int r, int k) {
    return ((r / 8) * (K / 8) + k / 8) * 64 + (r % 8) * 8 + k % 8;
}

// A (rows x KK) row-major operand into shared memory at index(r, k), by the warpgroup's threads
// with ordinary stores, then made visible to wgmma's async proxy (the caller syncs).
template <int KK, class Index>
__device__ void stage(T* smem, const T* gmem, int rows, Index index) {
    for (int i = threadIdx.x; i < rows * KK; i += 128) smem[index(i / KK, i % KK)] = gmem[i];
    spio::warpgroup::fence_async_proxy();
}

// The accumulators to D (64 x N, row-major), in the layout of spio/wgmma.h's file comment.
template <int N>
__device__ void store_d(float* out, const float (&d)[N / 2]) {
    const int t = threadIdx.x;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        out[spio::warpgroup::acc_row(t, i) * N + spio::warpgroup::acc_col(t, i)] = d[i];
    }
}

// D = A B over KK / 16 wgmma K-steps, step ks's descriptors starting `step` elements further
// (no swizzle: the next core column pair, 128 elements; 128-byte swizzle: 32 bytes into the row),
// then committed and waited for.
template <int N, int KK>
__device__ void multiply(float (&d)[N / 2], const T* sa, const T* sb, int step, unsigned lbo,
                         unsigned sbo, spio::warpgroup::Swizzle swizzle) {
    spio::warpgroup::fence();
#pragma unroll
    for (int ks = 0; ks < KK / 16; ++ks) {
        const auto da = spio::warpgroup::make_desc(sa + step * ks, lbo, sbo, swizzle);
        const auto db = spio::warpgroup::make_desc(sb + step * ks, lbo, sbo, swizzle);
        spio::warpgroup::mma_async<T, N>(d, da, db, ks > 0);
    }
    spio::warpgroup::commit_group();
    spio::warpgroup::wait_group<0>();
}

template <int N>
__device__ void probe(float* out, const T* a, const T* bt) {
    __shared__ __align__(128) T sa[64 * K];
    __shared__ __align__(128) T sb[N * K];
    stage<K>(sa, a, 64, core_index);
    stage<K>(sb, bt, N, core_index);
    __syncthreads();
    float d[N / 2];
    multiply<N, K>(d, sa, sb, 128, 128, (K / 8) * 128, spio::warpgroup::Swizzle::None);
    store_d<N>(out, d);
}

// The same product with K = 64 staged in the 128-byte swizzled K-major layout that TMA writes:
// row r of a tile is 128 bytes (64 elements along K), its 16-byte chunk c stored at chunk c ^ (r %
// 8); 8 rows form a 1024-byte atom (SBO = 1024; LBO unused by swizzled K-major layouts). K-step
// ks of 16 elements starts 32 ks bytes into the row: the hardware applies the XOR to the
// address, so the descriptor's start address just advances.
constexpr int K_SW = 64;

__device__ int swizzled_index(int r, int k) {
    const int chunk = (k / 8) ^ (r % 8);
    return r * K_SW + chunk * 8 + k % 8;
}

template <int N>
__device__ void probe_sw128(float* out, const T* a, const T* bt) {
    __shared__ __align__(1024) T sa[64 * K_SW];
    __shared__ __align__(1024) T sb[N * K_SW];
    stage<K_SW>(sa, a, 64, swizzled_index);
    stage<K_SW>(sb, bt, N, swizzled_index);
    __syncthreads();
    float d[N / 2];
    multiply<N, K_SW>(d, sa, sb, 16, 16, 1024, spio::warpgroup::Swizzle::B128);
    store_d<N>(out, d);
}

extern "C" __global__ void __launch_bounds__(128) wgmma_probe_64(float* o, const T* a, const T* b) {
    probe<64>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128) wgmma_probe_128(float* o, const T* a, const T* b) {
    probe<128>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128) wgmma_probe_256(float* o, const T* a, const T* b) {
    probe<256>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128)
    wgmma_probe_sw128_16(float* o, const T* a, const T* b) {
    probe_sw128<16>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128)
    wgmma_probe_sw128_32(float* o, const T* a, const T* b) {
    probe_sw128<32>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128)
    wgmma_probe_sw128_64(float* o, const T* a, const T* b) {
    probe_sw128<64>(o, a, b);
}
extern "C" __global__ void __launch_bounds__(128)
    wgmma_probe_sw128_128(float* o, const T* a, const T* b) {
    probe_sw128<128>(o, a, b);
}

// One barrier for one arrival (the copying thread's), ready for the whole CTA.
__device__ void init_barrier(unsigned long long* bar) {
    if (threadIdx.x == 0) {
        spio::mbarrier::init(bar, 1);
        spio::mbarrier::fence_init();
    }
    __syncthreads();
}

// Operands in core-matrix order in global memory (the host permutes them), copied whole into
// shared memory by cp.async.bulk: the bytes land through the async proxy that wgmma reads, and
// the mbarrier's phase completes when they are in.
template <int N>
__device__ void bulk_probe(float* out, const T* a_core, const T* bt_core) {
    __shared__ __align__(128) T sa[64 * K];
    __shared__ __align__(128) T sb[N * K];
    __shared__ __align__(8) unsigned long long bar;
    init_barrier(&bar);
    if (threadIdx.x == 0) {
        spio::mbarrier::arrive_expect_tx(&bar, (64 + N) * K * sizeof(T));
        spio::mbarrier::bulk_copy_g2s(sa, a_core, 64 * K * sizeof(T), &bar);
        spio::mbarrier::bulk_copy_g2s(sb, bt_core, N * K * sizeof(T), &bar);
    }
    spio::mbarrier::wait(&bar, 0);
    float d[N / 2];
    multiply<N, K>(d, sa, sb, 128, 128, (K / 8) * 128, spio::warpgroup::Swizzle::None);
    store_d<N>(out, d);
}

extern "C" __global__ void __launch_bounds__(128)
    bulk_wgmma_probe_128(float* o, const T* a, const T* b) {
    bulk_probe<128>(o, a, b);
}

// A (64 x K_SW) and bt (N x K_SW) row-major in global memory, each one box of its tensor map
// (128-byte swizzle): TMA writes them in exactly the layout probe_sw128 stages by hand.
template <int N>
__device__ void tma_probe(float* out, const spio::tma::Descriptor* a_map,
                          const spio::tma::Descriptor* bt_map) {
    __shared__ __align__(1024) T sa[64 * K_SW];
    __shared__ __align__(1024) T sb[N * K_SW];
    __shared__ __align__(8) unsigned long long bar;
    init_barrier(&bar);
    if (threadIdx.x == 0) {
        spio::mbarrier::arrive_expect_tx(&bar, (64 + N) * K_SW * sizeof(T));
        spio::tma::load_2d(sa, a_map, 0, 0, &bar);
        spio::tma::load_2d(sb, bt_map, 0, 0, &bar);
    }
    spio::mbarrier::wait(&bar, 0);
    float d[N / 2];
    multiply<N, K_SW>(d, sa, sb, 16, 16, 1024, spio::warpgroup::Swizzle::B128);
    store_d<N>(out, d);
}

extern "C" __global__ void __launch_bounds__(128)
    tma_wgmma_probe_128(float* o, const __grid_constant__ spio::tma::Descriptor a_map,
                        const __grid_constant__ spio::tma::Descriptor bt_map) {
    tma_probe<128>(o, &a_map, &bt_map);
}
