/// Lesson 4: coordinates and projection.
///
/// Coordinates hold values of several dimensions. A tensor subscripted with coordinates uses the
/// dims it has and ignores the rest, so one "world" coordinate serves every tensor of a kernel:
/// the input uses (n, h, w, c), the bias only c, the per-pixel statistics (n, h, w).
/// Comparisons of coordinates test every shared dim, so `world < T::extents()` is a bounds check.

/*@spio
N = Dim()
H = Dim()
C = Dim()
X = Tensor((N(2), H(3), C(4)), dtype.float)
Bias = Tensor((C(4),), dtype.float)
Stats = Tensor((N(2), H(3)), dtype.float)
@spio*/

static_assert((N(1) + H(2) + C(3)).get<H>() == H(2));
static_assert(N(1) + H(2) < N(2) + H(3));            // every shared dim is smaller
static_assert(!(N(1) + H(3) < N(2) + H(3)));         // H is not
static_assert(N(1) + H(2) + C(9) < Stats::extents());  // C is not a dim of Stats: ignored

/// y = x + bias, and stats += x, all indexed by one world coordinate.
template <class World>
SPIO_HOST_DEVICE void visit(World world, X x, Bias bias, Stats stats) {
    if (world < X::extents()) {
        *x[world] += *bias[world];   // bias[world] projects away N and H
        *stats[world] += *x[world];  // stats[world] projects away C
    }
}

#if defined(__CUDACC__)
extern "C" __global__ void add_bias(float* x, float* bias, float* stats) {
    const auto world = N(blockIdx.x) + H(blockIdx.y) + C(threadIdx.x);
    visit(world, X(x), Bias(bias), Stats(stats));
}
#endif

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    float x[X::storage_size()];
    float bias[Bias::storage_size()] = {1, 2, 3, 4};
    float stats[Stats::storage_size()] = {};
    for (int i = 0; i < X::storage_size(); ++i) x[i] = 0.5f;
    for (auto world : spio::range(X::extents())) {   // every (n, h, c), row-major
        visit(world, X(x), Bias(bias), Stats(stats));
    }
    visit(N(0) + H(0) + C(4), X(x), Bias(bias), Stats(stats));   // out of bounds: skipped
    for (auto p : spio::range(Stats::extents())) {
        const float expected = 4 * 0.5f + (1 + 2 + 3 + 4);
        if (*Stats(stats)[p] != expected) {
            std::printf("04: stats at n=%d h=%d is %f\n", p.get<N>().get(), p.get<H>().get(),
                        *Stats(stats)[p]);
            return 1;
        }
    }
    return 0;
}
#endif
