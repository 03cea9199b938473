// One CTA of 128 threads streams 2 x 512 floats through one shared-memory buffer: thread 0 arms
// the mbarrier with the phase's bytes and issues a cp.async.bulk copy; all threads wait on the
// phase (parity 0, then 1) and copy the buffer out. Used by tests/host/include/test_mbarrier.py
// (compile, SASS) and tests/gpu/test_mbarrier.py (values).
#include "spio/mbarrier.h"

#if !SPIO_MBARRIER
#error "bulk_probe.cu needs sm_90 or newer (spio/mbarrier.h defines nothing below)"
#endif

constexpr int CHUNK = 512;  // floats per phase: 2 KiB
constexpr int PHASES = 2;

extern "C" __global__ void __launch_bounds__(128) bulk_probe(float* out, const float* in) {
    __shared__ __align__(128) float buf[CHUNK];
    __shared__ __align__(8) unsigned long long bar;
    const int t = threadIdx.x;
    if (t == 0) {
        spio::mbarrier::init(&bar, 1);
        spio::mbarrier::fence_init();
    }
    __syncthreads();
    for (int phase = 0; phase < PHASES; ++phase) {
        if (t == 0) {
            spio::mbarrier::arrive_expect_tx(&bar, CHUNK * sizeof(float));
            spio::mbarrier::bulk_copy_g2s(buf, in + CHUNK * phase, CHUNK * sizeof(float), &bar);
        }
        spio::mbarrier::wait(&bar, phase & 1);
        for (int i = t; i < CHUNK; i += 128) out[CHUNK * phase + i] = buf[i];
        __syncthreads();  // every read of this phase before the next copy overwrites buf
    }
}
