/// Lesson 3: folding.
///
/// `K / 8` (a fold) counts K in steps of 8 and `K % 8` (a module) is the remainder; both are
/// dimensions with base K and convert to K. A tiled layout such as (K / 8, I, K % 8) stores K in
/// two pieces, yet accepts a logical K: subscripts accumulate in K and are split at dereference,
/// carrying across the fold boundary.

/*@spio
I = Dim()
K = Dim()
K8 = K / 8
A = Tensor(((K / 8)(4), I(3), (K % 8)(8)), dtype.float)   # strides K8 24, I 8, K%8 1
@spio*/

using K_MOD_8 = spio::Module<K, 8>;   // the generator's spelling of K % 8

// A fold value v means K(8 v); mixing a fold with its base gives the base.
static_assert(K8(3) == K(24) && K8(3) + K(4) == K(28));
static_assert(K(37).fold<8>() == K8(4) && K8(4).unfold() == K(32));
static_assert(K(37).module<8>() == K_MOD_8(5));
static_assert(K(37).fold<8>() + K(37).module<8>() == K(37));   // quotient + remainder
// Folds of folds multiply: (K / 8) / 2 is K / 16.
static_assert(spio::detail::is_same_v<spio::Fold<K8, 2>, spio::Fold<K, 16>>);

// The folded tensor knows its logical K extent.
static_assert(A::size<K8>() == K8(4) && A::size<K>() == K(32));
static_assert(A::extents() == K(32) + I(3));

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    float buf[A::storage_size()] = {};
    auto a = A(buf);
    // a[K(12)] is K8 1, K % 8 4: offset 1 * 24 + 4.
    if (a[K(12)].get() != buf + 28) {
        std::printf("03: a[K(12)] at offset %ld\n", static_cast<long>(a[K(12)].get() - buf));
        return 1;
    }
    // Carry: 7 + 5 crosses the fold boundary at 8.
    if (!(a[K(7)][K(5)] == a[K(12)]) || !(a[K8(1)][K(4)] == a[K(12)])) {
        std::printf("03: carry across the fold failed\n");
        return 1;
    }
    // Walking K one step at a time visits the folded storage in the right order.
    for (auto i : spio::range(I(3))) {
        auto cur = a[i];
        for (int k = 0; k < 32; ++k) {
            if (cur.get() != buf + (k / 8) * 24 + i.get() * 8 + k % 8) {
                std::printf("03: step mismatch at k = %d\n", k);
                return 1;
            }
            cur.step(K(1));
        }
    }
    return 0;
}
#endif
