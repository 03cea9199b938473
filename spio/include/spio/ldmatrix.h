/// ldmatrix: warp-cooperative loads of 8x8 matrices of 16-bit elements from shared memory.
///
/// ldmatrix_xN loads N matrices (N = 1, 2, 4). Lanes 8i .. 8i+7 give the addresses of the 8 rows
/// (16 contiguous bytes each, 16-byte aligned) of matrix i; the other lanes' pointers are ignored
/// (for x1 and x2 they must still be valid generic pointers, so pass a row of any matrix).
/// Register r[i] of lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (low half =
/// lower column). The _trans variants deliver the transposed matrix: r[i] of lane l holds elements
/// (row 2(l%4), col l/4) and (row 2(l%4)+1, col l/4) of matrix i as stored.
///
/// Example (the A operand of mma_m16n8k16 from a row-major 16x16 tile `a` in shared memory):
///     unsigned r[4];
///     spio::ldmatrix_x4(r, &a[lane % 16][(lane / 16) * 8]);
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Loads one 8x8 b16 matrix; lanes 0..7 give its row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x1(unsigned (&r)[1], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(smem_address(smem_row_ptr)));
}

/// Loads two 8x8 b16 matrices; lanes 0..15 give their row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x2(unsigned (&r)[2], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(smem_row_ptr)));
}

/// Loads four 8x8 b16 matrices; lanes 0..31 give their row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x4(unsigned (&r)[4], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(smem_row_ptr)));
}

/// Loads one 8x8 b16 matrix transposed; lanes 0..7 give its row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x1_trans(unsigned (&r)[1], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(smem_address(smem_row_ptr)));
}

/// Loads two 8x8 b16 matrices transposed; lanes 0..15 give their row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x2_trans(unsigned (&r)[2], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_address(smem_row_ptr)));
}

/// Loads four 8x8 b16 matrices transposed; lanes 0..31 give their row addresses. Warp-wide.
SPIO_DEVICE void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row_ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(smem_row_ptr)));
}

/// The same loads from a row address already in the shared window (`smem_address`): a
/// kernel that walks its rings as 32-bit offsets adds them to one precomputed address.
SPIO_DEVICE void ldmatrix_x2(unsigned (&r)[2], unsigned smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_row));
}

SPIO_DEVICE void ldmatrix_x4(unsigned (&r)[4], unsigned smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_row));
}

SPIO_DEVICE void ldmatrix_x1_trans(unsigned (&r)[1], unsigned smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(smem_row));
}

SPIO_DEVICE void ldmatrix_x2_trans(unsigned (&r)[2], unsigned smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_row));
}

SPIO_DEVICE void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_row));
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
