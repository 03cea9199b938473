/// LayerNorm2d backward (layernorm_2d_bwd) over M = N·H·W channels_last rows of C, with
/// x̂ = (x − mean) · rstd and g = dy · weight (the forward and the shared helpers:
/// layernorm_2d.cu, layernorm_2d_common.h):
///   dx[r,c] = rstd · (g[r,c] − mean_c g − x̂[r,c] · mean_c(g · x̂)),
///   dweight_part[cta, c] = Σ_{rows of cta} dy · x̂,  dbias_part[cta, c] = Σ_{rows of cta} dy
///   (layernorm_2d_bwd_reduce.cu sums the per-CTA partials in a fixed order: no float atomics).
///
/// Tiling: as the forward: a CTA of ROWS_PER_BLOCK × THREADS_PER_ROW threads takes
///   ROWS_PER_BLOCK rows at a time and strides over row groups (grid ≤ resident CTAs); a row's
///   threads hold VECS_PER_THREAD vectors of VEC channels each.
/// Traffic per row: reads x, dy, mean, rstd and writes dx; weight re-read per row from L1; one
///   partial row of C fp32 per CTA and output. Bound: DRAM; targets ≥ 75% of copy bandwidth.
/// Pipeline: row sums by xor-shuffles (plus one shared-memory exchange for multi-warp rows).
///   With PREFETCH the next row group's x, dy, mean, rstd load into a second register buffer
///   before the current group's reductions. dweight/dbias accumulators live in shared memory
///   (ACC_SMEM) or registers (one row per CTA and C too large for 47 KiB), see below.
/// Assumes: C % VEC == 0; x, dy, dx, weight 16-byte aligned; rows contiguous (channels_last);
///   M·C < 2³² (32-bit offsets).
#include "layernorm_2d_common.h"

namespace {

/// acc[0..VEC) += v: one vector's fp32 accumulators in shared memory, 8-byte accesses (VEC is
/// even; acc is 8-byte aligned: C and the vector offsets are multiples of VEC).
SPIO_DEVICE void add_to(float* acc, const float (&v)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
        float2 a = reinterpret_cast<float2*>(acc)[j];
        a.x += v[2 * j], a.y += v[2 * j + 1];
        reinterpret_cast<float2*>(acc)[j] = a;
    }
}

/// Row blockIdx.x of `partials` = the sum of acc's ROWS_PER_BLOCK row slots, in slot order
/// (deterministic). acc is complete (a barrier separates its last update from this call).
SPIO_DEVICE void sum_row_slots(const COMBINE& acc, float* partials_ptr) {
    const PARTIALS partials(partials_ptr);
    const PART cta(static_cast<int>(blockIdx.x));
    for (C c(static_cast<int>(threadIdx.x)); c < C(CHANNELS); c = c + C(BLOCK_THREADS)) {
        float total = 0.0f;
        for (int r = 0; r < ROWS_PER_BLOCK; ++r) total += *acc[ROW_IN_GROUP(r)][c].get();
        *partials[cta][c].get() = total;
    }
}

/// Register accumulators (not ACC_SMEM, so ROWS_PER_BLOCK == 1): row blockIdx.x of `partials`.
/// (N is K; N = 1 only in the ACC_SMEM instantiation, which never calls it.)
template <int N, class Coords>
SPIO_DEVICE void write_partials(const float (&acc)[N][VEC], const Coords& thread, float* ptr) {
    const auto part = PARTIALS(ptr)[PART(static_cast<int>(blockIdx.x))];
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (!vector_in_row(thread, k)) continue;
#pragma unroll
        for (int i = 0; i < VEC; ++i) *part[thread + VEC_STEP(k)][C(i)].get() = acc[k][i];
    }
}

/// One row group's backward inputs in registers: this thread's vectors of x and dy, and the
/// row's mean and rstd (0 past the last row, where x = dy = 0 too).
struct Group { Raw x[K], dy[K]; float mu, rs; };

template <class Coords>
SPIO_DEVICE void load_group(const X& x, const X& dy, const STATS& mean, const STATS& rstd,
                            const Coords& at, ROW rows, Group& g) {
    load_row(x, at, rows, g.x);
    load_row(dy, at, rows, g.dy);
    const bool row_ok = at.template get<ROW>() < rows;
    g.mu = row_ok ? __ldg(mean[at].get()) : 0.0f;
    g.rs = row_ok ? __ldg(rstd[at].get()) : 0.0f;
}

}  // namespace

/// Accumulators of dweight/dbias: ACC_SMEM keeps them in shared memory, (ROW_IN_GROUP, C) fp32
/// per output, each element owned by the one thread whose vector covers it (no barrier until
/// the epilogue), which frees 2·K·VEC registers for occupancy; otherwise in registers.
constexpr int OUTPUTS = static_cast<int>(HAS_WEIGHT) + static_cast<int>(HAS_BIAS);
constexpr int ACC_FLOATS = ROWS_PER_BLOCK * CHANNELS;  // one output's accumulators (ACC_SMEM)
// At least 768 resident threads per SM (<= 80 registers): without it ptxas picks 64 registers
// and spills on sm_80, or ~96 (2 CTAs of 256 threads per SM) when told nothing.
constexpr int BWD_MIN_BLOCKS = BLOCK_THREADS <= 768 ? 768 / BLOCK_THREADS : 1;
static_assert(ACC_SMEM ? OUTPUTS > 0 : ROWS_PER_BLOCK == 1 || OUTPUTS == 0,
              "layernorm_2d_bwd: several rows per CTA accumulate in shared memory; regenerate");

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS, BWD_MIN_BLOCKS)
layernorm_2d_bwd(Raw* x_ptr, Raw* dy_ptr, float* mean_ptr, float* rstd_ptr, WEIGHT* weight_ptr,
                 Raw* dx_ptr, float* dweight_part, float* dbias_part, int m) {
    // PDL trigger (sm_90+): the reduce may be scheduled now; it waits for this grid's end.
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // ---- setup
    __shared__ float smem_scratch[2 * WARPS];
    // Row slot r of output o at o·ACC_FLOATS + r·C (COMBINE views; with one row slot, the
    // view's second row is never touched).
    __shared__ __align__(16) float smem_acc[ACC_SMEM ? OUTPUTS * ACC_FLOATS : 1];
    const COMBINE acc_dw_smem(smem_acc), acc_db_smem(smem_acc + (HAS_WEIGHT ? ACC_FLOATS : 0));
    const X x(x_ptr), dy(dy_ptr), dx(dx_ptr);
    const STATS mean(mean_ptr), rstd(rstd_ptr);
    const auto thread = THREAD(threadIdx.x).coordinates();
    const ROW rows(m);
    const ROW_GROUP groups((m + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    const ROW_GROUP grid(static_cast<int>(gridDim.x));
    // The weight of vector k, or 1 (without weight, or outside the row where dy = 0).
    auto weights = [&](int k, float (&w)[VEC]) {
        if (HAS_WEIGHT && vector_in_row(thread, k)) {
            load_affine(weight_ptr, thread, k, w);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) w[i] = 1.0f;
        }
    };
    float acc_dw[ACC_SMEM ? 1 : K][VEC] = {}, acc_db[ACC_SMEM ? 1 : K][VEC] = {};
    if constexpr (ACC_SMEM) {
        for (int i = static_cast<int>(threadIdx.x); i < OUTPUTS * ACC_FLOATS; i += BLOCK_THREADS) {
            smem_acc[i] = 0.0f;
        }
        __syncthreads();
    }

    // ---- prologue (PREFETCH): the first row group
    Group cur, next_group;  // next_group is used only with PREFETCH
    ROW_GROUP group(static_cast<int>(blockIdx.x));
    if (PREFETCH && group < groups) load_group(x, dy, mean, rstd, group + thread, rows, cur);

    // ---- main loop: one row group per step; x and dy read once
    for (; group < groups; group = group + grid) {
        const auto at = group + thread;
        const ROW_GROUP next = group + grid;
        if constexpr (PREFETCH) {
            if (next < groups) load_group(x, dy, mean, rstd, next + thread, rows, next_group);
        } else {
            load_group(x, dy, mean, rstd, at, rows, cur);
        }
        const float mu = cur.mu, rs = cur.rs;
        // Pass 1: the row sums Σ g, Σ g·x̂ (g = dy·w; x = dy = 0 outside the row) and this
        // thread's dweight/dbias terms.
        float s[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float xhat[VEC], d[VEC], w[VEC], dw[VEC];
            unpack(cur.x[k], xhat);
            unpack(cur.dy[k], d);
            weights(k, w);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                xhat[i] = (xhat[i] - mu) * rs;
                const float g = d[i] * w[i];
                s[0] += g;
                s[1] += g * xhat[i];
                dw[i] = d[i] * xhat[i];
                if constexpr (!ACC_SMEM) {
                    if constexpr (HAS_WEIGHT) acc_dw[k][i] += dw[i];
                    if constexpr (HAS_BIAS) acc_db[k][i] += d[i];
                }
            }
            if constexpr (ACC_SMEM) {
                if (vector_in_row(thread, k)) {
                    if constexpr (HAS_WEIGHT) add_to(acc_dw_smem[thread + VEC_STEP(k)].get(), dw);
                    if constexpr (HAS_BIAS) add_to(acc_db_smem[thread + VEC_STEP(k)].get(), d);
                }
            }
        }
        row_sum(s, smem_scratch);
        const float c1 = s[0] * (1.0f / CHANNELS), c2 = s[1] * (1.0f / CHANNELS);
        // Pass 2: dx from the raw registers again (recomputing x̂ and g is cheaper than keeping
        // 2·K·VEC more floats live, which would cost occupancy).
        if (at.template get<ROW>() < rows) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (!vector_in_row(thread, k)) continue;
                float xhat[VEC], d[VEC], w[VEC], o[VEC];
                unpack(cur.x[k], xhat);
                unpack(cur.dy[k], d);
                weights(k, w);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float g = d[i] * w[i];
                    o[i] = rs * (g - c1 - (xhat[i] - mu) * rs * c2);
                }
                *dx[at + VEC_STEP(k)].get() = pack(o);
            }
        }
        if constexpr (PREFETCH) cur = next_group;
    }

    // ---- epilogue: this CTA's dweight/dbias partials (row slots added in a fixed order)
    if constexpr (ACC_SMEM) {
        __syncthreads();
        if constexpr (HAS_WEIGHT) sum_row_slots(acc_dw_smem, dweight_part);
        if constexpr (HAS_BIAS) sum_row_slots(acc_db_smem, dbias_part);
    } else {
        if constexpr (HAS_WEIGHT) write_partials(acc_dw, thread, dweight_part);
        if constexpr (HAS_BIAS) write_partials(acc_db, thread, dbias_part);
    }
}
