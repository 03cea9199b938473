/// Properties of Coordinates: construction, get, merge by base, ordering over matching dims.
#include "dims.h"
#include "expect.h"

static_assert(I(3) + J(4) + K(5) == spio::make_coordinates(I(3), J(4), K(5)));
static_assert((I(3) + J(4)).get<J>() == J(4));

int main() {
    for (int a = -4; a < 5; ++a) {
        for (int b = -4; b < 5; ++b) {
            const auto c = I(a) + J(b);
            EXPECT_TRUE(c == spio::make_coordinates(I(a), J(b)));
            EXPECT_TRUE(c == J(b) + I(a));                     // order of entries is irrelevant
            EXPECT_EQ(c.get<I>(), I(a));
            EXPECT_EQ(c.get<J>(), J(b));
            EXPECT_EQ((c + J(1)).get<J>(), J(b + 1));          // adds to the matching entry only
            EXPECT_EQ((c + J(1)).get<I>(), I(a));
            EXPECT_EQ((c + K(7)).get<K>(), K(7));              // appends a new base
            EXPECT_EQ((c + K8(a) + K(b)).get<K>(), K(8 * a + b));  // one base merges (carry)
            EXPECT_EQ((c + K8(a) + K(b)).get<K8>(), K(8 * a + b).fold<8>());
            EXPECT_TRUE(c - c == I(0) + J(0));
            EXPECT_TRUE(-c == I(-a) + J(-b));
            EXPECT_TRUE((c + c) == I(2 * a) + J(2 * b));
            for (int x = -4; x < 5; ++x) {
                for (int y = -4; y < 5; ++y) {
                    const auto d = I(x) + J(y);
                    EXPECT_EQ(c < d, a < x && b < y);          // every matching pair
                    EXPECT_EQ(c <= d, a <= x && b <= y);
                    EXPECT_EQ(c > d, a > x && b > y);
                    EXPECT_EQ(c >= d, a >= x && b >= y);
                    EXPECT_EQ(c == d, a == x && b == y);
                    // Foreign dims are ignored by ordering: only I is shared here.
                    EXPECT_EQ(c < I(x) + L(y), a < x);
                    EXPECT_EQ(c < I(x), a < x);
                    EXPECT_EQ(I(x) < c, x < a);
                }
            }
            EXPECT_TRUE(c < L(0));                             // nothing shared: vacuously true
        }
    }
    // for_each visits entries in insertion order.
    int sum = 0;
    int order = 0;
    (I(1) + J(2) + K(3)).for_each([&](auto d) { sum += d.get(); order = order * 10 + d.get(); });
    EXPECT_EQ(sum, 6);
    EXPECT_EQ(order, 123);
    return spio_test::report();
}
