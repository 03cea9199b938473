/// Properties of Tensor and Cursor: manual offset arithmetic, subscript order invariance,
/// projection, carry across folds, negative steps, padding, sizes and extents.
#include "dims.h"
#include "expect.h"

namespace {

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

float buf[4096];

long off(const float* p) { return p - buf; }

// Row-major (I: 5, K: 7), strides left to the library.
using X = spio::Tensor<float, spio::Extent<I, 5>, spio::Extent<K, 7>>;
// Padded rows: (I: 3, J: 4) with row stride 10.
using P = spio::Tensor<float, spio::Extent<I, 3, 10>, spio::Extent<J, 4, 1>>;
// Folded layout (K / 8: 4, I: 3, K % 8: 8) accepting logical K.
using A = spio::Tensor<float, spio::Extent<K8, 4, 24>, spio::Extent<I, 3, 8>,
                       spio::Extent<K_MOD_8, 8, 1>>;
// Three-level fold (K / 16: 2, K / 4 % 4: 4, K % 4: 4), non-power-of-two-free but nested.
using F = spio::Tensor<float, spio::Extent<K16, 2, 16>, spio::Extent<spio::Module<K, 4, 4>, 4, 4>,
                       spio::Extent<spio::Module<K, 4>, 4, 1>>;
// A tensor whose only K extent is a fold (like NHWC with C8 of 16-byte vectors).
using V = spio::Tensor<float, spio::Extent<I, 3, 4>, spio::Extent<K8, 4, 1>>;

static_assert(X::storage_size() == 35 && P::storage_size() == 30 && A::storage_size() == 96);
static_assert(X::size<I>() == I(5) && X::size<K>() == K(7));
static_assert(A::size<K8>() == K8(4) && A::size<K>() == K(32) && A::size<K_MOD_8>() == K_MOD_8(8));
static_assert(A::extents() == K(32) + I(3));
static_assert(V::extents() == I(3) + K8(4));
static_assert(X::storage_bytes() == 35 * static_cast<int>(sizeof(float)));

void row_major_and_projection() {
    auto x = X(buf);
    for (int i = 0; i < 5; ++i) {
        for (int k = 0; k < 7; ++k) {
            EXPECT_EQ(off(x[I(i)][K(k)].get()), i * 7 + k);
            EXPECT_TRUE(x[I(i)][K(k)] == x[K(k)][I(i)]);          // position-free
            EXPECT_TRUE(x[I(i)][K(k)] == x[I(i) + K(k)]);         // coordinates subscript
            EXPECT_TRUE(x[I(i) + K(k) + L(i + k) + J(3)] == x[I(i)][K(k)]);  // projection
            auto cur = x[I(i)];
            cur.step(K(k));
            EXPECT_TRUE(cur == x[I(i)][K(k)]);                    // step == subscript
            EXPECT_EQ(off(x[I(i)][K8(1)].get()), i * 7 + 8);        // a fold of a plain dim
        }
    }
    auto p = P(buf);
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 4; ++j) {
            EXPECT_EQ(off(p[J(j)][I(i)].get()), i * 10 + j);
        }
    }
}

void folded_layout_carry() {
    auto a = A(buf);
    bool seen[96] = {};
    for (int k = 0; k < 32; ++k) {
        for (int i = 0; i < 3; ++i) {
            const long expected = (k / 8) * 24 + i * 8 + k % 8;
            EXPECT_EQ(off(a[K(k)][I(i)].get()), expected);
            EXPECT_TRUE(a[K8(k / 8)][K_MOD_8(k % 8)][I(i)] == a[K(k)][I(i)]);
            EXPECT_TRUE(a[K8(k / 8)][I(i)][K(k % 8)] == a[I(i) + K(k)]);
            seen[expected] = true;
            for (int d = -8; d < 9; ++d) {                        // carry and borrow
                EXPECT_TRUE(a[K(k + d)][I(i)][K(-d)] == a[K(k)][I(i)]);
            }
        }
        for (int k2 = 0; k + k2 < 32; ++k2) {
            EXPECT_TRUE(a[K(k)][K(k2)] == a[K(k + k2)]);          // a[K(7)][K(5)] == a[K(12)]
            auto cur = a[K(k)];
            cur.step(K(k2));
            EXPECT_TRUE(cur == a[K(k + k2)]);
        }
    }
    int covered = 0;
    for (bool s : seen) covered += s ? 1 : 0;
    EXPECT_EQ(covered, 96);                                       // a bijection onto storage
    // The coarsest extent is not reduced: stepping past the end moves like a pointer.
    EXPECT_EQ(off(a[K(32)].get()), 4 * 24);
    EXPECT_EQ(off(a[K(-1)].get()), -24 + 7);                     // floor semantics below zero
}

void nested_folds() {
    auto f = F(buf);
    for (int k = 0; k < 32; ++k) {
        EXPECT_EQ(off(f[K(k)].get()), (k / 16) * 16 + ((k / 4) % 4) * 4 + k % 4);
        EXPECT_TRUE(f[K4(k / 4)][K(k % 4)] == f[K(k)]);
    }
}

void single_fold_extent() {
    auto v = V(buf);
    for (int i = 0; i < 3; ++i) {
        for (int k = -8; k < 40; ++k) {
            EXPECT_EQ(off(v[I(i)][K(k)].get()), i * 4 + floor_div(k, 8));  // floor to the vector
            EXPECT_TRUE(v[K(k)][K(5)] == v[K(k + 5)]);                       // carry into K8
            EXPECT_TRUE(v[K8(2)][K(k)] == v[K(k + 16)]);
        }
    }
}

void range_over_extents() {
    auto a = A(buf);
    int count = 0;
    bool seen[96] = {};
    for (auto c : spio::range(A::extents())) {
        EXPECT_TRUE(c < A::extents());
        seen[off(a[c].get())] = true;
        ++count;
    }
    EXPECT_EQ(count, 96);
    int covered = 0;
    for (bool s : seen) covered += s ? 1 : 0;
    EXPECT_EQ(covered, 96);
}

void loads_and_stores() {
    for (int n = 0; n < 35; ++n) buf[n] = static_cast<float>(n);
    auto x = X(buf);
    EXPECT_TRUE(x[I(2)][K(3)].load() == 17.0f);
    x[I(2)][K(3)].store(-1.0f);
    EXPECT_TRUE(buf[17] == -1.0f);
    *x[I(0)][K(1)] = 5.0f;
    EXPECT_TRUE(buf[1] == 5.0f);
}

}  // namespace

int main() {
    row_major_and_projection();
    folded_layout_carry();
    nested_folds();
    single_fold_extent();
    range_over_extents();
    loads_and_stores();
    return spio_test::report();
}
