/// Properties of CompoundIndex (against manual div/mod arithmetic) and range().
#include "dims.h"
#include "expect.h"

namespace {
using Idx = spio::CompoundIndex<spio::Extent<I, 3>, spio::Extent<J, 4>, spio::Extent<K, 5>>;
// Column-major through explicit strides: I fastest.
using Col = spio::CompoundIndex<spio::Extent<I, 3, 1>, spio::Extent<J, 4, 3>>;
// A size-1 extent ties in stride with its neighbour; only the outer one goes unreduced.
using Ones = spio::CompoundIndex<spio::Extent<I, 4>, spio::Extent<J, 1>, spio::Extent<L, 1>>;
// Two entries of one base: (K / 8: 4, K % 8: 8) -> logical K.
using Folded = spio::CompoundIndex<spio::Extent<K8, 4>, spio::Extent<K_MOD_8, 8>>;
}  // namespace

static_assert(Idx::size() == 60 && Col::size() == 12 && Folded::size() == 32);

int main() {
    for (int n = 0; n < 60; ++n) {
        const Idx idx(n);
        EXPECT_EQ(idx.get<I>(), I(n / 20));
        EXPECT_EQ(idx.get<J>(), J((n / 5) % 4));
        EXPECT_EQ(idx.get<K>(), K(n % 5));
        EXPECT_TRUE(idx.coordinates() == I(n / 20) + J((n / 5) % 4) + K(n % 5));
        EXPECT_EQ(idx.get(), n);
    }
    EXPECT_EQ(Idx(60).get<I>(), I(3));     // the coarsest entry is not reduced
    EXPECT_EQ(Col(12).get<J>(), J(4));
    for (int n = 0; n < 12; ++n) {
        EXPECT_EQ(Col(n).get<I>(), I(n % 3));
        EXPECT_EQ(Col(n).get<J>(), J(n / 3));
    }
    for (int n = 0; n < 32; ++n) {
        EXPECT_EQ(Folded(n).get<K8>(), K8(n / 8));
        EXPECT_EQ(Folded(n).get<K>(), K(n));                 // base dim: the sum of its entries
        EXPECT_EQ(Folded(n).coordinates().get<K>(), K(n));
    }
    for (int n = 0; n < 6; ++n) {
        EXPECT_EQ(Ones(n).get<I>(), I(n));                  // coarsest: not reduced
        EXPECT_EQ(Ones(n).get<J>(), J(0));
        EXPECT_EQ(Ones(n).get<L>(), L(0));
    }
    EXPECT_EQ(Idx(7u).get<K>(), K(2));                       // unsigned (threadIdx.x) works

    // range over a dim.
    int count = 0;
    int sum = 0;
    for (auto k : spio::range(K(32))) {
        sum += k.get();
        ++count;
    }
    EXPECT_EQ(count, 32);
    EXPECT_EQ(sum, 31 * 32 / 2);
    count = 0;
    for (auto k : spio::range(K8(2), K8(5))) {
        EXPECT_TRUE(k >= K8(2) && k < K8(5));
        ++count;
    }
    EXPECT_EQ(count, 3);
    for (auto k : spio::range(K(5), K(2))) {                // empty
        (void)k;
        EXPECT_TRUE(false);
    }
    // range over a box is row-major and matches the compound index.
    int n = 0;
    for (auto c : spio::range(I(3) + J(4) + K(5))) {
        EXPECT_TRUE(c == Idx(n).coordinates());
        ++n;
    }
    EXPECT_EQ(n, 60);
    // range over a tile [begin, end).
    n = 0;
    for (auto c : spio::range(I(1) + J(2), I(3) + J(4))) {
        EXPECT_TRUE(c == I(1 + n / 2) + J(2 + n % 2));
        ++n;
    }
    EXPECT_EQ(n, 4);
    for (auto c : spio::range(I(3) + J(0))) {               // a zero extent: empty
        (void)c;
        EXPECT_TRUE(false);
    }
    return spio_test::report();
}
