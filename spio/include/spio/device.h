/// Device-only prelude of spio's GPU building blocks: macros, CUDA half/bfloat16 types, lane ids.
///
/// Every GPU building-block header (mma.h, ldmatrix.h, async_copy.h, pipeline.h, reduce.h,
/// vector.h, fragment.h, smem.h) includes this first. Those headers are device-only: under a host
/// compiler (g++, or the host pass of nvcc) they define nothing, so a host program may include
/// spio/gpu.h without error, and any use of a device building block from host code fails with
/// "'mma_m16n8k16' is not a member of 'spio'". SPIO_GPU_BLOCKS is 1 when the blocks are defined.
#pragma once

#include "spio/macros.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SPIO_GPU_BLOCKS 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace spio {

/// Number of threads in a warp (a property of every NVIDIA architecture spio targets).
inline constexpr int warp_size = 32;

/// Full-warp participation mask for *_sync intrinsics.
inline constexpr unsigned full_warp_mask = 0xffffffffu;

/// The calling thread's lane in its warp, [0, 32), for 1-D blocks.
SPIO_DEVICE int lane_id() { return static_cast<int>(threadIdx.x) & (warp_size - 1); }

/// The calling thread's warp in its block, for 1-D blocks.
SPIO_DEVICE int warp_id() { return static_cast<int>(threadIdx.x) / warp_size; }

/// Converts a generic pointer into shared memory to the 32-bit shared-window address PTX wants.
SPIO_DEVICE unsigned smem_address(const void* smem_ptr) {
    return static_cast<unsigned>(__cvta_generic_to_shared(smem_ptr));
}

}  // namespace spio
#else
#define SPIO_GPU_BLOCKS 0
#endif
