// cp.async with the zero-fill predicate (tests/gpu/test_gpu_blocks.py).
//
// Compile-time option: SPIO_BYTES (16, 8 or 4 bytes per copy).
// Arguments: out (n chunks), src (n chunks), mask (n ints: 0 = masked), n (chunks, <= 1024).
// One block of 256 threads. Shared memory is first filled with 0xAB bytes so a masked copy that
// writes nothing (instead of zeros) is caught. Masked copies pass a null source pointer: with the
// predicate false the source must not be read.
#include "spio/gpu.h"

constexpr int BYTES = SPIO_BYTES;
struct __align__(BYTES) Chunk { unsigned char b[BYTES]; };

extern "C" __global__ void async_copy_test(Chunk* out, const Chunk* src, const int* mask, int n) {
    __shared__ Chunk s[1024];
    unsigned char* bytes = reinterpret_cast<unsigned char*>(s);
    for (int i = threadIdx.x; i < n * BYTES; i += blockDim.x) bytes[i] = 0xAB;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const bool pred = mask[i] != 0;
        const Chunk* from = pred ? &src[i] : nullptr;
#if SPIO_BYTES == 16
        spio::cp_async_16(&s[i], from, pred);
#elif SPIO_BYTES == 8
        spio::cp_async_8(&s[i], from, pred);
#else
        spio::cp_async_4(&s[i], from, pred);
#endif
    }
    spio::cp_async_commit();
    spio::cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[i];
}
