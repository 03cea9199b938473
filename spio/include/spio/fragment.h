/// Typed tensor-core fragments: the registers of one thread's share of an mma.sync operand, with
/// each element's (row, col) given as typed dims.
///
/// mma.sync m16n8k16 / m16n8k8 multiply A (16 x K, K = 16 or 8) by B (K x 8) into C (16 x 8,
/// fp32). Each of a warp's 32 threads holds a fixed subset of every matrix; the PTX ISA fixes
/// which one. With g = lane / 4 and t = lane % 4 (element e of the thread, e = 2 * reg + half):
///
///   MmaA<T, 16>  8 elements, 4 regs   row = g + 8 * (reg % 2)    col = 2t + half + 8 * (reg / 2)
///   MmaA<T, 8>   4 elements, 2 regs   row = g + 8 * reg          col = 2t + half
///   MmaB<T, 16>  4 elements, 2 regs   row = 2t + half + 8 * reg  col = g          (row is k)
///   MmaB<T, 8>   2 elements, 1 reg    row = 2t + half            col = g
///   MmaC         4 elements (fp32)    row = g + 8 * (e / 2)      col = 2t + e % 2
///
/// Row and Col are the dims that index the fragment (typically the kernel's M/K/N dims); they
/// default to int. mma(c, a, b) checks at compile time that the dims agree (A's Col is B's Row,
/// and so on), so an operand swap is a compile error, not a wrong answer.
///
/// Example (a 16x8 output tile, fp32 accumulate, epilogue by meaning):
///     spio::MmaA<__half, 16, I, K> a;   spio::MmaB<__half, 16, K, J> b;   spio::MmaC<I, J> c;
///     c.fill(0.0f);
///     a.load(a_smem[a.ldmatrix_row() + a.ldmatrix_col()].get());      // K contiguous
///     b.load_trans(b_smem[b.ldmatrix_trans_row() + b.ldmatrix_trans_col()].get());  // J contig.
///     spio::mma(c, a, b);
///     c.for_each([&](I i, J j, float v) { *out[i0 + i][j0 + j] = v; });
#pragma once

#include "spio/device.h"
#include "spio/ldmatrix.h"
#include "spio/mma.h"

#if SPIO_GPU_BLOCKS
namespace spio {

namespace detail {
template <typename A, typename B>
inline constexpr bool same_v = false;
template <typename A>
inline constexpr bool same_v<A, A> = true;

SPIO_DEVICE int group_of(int lane) { return lane >> 2; }        // g: row (A, C) or col (B)
SPIO_DEVICE int thread_in_group(int lane) { return lane & 3; }  // t: pair index

/// True unless D is a dim with a stride other than 1 (a fold).
template <typename D>
SPIO_HOST_DEVICE constexpr bool unit_stride() {
    if constexpr (requires { D::stride; }) {
        return D::stride == 1;
    } else {
        return true;
    }
}
}  // namespace detail

/// A type that can index a fragment: an int or a spio dim, constructible from an element offset.
/// Fragments also require stride 1 (a base dim such as I, or Module<I, n, 1>; not a fold), since
/// fragment coordinates count elements, and say so in a static_assert.
template <typename D>
concept FragmentIndex = requires { D(0); };

/// Shared storage and element access of the 16-bit operand fragments (A and B).
///
/// Template parameters:
///   T      __half or __nv_bfloat16
///   Regs   32-bit registers per thread (2 elements each)
template <typename T, int Regs>
struct OperandRegs {
    static_assert(detail::is_mma_input_v<T>,
                  "spio::MmaA/MmaB<T>: T must be __half or __nv_bfloat16; convert the operand");
    using element_type = T;
    static constexpr int regs = Regs;
    static constexpr int elements = 2 * Regs;

    unsigned reg[Regs];

    /// The raw registers, as mma_m16n8k16 / mma_m16n8k8 / ldmatrix take them.
    SPIO_DEVICE unsigned (&raw())[Regs] { return reg; }
    SPIO_DEVICE const unsigned (&raw() const)[Regs] { return reg; }

    /// Element e of this thread, e in [0, elements).
    SPIO_DEVICE T get(int e) const { return reinterpret_cast<const T*>(reg)[e]; }
    SPIO_DEVICE void set(int e, T v) { reinterpret_cast<T*>(reg)[e] = v; }

    /// Sets every element to v.
    SPIO_DEVICE void fill(T v) {
#pragma unroll
        for (int e = 0; e < elements; ++e) set(e, v);
    }
};

/// The A operand of mma.sync m16n8k{K}: a 16 x K tile (rows Row, cols Col = the reduction dim).
///
/// Template parameters:
///   T     __half or __nv_bfloat16
///   K     16 (m16n8k16, 4 registers) or 8 (m16n8k8, 2 registers)
///   Row   the dim of the 16 rows (M)
///   Col   the dim of the K columns (the reduction dim)
template <typename T, int K, FragmentIndex Row = int, FragmentIndex Col = int>
struct MmaA : OperandRegs<T, K / 4> {
    static_assert(detail::unit_stride<Row>() && detail::unit_stride<Col>(),
                  "spio::MmaA<T, K, Row, Col>: Row and Col must have stride 1 (fragment "
                  "coordinates count elements); use the base dim, not a fold");
    static_assert(K == 16 || K == 8,
                  "spio::MmaA<T, K>: K must be 16 (m16n8k16) or 8 (m16n8k8); split larger K into "
                  "several fragments");
    using row_type = Row;
    using col_type = Col;
    static constexpr int k = K;
    static constexpr int rows = 16;
    static constexpr int cols = K;

    /// Row of element e of the thread in lane `lane`.
    SPIO_DEVICE static Row row(int e, int lane = lane_id()) {
        const int reg = e / 2;
        return Row(detail::group_of(lane) + 8 * (reg % 2));
    }
    /// Column (reduction index) of element e of the thread in lane `lane`.
    SPIO_DEVICE static Col col(int e, int lane = lane_id()) {
        const int reg = e / 2;
        return Col(2 * detail::thread_in_group(lane) + e % 2 + 8 * (reg / 2));
    }

    /// Row whose address this lane passes to load(): storage with Col contiguous (row-major A).
    SPIO_DEVICE static Row ldmatrix_row(int lane = lane_id()) { return Row(lane % 16); }
    /// Column of the address this lane passes to load().
    SPIO_DEVICE static Col ldmatrix_col(int lane = lane_id()) {
        return Col(K == 16 ? (lane / 16) * 8 : 0);
    }
    /// Row of the address this lane passes to load_trans(): storage with Row contiguous.
    SPIO_DEVICE static Row ldmatrix_trans_row(int lane = lane_id()) {
        return Row(((lane / 8) % 2) * 8);
    }
    /// Column of the address this lane passes to load_trans().
    SPIO_DEVICE static Col ldmatrix_trans_col(int lane = lane_id()) {
        return Col(K == 16 ? (lane % 8) + ((lane / 16) % 2) * 8 : lane % 8);
    }

    /// Loads the fragment with ldmatrix from Col-contiguous shared memory. Warp-wide.
    ///
    /// Parameters:
    ///   lane_ptr   the address of element (ldmatrix_row(), ldmatrix_col()), 16-byte aligned
    SPIO_DEVICE void load(const void* lane_ptr) {
        if constexpr (K == 16) ldmatrix_x4(this->reg, lane_ptr);
        else ldmatrix_x2(this->reg, lane_ptr);
    }
    /// Loads the fragment with ldmatrix.trans from Row-contiguous shared memory. Warp-wide.
    ///
    /// Parameters:
    ///   lane_ptr   the address of element (ldmatrix_trans_row(), ldmatrix_trans_col())
    SPIO_DEVICE void load_trans(const void* lane_ptr) {
        if constexpr (K == 16) ldmatrix_x4_trans(this->reg, lane_ptr);
        else ldmatrix_x2_trans(this->reg, lane_ptr);
    }

    /// Calls f(Row, Col, T) for each of this thread's elements.
    template <typename F>
    SPIO_DEVICE void for_each(F&& f) const {
#pragma unroll
        for (int e = 0; e < this->elements; ++e) f(row(e), col(e), this->get(e));
    }
};

/// The B operand of mma.sync m16n8k{K}: a K x 8 tile (rows Row = the reduction dim, cols Col).
///
/// Template parameters:
///   T     __half or __nv_bfloat16
///   K     16 (m16n8k16, 2 registers) or 8 (m16n8k8, 1 register)
///   Row   the dim of the K rows (the reduction dim)
///   Col   the dim of the 8 columns (N)
template <typename T, int K, FragmentIndex Row = int, FragmentIndex Col = int>
struct MmaB : OperandRegs<T, K / 8> {
    static_assert(detail::unit_stride<Row>() && detail::unit_stride<Col>(),
                  "spio::MmaB<T, K, Row, Col>: Row and Col must have stride 1 (fragment "
                  "coordinates count elements); use the base dim, not a fold");
    static_assert(K == 16 || K == 8,
                  "spio::MmaB<T, K>: K must be 16 (m16n8k16) or 8 (m16n8k8); split larger K into "
                  "several fragments");
    using row_type = Row;
    using col_type = Col;
    static constexpr int k = K;
    static constexpr int rows = K;
    static constexpr int cols = 8;

    /// Row (reduction index) of element e of the thread in lane `lane`.
    SPIO_DEVICE static Row row(int e, int lane = lane_id()) {
        return Row(2 * detail::thread_in_group(lane) + e % 2 + 8 * (e / 2));
    }
    /// Column of element e of the thread in lane `lane`.
    SPIO_DEVICE static Col col(int /*e*/, int lane = lane_id()) {
        return Col(detail::group_of(lane));
    }

    /// Row of the address this lane passes to load(): storage with Row contiguous ([n][k]).
    SPIO_DEVICE static Row ldmatrix_row(int lane = lane_id()) {
        return Row(K == 16 ? ((lane / 8) % 2) * 8 : 0);
    }
    /// Column of the address this lane passes to load().
    SPIO_DEVICE static Col ldmatrix_col(int lane = lane_id()) { return Col(lane % 8); }
    /// Row of the address this lane passes to load_trans(): storage with Col contiguous ([k][n]).
    SPIO_DEVICE static Row ldmatrix_trans_row(int lane = lane_id()) {
        return Row(K == 16 ? lane % 16 : lane % 8);
    }
    /// Column of the address this lane passes to load_trans().
    SPIO_DEVICE static Col ldmatrix_trans_col(int /*lane*/ = 0) { return Col(0); }

    /// Loads the fragment with ldmatrix from Row-contiguous shared memory. Warp-wide.
    SPIO_DEVICE void load(const void* lane_ptr) {
        if constexpr (K == 16) ldmatrix_x2(this->reg, lane_ptr);
        else ldmatrix_x1(this->reg, lane_ptr);
    }
    /// Loads the fragment with ldmatrix.trans from Col-contiguous shared memory. Warp-wide.
    SPIO_DEVICE void load_trans(const void* lane_ptr) {
        if constexpr (K == 16) ldmatrix_x2_trans(this->reg, lane_ptr);
        else ldmatrix_x1_trans(this->reg, lane_ptr);
    }

    /// Calls f(Row, Col, T) for each of this thread's elements.
    template <typename F>
    SPIO_DEVICE void for_each(F&& f) const {
#pragma unroll
        for (int e = 0; e < this->elements; ++e) f(row(e), col(e), this->get(e));
    }
};

/// The fp32 accumulator C/D of mma.sync m16n8k16 and m16n8k8: a 16 x 8 tile.
///
/// Template parameters:
///   Row   the dim of the 16 rows (M)
///   Col   the dim of the 8 columns (N)
template <FragmentIndex Row = int, FragmentIndex Col = int>
struct MmaC {
    static_assert(detail::unit_stride<Row>() && detail::unit_stride<Col>(),
                  "spio::MmaC<Row, Col>: Row and Col must have stride 1 (fragment coordinates "
                  "count elements); use the base dim, not a fold");
    using row_type = Row;
    using col_type = Col;
    static constexpr int rows = 16;
    static constexpr int cols = 8;
    static constexpr int elements = 4;

    float reg[4];

    /// The raw accumulators, as mma_m16n8k16 / mma_m16n8k8 take them.
    SPIO_DEVICE float (&raw())[4] { return reg; }
    SPIO_DEVICE const float (&raw() const)[4] { return reg; }

    SPIO_DEVICE float get(int e) const { return reg[e]; }
    SPIO_DEVICE void set(int e, float v) { reg[e] = v; }
    SPIO_DEVICE float& operator[](int e) { return reg[e]; }
    SPIO_DEVICE float operator[](int e) const { return reg[e]; }

    /// Sets every accumulator to v.
    SPIO_DEVICE void fill(float v) {
#pragma unroll
        for (int e = 0; e < 4; ++e) reg[e] = v;
    }

    /// Row of element e of the thread in lane `lane`.
    SPIO_DEVICE static Row row(int e, int lane = lane_id()) {
        return Row(detail::group_of(lane) + 8 * (e / 2));
    }
    /// Column of element e of the thread in lane `lane`.
    SPIO_DEVICE static Col col(int e, int lane = lane_id()) {
        return Col(2 * detail::thread_in_group(lane) + e % 2);
    }

    /// Elements (2p, 2p + 1), p in [0, 2): row row(2p), columns col(0) and col(0) + 1.
    SPIO_DEVICE float2 pair(int p) const { return make_float2(reg[2 * p], reg[2 * p + 1]); }

    /// Calls f(Row, Col, float) for each of this thread's elements.
    template <typename F>
    SPIO_DEVICE void for_each(F&& f) const {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(row(e), col(e), reg[e]);
    }
    /// Calls f(Row, Col, float&) for each of this thread's elements (in-place epilogues).
    template <typename F>
    SPIO_DEVICE void for_each_mut(F&& f) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(row(e), col(e), reg[e]);
    }
};

/// m16n8k16 aliases.
template <typename T, FragmentIndex Row = int, FragmentIndex Col = int>
using MmaA_m16n8k16 = MmaA<T, 16, Row, Col>;
template <typename T, FragmentIndex Row = int, FragmentIndex Col = int>
using MmaB_m16n8k16 = MmaB<T, 16, Row, Col>;
/// m16n8k8 aliases.
template <typename T, FragmentIndex Row = int, FragmentIndex Col = int>
using MmaA_m16n8k8 = MmaA<T, 8, Row, Col>;
template <typename T, FragmentIndex Row = int, FragmentIndex Col = int>
using MmaB_m16n8k8 = MmaB<T, 8, Row, Col>;

/// c += a * b on the tensor cores (m16n8k16 or m16n8k8 by the fragments' K). Warp-wide.
///
/// The fragments' dims must agree: A is (M, K), B is (K, N), C is (M, N).
template <typename T, int K, typename M, typename KA, typename KB, typename N, typename MC,
          typename NC>
SPIO_DEVICE void mma(MmaC<MC, NC>& c, const MmaA<T, K, M, KA>& a, const MmaB<T, K, KB, N>& b) {
    // Preconditions
    static_assert(detail::same_v<KA, KB>,
                  "spio::mma(c, a, b): A's column dim and B's row dim must be the same reduction "
                  "dim; check the operand order and the fragments' template dims");
    static_assert(detail::same_v<M, MC>,
                  "spio::mma(c, a, b): A's row dim must be C's row dim; check the operand order");
    static_assert(detail::same_v<N, NC>,
                  "spio::mma(c, a, b): B's column dim must be C's column dim; check the operand "
                  "order");
    if constexpr (K == 16) mma_m16n8k16<T>(c.reg, a.reg, b.reg);
    else mma_m16n8k8<T>(c.reg, a.reg, b.reg[0]);
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
