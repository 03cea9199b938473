// Warp and block reductions (tests/gpu/test_gpu_blocks.py).
//
// Compile-time option: SPIO_WARPS (warps per block, blockDim.x == 32 * SPIO_WARPS).
// Each block reduces its 32 * SPIO_WARPS inputs. Arguments:
//   x          blocks * threads floats
//   warp_out   per warp: [sum, max, welford count, welford mean, welford M2]  (5 floats)
//   block_out  per block: [sum, max]  (2 floats)
#include "spio/gpu.h"

constexpr int WARPS = SPIO_WARPS;

extern "C" __global__ void reduce_test(float* warp_out, float* block_out, const float* x) {
    __shared__ float scratch[WARPS];
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = x[gid];
    const float ws = spio::warp::sum(v);
    const float wm = spio::warp::max(v);
    const spio::Welford st = spio::warp::welford(spio::Welford::of(v));
    const int gwarp = gid / 32;
    if (spio::lane_id() == 0) {
        warp_out[5 * gwarp + 0] = ws;
        warp_out[5 * gwarp + 1] = wm;
        warp_out[5 * gwarp + 2] = st.count;
        warp_out[5 * gwarp + 3] = st.mean;
        warp_out[5 * gwarp + 4] = st.m2;
    }
    const float bs = spio::block::sum<WARPS>(v, scratch);
    // Reuses scratch at once: block::sum ends with a barrier.
    const float bm = spio::block::max<WARPS>(v, scratch);
    // Every thread must hold the block result: thread (blockDim.x - 1) writes it.
    if (threadIdx.x == blockDim.x - 1) {
        block_out[2 * blockIdx.x + 0] = bs;
        block_out[2 * blockIdx.x + 1] = bm;
    }
}
