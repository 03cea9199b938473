/// LayerNorm over the C channels of channels_last (N, C, H, W) activations: M = N·H·W rows of C.
///
/// Forward (layernorm_2d_fwd), per row r:
///   mean = Σ_c x[r,c] / C,  var = Σ_c (x[r,c] − mean)² / C,  rstd = 1 / sqrt(var + eps),
///   y[r,c] = (x[r,c] − mean) · rstd · weight[c] + bias[c];  mean[r], rstd[r] saved (fp32).
/// Backward (layernorm_2d_bwd), with x̂ = (x − mean) · rstd and g = dy · weight:
///   dx[r,c] = rstd · (g[r,c] − mean_c g − x̂[r,c] · mean_c(g · x̂)),
///   dweight_part[cta, c] = Σ_{rows of cta} dy · x̂,  dbias_part[cta, c] = Σ_{rows of cta} dy
///   (layernorm_2d_bwd_reduce.cu sums the per-CTA partials in a fixed order: no float atomics).
///
/// Tiling: a CTA of BLOCK_THREADS = ROWS_PER_BLOCK × THREADS_PER_ROW threads (THREAD: row of the
///   group, first vector) takes ROWS_PER_BLOCK rows at a time and strides over row groups
///   (grid ≤ resident CTAs). A row's THREADS_PER_ROW threads (a sub-warp group, a warp or several
///   warps) hold VECS_PER_THREAD vectors of VEC channels each: vector k·THREADS_PER_ROW + lane.
/// Traffic per row: forward reads x once (registers serve both passes), writes y and 8 B of
///   mean/rstd; backward reads x, dy, mean, rstd and writes dx. weight/bias are re-read per row
///   from L1. Bound: DRAM (≤ 12 flops per 2–4 bytes); targets ≥ 85% of an elementwise pass
///   (forward) and ≥ 75% of copy bandwidth (backward).
/// Pipeline: row sums use xor-shuffles within the row's threads; rows of several warps add one
///   shared-memory exchange (two barriers). With PREFETCH the next row group's vectors (and, in
///   backward, its mean/rstd) load into a second register buffer before the current group's
///   reductions. Backward's dweight/dbias accumulators live in shared memory (ACC_SMEM) or
///   registers (one row per CTA and C too large for 47 KiB), see layernorm_2d_bwd.
/// Assumes: C % VEC == 0; x, y, dy, dx, weight, bias 16-byte aligned; rows contiguous
///   (channels_last); M·C < 2³² (32-bit offsets). SPIO_LAYERNORM_2D_BACKWARD picks the entry.
#include "spio/reduce.h"

namespace {

using Raw = X::data_type;  // one vector of VEC elements: uint4 (16 B) or long long (8 B)
constexpr int K = VECS_PER_THREAD;
constexpr int WORDS = static_cast<int>(sizeof(Raw)) / 4;
constexpr bool FP32_DATA = spio::detail::is_same_v<DATA, float>;
constexpr int WARPS = BLOCK_THREADS / spio::warp_size;

// Preconditions
static_assert(VEC * static_cast<int>(sizeof(DATA)) == static_cast<int>(sizeof(Raw)),
              "layernorm_2d: VEC elements must fill one vector; regenerate the header");  // VEC
static_assert(ROW_VECS * VEC == CHANNELS,
              "layernorm_2d: C must be whole vectors; choose vec_bytes dividing C's bytes");  // C
static_assert(K * THREADS_PER_ROW >= ROW_VECS,
              "layernorm_2d: the row's threads must cover its vectors; raise VECS_PER_THREAD");
static_assert(BLOCK_THREADS == THREADS_PER_ROW * ROWS_PER_BLOCK && BLOCK_THREADS % 32 == 0,
              "layernorm_2d: the CTA must be whole warps of whole rows; fix rows_per_block");
static_assert(THREADS_PER_ROW <= spio::warp_size || THREADS_PER_ROW % spio::warp_size == 0,
              "layernorm_2d: a row is a power-of-two sub-warp group or whole warps");

/// One weight/bias element as a float (exact).
template <class T>
SPIO_DEVICE float to_float(T v) {
    if constexpr (spio::detail::is_same_v<T, float>) {
        return v;
    } else if constexpr (spio::detail::is_same_v<T, __half>) {
        return __half2float(v);
    } else {
        return __bfloat162float(v);
    }
}

/// The VEC elements of one raw vector as floats (exact).
SPIO_DEVICE void unpack(const Raw& v, float (&out)[VEC]) {
    const unsigned* w = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
        if constexpr (FP32_DATA) {
            out[i] = __uint_as_float(w[i]);
        } else if constexpr (spio::detail::is_same_v<DATA, __half>) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        } else {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }
}

/// VEC floats rounded to DATA (nearest even), in one raw vector.
SPIO_DEVICE Raw pack(const float (&in)[VEC]) {
    Raw v;
    unsigned* w = reinterpret_cast<unsigned*>(&v);
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
        if constexpr (FP32_DATA) {
            w[i] = __float_as_uint(in[i]);
        } else if constexpr (spio::detail::is_same_v<DATA, __half>) {
            const __half2 h = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
            w[i] = *reinterpret_cast<const unsigned*>(&h);
        } else {
            const __nv_bfloat162 h = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
            w[i] = *reinterpret_cast<const unsigned*>(&h);
        }
    }
    return v;
}

/// Sums N values over the THREADS_PER_ROW threads of each row; every thread gets its row's sums.
///
/// Block-wide when a row spans several warps (one exchange through smem_scratch, N·WARPS floats,
/// two barriers); otherwise warp-wide (xor-shuffles stay inside each aligned group of threads).
template <int N>
SPIO_DEVICE void row_sum(float (&v)[N], float* smem_scratch) {
    constexpr int width = THREADS_PER_ROW < spio::warp_size ? THREADS_PER_ROW : spio::warp_size;
#pragma unroll
    for (int offset = width / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int n = 0; n < N; ++n) v[n] += __shfl_xor_sync(spio::full_warp_mask, v[n], offset);
    }
    if constexpr (THREADS_PER_ROW > spio::warp_size) {
        // (max: this branch is still parsed when a row is one warp or less)
        constexpr int warps_per_row = THREADS_PER_ROW > spio::warp_size ? THREADS_PER_ROW / spio::warp_size : 1;
        const int warp = spio::warp_id();
        if (spio::lane_id() == 0) {
#pragma unroll
            for (int n = 0; n < N; ++n) smem_scratch[n * WARPS + warp] = v[n];
        }
        __syncthreads();
        const int first = warp - warp % warps_per_row;  // the row's first warp
#pragma unroll
        for (int n = 0; n < N; ++n) {
            float total = 0.0f;
#pragma unroll
            for (int i = 0; i < warps_per_row; ++i) total += smem_scratch[n * WARPS + first + i];
            v[n] = total;
        }
        __syncthreads();  // the scratch is reused by the next call
    }
}

/// Whether this thread's k-th vector lies inside the row (threads past C/VEC idle).
template <class Coords>
SPIO_DEVICE bool vector_in_row(const Coords& thread, int k) {
    return (thread + VEC_STEP(k)).template get<CV>() < CV(ROW_VECS);
}

/// Loads this thread's vectors of row `at` (coordinates with a ROW entry); zeros outside.
template <class Coords>
SPIO_DEVICE void load_row(const X& t, const Coords& at, ROW rows, Raw (&reg)[K]) {
    const bool row_ok = at.template get<ROW>() < rows;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const auto pos = at + VEC_STEP(k);
        reg[k] = row_ok && pos.template get<CV>() < CV(ROW_VECS) ? __ldg(t[pos].get()) : Raw{};
    }
}

/// The channels of this thread's k-th vector of weight or bias, as floats.
///
/// 8–32 bytes of read-only vector loads per call, which hit L1 after the first row (the
/// parameters are C elements): reloading them per row costs far less than keeping 2·K·VEC fp32
/// registers live for the whole kernel, which would lower occupancy. Call only for vectors
/// inside the row (vector_in_row).
template <class Coords>
SPIO_DEVICE void load_affine(WEIGHT* ptr, const Coords& thread, int k, float (&out)[VEC]) {
    constexpr int bytes = VEC * static_cast<int>(sizeof(WEIGHT));
    static_assert(bytes % 8 == 0, "layernorm_2d: a vector of weights must be 8-byte chunks");
    unsigned words[bytes / 4];
    const WEIGHT* src = AFFINE(ptr)[thread + VEC_STEP(k)].get();
    if constexpr (bytes % 16 == 0) {
#pragma unroll
        for (int j = 0; j < bytes / 16; ++j) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + j);
            words[4 * j] = v.x, words[4 * j + 1] = v.y, words[4 * j + 2] = v.z,
                      words[4 * j + 3] = v.w;
        }
    } else {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
        words[0] = v.x, words[1] = v.y;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        if constexpr (spio::detail::is_same_v<WEIGHT, float>) {
            out[i] = __uint_as_float(words[i]);
        } else {
            // Element i is the low (even i) or high half of word i / 2 (little-endian).
            const unsigned short bits =
                static_cast<unsigned short>(i % 2 ? words[i / 2] >> 16 : words[i / 2]);
            out[i] = to_float(*reinterpret_cast<const WEIGHT*>(&bits));
        }
    }
}

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

#if !SPIO_LAYERNORM_2D_BACKWARD
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
layernorm_2d_fwd(Raw* x_ptr, WEIGHT* weight_ptr, WEIGHT* bias_ptr, Raw* y_ptr, float* mean_ptr,
                 float* rstd_ptr, int m, float eps) {
    // ---- setup: typed views and this thread's place
    __shared__ float smem_scratch[WARPS];
    const X x(x_ptr), y(y_ptr);
    const STATS mean(mean_ptr), rstd(rstd_ptr);
    const auto thread = THREAD(threadIdx.x).coordinates();  // (row of the group, first vector)
    const ROW rows(m);
    const ROW_GROUP groups((m + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    const ROW_GROUP grid(static_cast<int>(gridDim.x));
    const bool leader = (thread + VEC_STEP(0)).template get<CV>() == CV(0);

    // ---- prologue: the first row group
    Raw reg_x[K];
    Raw reg_next[K];  // used only with PREFETCH
    ROW_GROUP group(static_cast<int>(blockIdx.x));
    if (group < groups) load_row(x, group + thread, rows, reg_x);

    // ---- main loop: stats from registers (two passes), normalize, store; next group
    for (; group < groups; group = group + grid) {
        const ROW_GROUP next = group + grid;
        if constexpr (PREFETCH) {
            if (next < groups) load_row(x, next + thread, rows, reg_next);
        }
        const auto at = group + thread;
        float f[K][VEC];
        float s[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            unpack(reg_x[k], f[k]);
#pragma unroll
            for (int i = 0; i < VEC; ++i) s[0] += f[k][i];  // vectors outside the row are 0
        }
        row_sum(s, smem_scratch);
        const float mu = s[0] * (1.0f / CHANNELS);
        float q[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (!vector_in_row(thread, k)) continue;
#pragma unroll
            for (int i = 0; i < VEC; ++i) q[0] += (f[k][i] - mu) * (f[k][i] - mu);
        }
        row_sum(q, smem_scratch);
        const float rs = rsqrtf(q[0] * (1.0f / CHANNELS) + eps);
        if (at.template get<ROW>() < rows) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                if (!vector_in_row(thread, k)) continue;
                float o[VEC], w[VEC], b[VEC];
                if constexpr (HAS_WEIGHT) load_affine(weight_ptr, thread, k, w);
                if constexpr (HAS_BIAS) load_affine(bias_ptr, thread, k, b);
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    o[i] = (f[k][i] - mu) * rs;
                    if constexpr (HAS_WEIGHT) o[i] *= w[i];
                    if constexpr (HAS_BIAS) o[i] += b[i];
                }
                *y[at + VEC_STEP(k)].get() = pack(o);
            }
            if (leader) {
                *mean[at].get() = mu;
                *rstd[at].get() = rs;
            }
        }
        if constexpr (PREFETCH) {
#pragma unroll
            for (int k = 0; k < K; ++k) reg_x[k] = reg_next[k];
        } else if (next < groups) {
            load_row(x, next + thread, rows, reg_x);
        }
    }
}
#else
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
#endif
