// 16-byte vectors: Vec8<T> load / to_float / from_float / store, and raw 16-byte copies
// (tests/gpu/test_gpu_blocks.py).
//
// Compile-time option: SPIO_T (__half or __nv_bfloat16). n vectors of 8 elements, one per thread.
// Arguments:
//   widened   n * 8 floats: to_float of x (loaded with the coherent path)
//   narrowed  n * 8 T: from_float of f (round to nearest even), stored with store()
//   copied    n * 8 T: x copied with ldg_nc_16 + store_global_16
//   x         n * 8 T;  f  n * 8 floats;  n
#include "spio/gpu.h"

using T = SPIO_T;
using V = spio::Vec8<T>;

extern "C" __global__ void vector_test(float* widened, T* narrowed, T* copied, const T* x,
                                       const float* f, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float w[8];
    V::load(x + 8 * i).to_float(w);
    for (int j = 0; j < 8; ++j) widened[8 * i + j] = w[j];
    float in[8];
    for (int j = 0; j < 8; ++j) in[j] = f[8 * i + j];
    V::from_float(in).store(narrowed + 8 * i);
    spio::store_global_16(copied + 8 * i, spio::ldg_nc_16(x + 8 * i));
}
