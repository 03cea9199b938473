// ldmatrix x1/x2/x4 (+ .trans) of up to four 8x8 b16 matrices (tests/gpu/test_gpu_blocks.py).
//
// Compile-time options: SPIO_X (1, 2 or 4 matrices), SPIO_TRANS (0 or 1).
// Arguments: out (32 lanes x SPIO_X registers, uint32, lane-major), src (SPIO_X * 64 uint16:
// matrix i row r at src[(8 i + r) * 8 .. +8]). Lane l passes the address of row l % (8 * SPIO_X).
#include "spio/gpu.h"

extern "C" __global__ void ldmatrix_test(unsigned* out, const unsigned short* src) {
    __shared__ __align__(16) unsigned short s[4 * 64];
    const int lane = spio::lane_id();
    for (int i = lane; i < SPIO_X * 64; i += 32) s[i] = src[i];
    __syncwarp();
    unsigned r[SPIO_X];
    const void* row = &s[(lane % (8 * SPIO_X)) * 8];
#if SPIO_TRANS
#if SPIO_X == 1
    spio::ldmatrix_x1_trans(r, row);
#elif SPIO_X == 2
    spio::ldmatrix_x2_trans(r, row);
#else
    spio::ldmatrix_x4_trans(r, row);
#endif
#else
#if SPIO_X == 1
    spio::ldmatrix_x1(r, row);
#elif SPIO_X == 2
    spio::ldmatrix_x2(r, row);
#else
    spio::ldmatrix_x4(r, row);
#endif
#endif
    for (int i = 0; i < SPIO_X; ++i) out[lane * SPIO_X + i] = r[i];
}
