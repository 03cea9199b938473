/// Tensor-core matrix multiply-accumulate on raw registers: mma.sync m16n8k16 and m16n8k8.
///
/// d += a * b with A 16xK row-major, B Kx8 column-major, fp32 accumulators D 16x8, one warp.
/// Operands are packed pairs of 16-bit values (`unsigned`, low half = lower column/row index).
/// The thread -> element mapping of each register is the PTX ISA's; fragment.h names it with
/// typed dims and is the preferred interface for kernels.
///
/// Example:
///     float acc[4] = {};   unsigned a[4], b[2];   // loaded with ldmatrix or by fragments
///     spio::mma_m16n8k16<__half>(acc, a, b);      // whole warp, converged
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

namespace detail {
template <typename T>
inline constexpr bool is_mma_input_v = false;
template <>
inline constexpr bool is_mma_input_v<__half> = true;
template <>
inline constexpr bool is_mma_input_v<__nv_bfloat16> = true;
template <typename T>
inline constexpr bool is_half_v = false;
template <>
inline constexpr bool is_half_v<__half> = true;
}  // namespace detail

/// A 16-bit floating type the mma.sync wrappers accept: __half or __nv_bfloat16.
template <typename T>
concept MmaInput = detail::is_mma_input_v<T>;

/// D(16x8, fp32) += A(16x16, row) * B(16x8, col) on the tensor cores. Warp-wide.
///
/// Template parameters:
///   T   the operand type, __half or __nv_bfloat16
/// Parameters:
///   d   4 fp32 accumulators of this thread (rows g, g, g+8, g+8; cols 2t, 2t+1, 2t, 2t+1)
///   a   4 registers of 2 operands each, the A fragment of this thread
///   b   2 registers of 2 operands each, the B fragment of this thread
template <typename T>
SPIO_DEVICE void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    static_assert(detail::is_mma_input_v<T>,
                  "spio::mma_m16n8k16<T>: T must be __half or __nv_bfloat16 (fp32 accumulators); "
                  "convert the operands to one of those types");
    if constexpr (detail::is_half_v<T>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

/// D(16x8, fp32) += A(16x8, row) * B(8x8, col) on the tensor cores. Warp-wide.
///
/// Template parameters:
///   T   the operand type, __half or __nv_bfloat16
/// Parameters:
///   d   4 fp32 accumulators of this thread (same mapping as mma_m16n8k16)
///   a   2 registers of 2 operands each, the A fragment of this thread
///   b   1 register of 2 operands, the B fragment of this thread
template <typename T>
SPIO_DEVICE void mma_m16n8k8(float (&d)[4], const unsigned (&a)[2], unsigned b) {
    static_assert(detail::is_mma_input_v<T>,
                  "spio::mma_m16n8k8<T>: T must be __half or __nv_bfloat16 (fp32 accumulators); "
                  "convert the operands to one of those types");
    if constexpr (detail::is_half_v<T>) {
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(b));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(b));
    }
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
