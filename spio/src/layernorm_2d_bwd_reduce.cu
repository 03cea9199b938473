/// LayerNorm2d backward, second pass: dweight[c] = Σ_p dweight_part[p, c] and dbias[c] =
/// Σ_p dbias_part[p, c] over the `parts` per-CTA partial rows of layernorm_2d_bwd.
///
/// Tiling: blockIdx.x picks a COLUMN of COLS channels (LANES = COLS / 4 float4 vectors),
///   blockIdx.y the output (dweight, then dbias; only dbias when there is no weight).
///   THREAD = (SPLIT, LANE), LANE fastest: a warp load covers 32 / LANES consecutive partial rows
///   of the column (whole 32-byte sectors, 128-byte lines at COLS = 32).
/// Order (fixed by parts and the config alone, so the result is bitwise reproducible; no
///   atomics): thread `split` sums rows split, split + SPLITS, split + 2·SPLITS, ... in ascending
///   order; the 32 / LANES splits of a warp are added by an xor butterfly (offsets 16, 8, ...,
///   LANES); warp w's sum goes to shared memory; then thread j of the combine sums warps j,
///   j + 32 / LANES, ... in ascending order and a second butterfly adds those.
/// Traffic: reads parts·C·4 B per output once (from L2: the backward just wrote them), writes C
///   weights. Latency-bound (≈ 0.3–1 MB in all): the host picks the config from the real parts
///   count (layernorm_2d_reduce.reduce_config) so every thread has at most ~DEPTH loads, all
///   DEPTH of them in flight at once, and there are ~SM-count CTAs or more.
/// Pipeline: DEPTH independent vector loads per step, then their adds in row order; one barrier
///   between the per-warp sums and the combine.
/// Launch: on sm_90+ the host launches this kernel with programmatic dependent launch (PDL), so
///   it may start while layernorm_2d_bwd still runs; `griddepcontrol.wait` (first statement)
///   holds every thread until that grid has completed and its partials are visible. The
///   partials are read with ld.global.cg (L2, coherent), not the non-coherent __ldg path, whose
///   read-only-for-the-kernel's-lifetime rule an overlapping producer would break.
/// Assumes: partial rows of C fp32 contiguous, 16-byte aligned, C % 4 == 0; dweight/dbias hold C
///   elements of WEIGHT.
#include "spio/spio.h"

namespace {

constexpr int LANES = COLS / 4;             // float4 vectors per column row
constexpr int WARPS = THREADS / 32;
constexpr int ROWS_PER_WARP = 32 / LANES;   // splits (partial rows) one warp load covers

/// Four channels' running sums.
struct Sum4 {
    float v[4];
};

SPIO_DEVICE void add(Sum4& a, const Sum4& b) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a.v[i] += b.v[i];
}

SPIO_DEVICE Sum4 as_floats(const uint4& u) {
    return {{__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
             __uint_as_float(u.w)}};
}

/// Adds the values of the warp's lanes that hold the same channels (lane ≡ this lane mod
/// LANES), by xor offsets 16, 8, ..., LANES. Every such lane ends with the same bits (each step
/// adds the same two values; float addition is commutative). Call from all 32 lanes.
SPIO_DEVICE void warp_sum(Sum4& s) {
#pragma unroll
    for (int offset = 16; offset >= LANES; offset /= 2) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s.v[i] += __shfl_xor_sync(0xffffffffu, s.v[i], offset);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
layernorm_2d_bwd_reduce(float* dweight_part, float* dbias_part, WEIGHT* dweight, WEIGHT* dbias,
                        int parts) {
    // Preconditions
    static_assert(THREAD::size() == THREADS && THREADS % 32 == 0 && THREADS <= 1024,
                  "layernorm_2d_bwd_reduce: the CTA is whole warps of (SPLIT, LANE); fix THREADS");
    static_assert(COLS % 4 == 0 && 32 % LANES == 0 && CHANNELS % 4 == 0,
                  "layernorm_2d_bwd_reduce: columns and C are whole float4 vectors, a power-of-two "
                  "count of them per warp row; fix COLS");
    static_assert(HAS_WEIGHT || HAS_BIAS,
                  "layernorm_2d_bwd_reduce: nothing to reduce without weight or bias; skip the "
                  "launch");

    // ---- PDL: wait for layernorm_2d_bwd (a no-op without PDL or below sm_90)
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

    // ---- setup: which output, which channels, which partial rows
    __shared__ Sum4 smem_warps[WARPS][LANES];
    const bool bias_pass = !HAS_WEIGHT || blockIdx.y == 1;
    const PARTIALS partials(reinterpret_cast<uint4*>(bias_pass ? dbias_part : dweight_part));
    const OUT out(bias_pass ? dbias : dweight);
    const THREAD thread(threadIdx.x);
    const CV vec = COLUMN(static_cast<int>(blockIdx.x)) + thread.get<LANE>();
    const bool vec_ok = vec < CV(CHANNELS / 4);
    const PART rows(parts);

    // ---- main loop: this thread's partial rows in ascending order, DEPTH loads in flight
    Sum4 total = {{0.0f, 0.0f, 0.0f, 0.0f}};
    if (vec_ok) {
        for (PART p(thread.get<SPLIT>().get()); p < rows; p = p + PART(DEPTH * SPLITS)) {
            uint4 v[DEPTH];
#pragma unroll
            for (int u = 0; u < DEPTH; ++u) {
                const PART q = p + PART(u * SPLITS);
                v[u] = q < rows ? __ldcg(partials[q][vec].get()) : uint4{};
            }
#pragma unroll
            for (int u = 0; u < DEPTH; ++u) {
                if (p + PART(u * SPLITS) < rows) add(total, as_floats(v[u]));
            }
        }
    }

    // ---- epilogue: splits of a warp, then the warps, both in fixed orders
    warp_sum(total);
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    if (lane < LANES) smem_warps[warp][lane] = total;
    __syncthreads();
    // Every warp computes the combine (uniform control flow for the shuffles); warp 0 stores.
    Sum4 sum = {{0.0f, 0.0f, 0.0f, 0.0f}};
    for (int w = lane / LANES; w < WARPS; w += ROWS_PER_WARP) add(sum, smem_warps[w][lane % LANES]);
    warp_sum(sum);
    if (warp == 0 && lane < LANES && vec_ok) {
#pragma unroll
        for (int i = 0; i < 4; ++i) *out[C(vec.get() * 4 + i)].get() = static_cast<WEIGHT>(sum.v[i]);
    }
}
