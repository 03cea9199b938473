// spio::Pipeline<SPIO_STAGES> streaming tiles through a shared-memory ring
// (tests/gpu/test_gpu_blocks.py).
//
// One block of 64 threads; a tile is 256 floats (each thread copies one 16-byte chunk). While
// computing tile k, thread t reads chunk (7 t + k) % 64, written by another thread, so a missing
// wait or barrier shows up as a wrong sum. Arguments: out (64 floats: thread t's sum over tiles of
// its chunk's 4 elements, each weighted by (k % 5 + 1)), src (tiles x 256 floats), tiles.
#include "spio/gpu.h"

constexpr int STAGES = SPIO_STAGES;

extern "C" __global__ void pipeline_test(float* out, const float* src, int tiles) {
    __shared__ __align__(16) float ring[STAGES][256];
    const int t = threadIdx.x;
    float acc = 0.0f;
    spio::Pipeline<STAGES>::run(
        tiles,
        [&](int k, int slot) { spio::cp_async_16(&ring[slot][4 * t], &src[k * 256 + 4 * t]); },
        [&](int k, int slot) {
            const int chunk = (7 * t + k) % 64;
            const float w = static_cast<float>(k % 5 + 1);
            for (int j = 0; j < 4; ++j) acc += w * ring[slot][4 * chunk + j];
        });
    out[t] = acc;
}
