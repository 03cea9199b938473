/// Properties of Dim, Fold and Module over small exhaustive domains.
#include "dims.h"
#include "expect.h"

namespace {

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int floor_mod(int a, int b) { return a - b * floor_div(a, b); }

template <int S>
void fold_round_trip(int v) {
    const K k(v);
    const auto f = k.template fold<S>();
    EXPECT_EQ(f.get(), floor_div(v, S));
    EXPECT_TRUE(f.unfold() <= k);                       // Post: unfold() <= k < unfold() + S
    EXPECT_TRUE(k < f.unfold() + K(S));
    EXPECT_EQ(f.unfold() + K(floor_mod(v, S)), k);      // fold/unfold round trip
    EXPECT_EQ(k.template module<S>().get(), floor_mod(v, S));
    EXPECT_EQ(f + k.template module<S>(), k);           // quotient + remainder == value
    using KS = spio::Fold<K, S>;
    EXPECT_EQ(k.template to<KS>(), f);
}

}  // namespace

// Folds of folds normalize; Fold<K, 1> is K; modules of folds normalize.
static_assert(spio::detail::is_same_v<spio::Fold<K8, 2>, K16>);
static_assert(spio::detail::is_same_v<spio::Fold<K, 1>, K>);
static_assert(spio::detail::is_same_v<spio::Module<K8, 4>, spio::Module<K, 4, 8>>);
static_assert(spio::detail::is_same_v<decltype(K8(3) + K(4)), K>);
static_assert(spio::detail::is_same_v<decltype(K8(3) + K8(4)), K8>);
static_assert(spio::detail::is_same_v<decltype(K8(1) + K2(1)), K2>);
static_assert(spio::detail::is_same_v<decltype(I(1) + J(1)), spio::Coordinates<I, J>>);
static_assert(spio::DimLike<K> && spio::DimLike<K8> && spio::DimLike<K_MOD_8>);
static_assert(!spio::DimLike<int>);
// The architecture's examples, at compile time.
static_assert(K(37).get() == 37 && K(37) + K(1) == K(38));
static_assert(K(37) * 2 == K(74) && K(37) / 2 == K(18) && K(37) % 2 == K(1));
static_assert(K8(3) == K(24) && K8(3) + K(4) == K(28));
static_assert(K(37).fold<8>() == K8(4) && K8(4).unfold() == K(32));
static_assert(K_MOD_8(5) + K8(4) == K(37));

int main() {
    for (int v = -64; v < 64; ++v) {
        fold_round_trip<1>(v);
        fold_round_trip<2>(v);
        fold_round_trip<3>(v);
        fold_round_trip<8>(v);
        fold_round_trip<16>(v);
        // Folds of folds compose: (v / 8) / 2 == v / 16.
        EXPECT_EQ(K(v).fold<8>().fold<2>(), K(v).fold<16>());
    }
    for (int a = -12; a < 12; ++a) {
        for (int b = -12; b < 12; ++b) {
            EXPECT_EQ(K(a) + K(b), K(a + b));
            EXPECT_EQ(K(a) - K(b), K(a - b));
            EXPECT_EQ(K8(a) + K(b), K(8 * a + b));
            EXPECT_EQ(K8(a) - K(b), K(8 * a - b));
            EXPECT_EQ((spio::Fold<K, 4>(a) + spio::Fold<K, 6>(b)).get(), 2 * a + 3 * b);
            EXPECT_EQ(K(a) < K(b), a < b);
            EXPECT_EQ(K(a) <= K(b), a <= b);
            EXPECT_EQ(K(a) > K(b), a > b);
            EXPECT_EQ(K(a) >= K(b), a >= b);
            EXPECT_EQ(K(a) == K(b), a == b);
            EXPECT_EQ(K(a) != K(b), a != b);
            EXPECT_EQ(K8(a) < K(b), 8 * a < b);      // mixed folds compare in base units
            EXPECT_EQ(K8(a) == K(b), 8 * a == b);
            EXPECT_EQ(K(b) >= K4(a), b >= 4 * a);
            K acc(a);
            acc += K(b);
            EXPECT_EQ(acc, K(a + b));
            acc -= K(b);
            EXPECT_EQ(acc, K(a));
        }
        EXPECT_EQ(-K(a), K(-a));
        EXPECT_EQ(3 * K8(a), K8(3 * a));
        EXPECT_EQ(K8(a).to<K>(), K(8 * a));
        EXPECT_EQ(K8(a).to<K16>(), K16(floor_div(a, 2)));
        using K8_MOD_4 = spio::Module<K, 4, 8>;
        EXPECT_EQ(K8(a).to<K8_MOD_4>().get(), floor_mod(a, 4));
    }
    return spio_test::report();
}
