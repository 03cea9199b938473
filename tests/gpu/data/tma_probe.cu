// One CTA of 128 threads copies one box of a tensor into shared memory through a TMA tensor map
// (spio/tma.h), completing on an mbarrier, and writes the shared-memory image out as it lies
// (swizzle included), `bytes` bytes of it. Used by tests/host/include/test_tma.py (compile, SASS)
// and tests/gpu/test_tma.py (values).
#include "spio/mbarrier.h"
#include "spio/tma.h"

#if !SPIO_TMA
#error "tma_probe.cu needs sm_90 or newer (spio/tma.h defines nothing below)"
#endif

constexpr int MAX_BYTES = 16384;

extern "C" __global__ void __launch_bounds__(128)
    tma_probe_2d(unsigned* out, const __grid_constant__ spio::tma::Descriptor map, int c0, int c1,
                 int bytes) {
    __shared__ __align__(1024) unsigned buf[MAX_BYTES / 4];
    __shared__ __align__(8) unsigned long long bar;
    const int t = threadIdx.x;
    if (t == 0) {
        spio::tma::prefetch(&map);
        spio::mbarrier::init(&bar, 1);
        spio::mbarrier::fence_init();
    }
    __syncthreads();
    if (t == 0) {
        spio::mbarrier::arrive_expect_tx(&bar, bytes);
        spio::tma::load_2d(buf, &map, c0, c1, &bar);
    }
    spio::mbarrier::wait(&bar, 0);
    for (int i = t; i < bytes / 4; i += 128) out[i] = buf[i];
}
