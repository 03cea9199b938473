/// Just enough of CUDA to run a simple kernel on the host: one std::thread per CUDA thread,
/// __syncthreads as a std::barrier, __shared__ arrays as function statics (blocks run one at a
/// time). Used to check kernel logic in CI, which has no GPU. Not for performance.
#pragma once

#include <barrier>
#include <functional>
#include <thread>
#include <vector>

struct EmulatedDim3 {
    unsigned x = 0, y = 0, z = 0;
};

inline thread_local EmulatedDim3 threadIdx;
inline EmulatedDim3 blockIdx;
inline EmulatedDim3 blockDim;
inline std::barrier<>* emulated_barrier = nullptr;

#define __global__
#define __shared__ static
#define __restrict__ __restrict

inline void __syncthreads() { emulated_barrier->arrive_and_wait(); }

/// Runs kernel() for every block of a 1-D grid and every thread of a 2-D block.
inline void emulate_launch(unsigned grid, EmulatedDim3 block, const std::function<void()>& kernel) {
    blockDim = block;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        std::barrier<> bar(static_cast<std::ptrdiff_t>(block.x * block.y));
        emulated_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned ty = 0; ty < block.y; ++ty) {
            for (unsigned tx = 0; tx < block.x; ++tx) {
                threads.emplace_back([=, &kernel] {
                    threadIdx = {tx, ty, 0};
                    kernel();
                });
            }
        }
        for (auto& t : threads) t.join();
    }
}
