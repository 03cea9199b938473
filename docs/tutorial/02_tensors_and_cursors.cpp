/// Lesson 2: tensors and cursors.
///
/// A tensor type lists its dimensions with sizes and strides; the strides are part of the type,
/// so index arithmetic is resolved at compile time. Subscripts name dimensions, so their order
/// does not matter. A subscripted tensor is a cursor: a typed pointer you can move by dims.

/*@spio
N = Dim()
C = Dim()
X = Tensor((N(4), C(8)), dtype.float)                   # row-major: strides N 8, C 1
P = Tensor((N(4), C(8)), dtype.float, strides={N: 10})  # rows padded to 10 elements
@spio*/

static_assert(X::storage_size() == 32 && P::storage_size() == 40);
static_assert(X::size<N>() == N(4) && X::size<C>() == C(8));
static_assert(X::extents() == N(4) + C(8));

/// Scales one row of any tensor with N and C dims; the layout comes from the type.
template <class T>
SPIO_HOST_DEVICE void scale_row(T t, N n, float s) {
    auto cur = t[n];                        // a cursor at (n, 0)
    for (auto c : spio::range(T::template size<C>())) {
        cur[c].store(cur[c].load() * s);    // cur[c] is a moved copy; cur stays put
    }
}

#if defined(__CUDACC__)
extern "C" __global__ void scale_rows(float* x_ptr) {
    scale_row(X(x_ptr), N(threadIdx.x), 2.0f);
}
#endif

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    float buf[40] = {};
    auto x = X(buf);
    // Position-free subscripts: all three name the element at n = 2, c = 3 (offset 2 * 8 + 3).
    if (x[N(2)][C(3)].get() != buf + 19 || !(x[C(3)][N(2)] == x[N(2) + C(3)])) {
        std::printf("02: subscripts disagree\n");
        return 1;
    }
    // The same code on a padded layout: only the type changed.
    auto p = P(buf);
    if (p[N(2)][C(3)].get() != buf + 23) {
        std::printf("02: padded offset wrong\n");
        return 1;
    }
    // A cursor moves in place with step(); *cur is the element.
    auto cur = x[N(1)];
    for (int c = 0; c < 8; ++c) {
        *cur = static_cast<float>(c);
        cur.step(C(1));
    }
    scale_row(x, N(1), 2.0f);
    for (auto c : spio::range(C(8))) {
        if (*x[N(1)][c] != 2.0f * static_cast<float>(c.get())) {
            std::printf("02: row 1 not scaled at c = %d\n", c.get());
            return 1;
        }
    }
    return 0;
}
#endif
