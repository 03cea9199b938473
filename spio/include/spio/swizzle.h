/// Swizzles: derived layouts that permute a tensor's columns by its row, for shared memory
/// without bank conflicts.
///
/// A swizzle is part of a tensor's type: `spio::Tensor<uint4, Extent<M, 64, 8>, Extent<K8, 8, 1>,
/// spio::Xor<M, K8, 3>>`. When the tensor resolves an offset, the index of the Col extent becomes
/// `col ^ ((row >> Shift) & (2^Bits - 1))`, where row is the index of the Row extent. Within a row
/// this permutes the columns (XOR with a constant is its own inverse), so the layout stays a
/// bijection; across 2^Bits consecutive rows one logical column lands in 2^Bits different columns.
///
/// Why: shared memory has 32 banks of 4 bytes (8 slots of 16 bytes per 128-byte line). ldmatrix
/// and 16-byte vector accesses read one 16-byte chunk from each of 8 rows; with 128-byte rows all
/// 8 chunks of one logical column sit in the same slot (an 8-way conflict). XOR with row % 8
/// spreads them over the 8 slots. With 64-byte rows two rows share a line: use Bits 2, Shift 1.
#pragma once

#include "spio/dim.h"
#include "spio/macros.h"

namespace spio {

/// Column index XOR (row index >> Shift) mod 2^Bits.
///
/// Template parameters:
///   Row     the dim whose extent index selects the permutation (exactly as in the tensor)
///   Col     the dim whose extent index is permuted; its extent size must be a multiple of 2^Bits
///   Bits    number of low column bits flipped, >= 1
///   Shift   row bits skipped first (rows per 128-byte line > 1 wants Shift = log2 of it)
///
/// Example: Xor<M, K8, 3>::apply(/*col*/ 2, /*row*/ 5) == 7;  Xor<N, K8, 2, 1>::apply(1, 6) == 2.
template <DimLike Row, DimLike Col, int Bits, int Shift = 0>
struct Xor {
    static_assert(Bits >= 1 && Bits < 31,
                  "spio::Xor<Row, Col, Bits, Shift>: Bits must be in [1, 30]; use the number of "
                  "16-byte columns to permute as a power of two");
    static_assert(Shift >= 0 && Shift < 31,
                  "spio::Xor<Row, Col, Bits, Shift>: Shift must be in [0, 30]");
    static_assert(!same_base_v<Row, Col>,
                  "spio::Xor<Row, Col, Bits, Shift>: Row and Col must have different base dims; "
                  "swizzle a column dim by a row dim");
    using row = Row;
    using col = Col;
    static constexpr int bits = Bits;
    static constexpr int shift = Shift;
    static constexpr int mask = (1 << Bits) - 1;

    /// The physical column index of logical column `col` in row `row` (both extent indices).
    SPIO_HOST_DEVICE static constexpr int apply(int col, int row) {
        return col ^ ((row >> Shift) & mask);
    }
};

/// The 1-bit XOR swizzle: odd rows swap neighbouring column pairs (a checkerboard of pairs).
template <DimLike Row, DimLike Col>
using Checkerboard = Xor<Row, Col, 1>;

namespace detail {
template <class T>
inline constexpr bool is_swizzle_v = false;
template <class Row, class Col, int Bits, int Shift>
inline constexpr bool is_swizzle_v<Xor<Row, Col, Bits, Shift>> = true;
}  // namespace detail

/// A derived-layout function a tensor type accepts next to its extents (spio::Xor).
template <class T>
concept SwizzleLike = detail::is_swizzle_v<T>;

}  // namespace spio
