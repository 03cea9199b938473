/// Properties of the XOR swizzle: bijection, per-row permutation, the documented formula, and
/// conflict-free 16-byte slots for the 8 rows an ldmatrix reads at one logical column.
#include "dims.h"
#include "expect.h"

namespace {

struct M : spio::Dim<M> { using spio::Dim<M>::Dim; };
struct N : spio::Dim<N> { using spio::Dim<N>::Dim; };

float buf[8192];
long off(const float* p) { return p - buf; }

// Elements stand in for 16-byte chunks: offset % 8 is the 16-byte slot in a 128-byte line.
// 128-byte rows: (M: 64, K8: 8) with Xor<M, K8, 3>.
using S128 = spio::Tensor<float, spio::Extent<M, 64, 8>, spio::Extent<K8, 8, 1>, spio::Xor<M, K8, 3>>;
// 64-byte rows: (N: 32, K8: 4) with Xor<N, K8, 2, 1>.
using S64 = spio::Tensor<float, spio::Extent<N, 32, 4>, spio::Extent<K8, 4, 1>,
                         spio::Xor<N, K8, 2, 1>>;
// Element-level view: (M: 16, K8: 8, K % 8: 8), K8 swizzled, K % 8 linear.
using SH = spio::Tensor<float, spio::Extent<M, 16, 64>, spio::Extent<K8, 8, 8>,
                        spio::Extent<K_MOD_8, 8, 1>, spio::Xor<M, K8, 3>>;
// The checkerboard (1 bit) with the swizzle listed before the extents.
using CB = spio::Tensor<float, spio::Checkerboard<M, K8>, spio::Extent<M, 4, 2>, spio::Extent<K8, 2, 1>>;

template <class T, class RowDim, class ColDim>
void check_bijection(int rows, int cols, int row_stride) {
    auto t = T(buf);
    bool seen[8192] = {};
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
            const long o = off(t[RowDim(r)][ColDim(c)].get());
            EXPECT_TRUE(o >= r * row_stride && o < (r + 1) * row_stride);  // stays in its row
            EXPECT_TRUE(!seen[o]);                                          // injective
            seen[o] = true;
        }
    }
    int covered = 0;
    for (int o = 0; o < rows * row_stride; ++o) covered += seen[o] ? 1 : 0;
    EXPECT_EQ(covered, rows * cols);
}

}  // namespace

static_assert(spio::Xor<M, K8, 3>::apply(2, 5) == 7);
static_assert(spio::Xor<N, K8, 2, 1>::apply(1, 6) == 2);

int main() {
    check_bijection<S128, M, K8>(64, 8, 8);
    check_bijection<S64, N, K8>(32, 4, 4);
    check_bijection<CB, M, K8>(4, 2, 2);
    auto s = S128(buf);
    for (int r = 0; r < 64; ++r) {
        for (int c = 0; c < 8; ++c) {
            EXPECT_EQ(off(s[M(r)][K8(c)].get()), r * 8 + (c ^ (r & 7)));
            EXPECT_TRUE(s[K8(c)][M(r)] == s[M(r) + K8(c)]);   // order invariance holds too
        }
    }
    // ldmatrix: 8 consecutive rows at one logical column hit 8 distinct 16-byte slots.
    for (int r0 = 0; r0 < 64; r0 += 8) {
        for (int c = 0; c < 8; ++c) {
            unsigned slots = 0;
            for (int r = r0; r < r0 + 8; ++r) slots |= 1u << (off(s[M(r)][K8(c)].get()) % 8);
            EXPECT_EQ(static_cast<long long>(slots), 0xffLL);
        }
    }
    auto s64 = S64(buf);
    for (int r0 = 0; r0 < 32; r0 += 8) {
        for (int c = 0; c < 4; ++c) {
            unsigned slots = 0;
            for (int r = r0; r < r0 + 8; ++r) slots |= 1u << (off(s64[N(r)][K8(c)].get()) % 8);
            EXPECT_EQ(static_cast<long long>(slots), 0xffLL);
        }
    }
    auto h = SH(buf);
    for (int m = 0; m < 16; ++m) {
        for (int k = 0; k < 64; ++k) {
            EXPECT_EQ(off(h[M(m)][K(k)].get()), m * 64 + ((k / 8) ^ (m & 7)) * 8 + k % 8);
            EXPECT_TRUE(h[M(m)][K8(k / 8)][K(k % 8)] == h[M(m)][K(k)]);   // carry before swizzle
        }
    }
    check_bijection<SH, M, K>(16, 64, 64);
    return spio_test::report();
}
