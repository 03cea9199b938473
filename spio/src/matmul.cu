/// Tensor-core matmul:  C[m, n] = Σ_k A[m, k] · B[k, n]  (+ bias[n]),  fp32 accumulation.
///   A (M, K) row-major; B (K, N) row-major, or (N, K) row-major when B_TRANSPOSED (nn.Linear's
///   weight layout); C (M, N) row-major in OUT (fp16, bf16 or fp32). M, N, K are runtime
///   arguments: one compiled variant per (dtypes, B layout, bias, tiling) serves every shape.
///
/// Tiling: one CTA per BLOCK_M x BLOCK_N tile of C; WARPS_M x WARPS_N warps, each owning a
///   WARP_M x WARP_N sub-tile = (WARP_M/16) x (WARP_N/8) mma.sync m16n8k16 tiles of fp32
///   accumulators in registers. The grid is 1-D; CTA ids are rasterized in groups of `raster`
///   M-tiles swept across all N-tiles (L2 reuse: a group touches raster*BLOCK_M rows of A and
///   every column strip of B once per group instead of once per M-tile).
/// Traffic per CTA: reads BLOCK_M·K·2 B of A and K·BLOCK_N·2 B of B (from L2 mostly, thanks to the
///   rasterization), writes BLOCK_M·BLOCK_N·sizeof(OUT) B of C. Per k step a CTA does
///   2·BLOCK_M·BLOCK_N·BLOCK_K FLOP on (BLOCK_M+BLOCK_N)·BLOCK_K·2 B of shared memory, i.e.
///   BLOCK_M·BLOCK_N/(BLOCK_M+BLOCK_N) FLOP/B (85 at 128x256): compute bound on the tensor cores
///   for K >= ~512. DRAM: 2·M·N·K FLOP per (M·K + K·N + M·N)·2 B, ~2700 FLOP/B at 8192³.
///   Target: the mma.sync ceiling (H100: well below the wgmma peak cuBLAS reaches; measured by
///   benchmarks/mma_probe.py); >= 70% of cuBLAS at 8192³.
/// Pipeline: STAGES-deep ring of (A, B) tiles in shared memory, filled by cp.async (16 B per copy,
///   zero-filled past M, N and K). Fragments are double-buffered across the k16 steps: the
///   ldmatrix's of step s+1 are issued before the mma's of step s. One __syncthreads per k tile,
///   before its last k16 step: wait for tile kt+1, barrier (which also proves every warp finished
///   reading tile kt-1's slot), load tile kt+1's first fragments, then the last mma's of tile kt;
///   the copy of tile kt+STAGES-1 into tile kt-1's slot is issued with tile kt's first step. So
///   the tensor cores have a k16 step of mma's queued across the barrier.
///   Shared-memory tiles are typed tensors XOR-swizzled in 16-byte chunks (spio::Xor in the
///   type), so both the cp.async writes and the ldmatrix reads (8 rows at one logical chunk) hit
///   8 distinct 16-byte bank groups. Per-thread copy and ldmatrix addresses are resolved once
///   through the tensors; the loop adds the ring slot and the k tile only.
/// Epilogue: accumulators (+ bias) -> OUT into a padded C tile in shared memory (reusing the
///   ring), then 16-byte coalesced stores (element stores on the ragged N edge or when N is not a
///   multiple of 16 B).
/// Assumes: K % 8 == 0; for row-major B, ldb % 8 == 0 (the host pads B when N % 8 != 0);
///   A, B, C, bias 16-byte aligned (checked by the host); sm_80+.
// The generated header (included first) defines the dims M, N, K, STAGE and the shared-memory
// tensors SmemA (STAGE, M, K8), SmemB ((STAGE, N, K8) if B_TRANSPOSED else (STAGE, K, N8)) with
// their XOR swizzles, and SmemC (M, N) with padded rows; see spio/kernels/matmul.py.
#include "spio/async_copy.h"
#include "spio/ldmatrix.h"
#include "spio/mma.h"
#include "spio/raster.h"

namespace {

template <int IsBf16>
struct ElementOf {
    using type = __half;
};
template <>
struct ElementOf<1> {
    using type = __nv_bfloat16;
};
template <int Kind>
struct OutOf {
    using type = __half;
};
template <>
struct OutOf<1> {
    using type = __nv_bfloat16;
};
template <>
struct OutOf<2> {
    using type = float;
};

using Element = typename ElementOf<ELEMENT_IS_BF16>::type;
using Out = typename OutOf<OUT_KIND>::type;

constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int WARP_M = BLOCK_M / WARPS_M;
constexpr int WARP_N = BLOCK_N / WARPS_N;
constexpr int MMA_M = WARP_M / 16;       // m16 tiles per warp
constexpr int MMA_N = WARP_N / 8;        // n8 tiles per warp
constexpr int K_STEPS = BLOCK_K / 16;    // k16 mma steps per stage
constexpr int K_CHUNKS = BLOCK_K / 8;    // 16-byte chunks in a K-major row of a stage
constexpr int N_CHUNKS = BLOCK_N / 8;    // 16-byte chunks in an N-major row (row-major B)
constexpr int A_CHUNKS = BLOCK_M * K_CHUNKS;
constexpr int B_CHUNKS = BLOCK_N * K_CHUNKS;
constexpr int OUT_VEC = 16 / int(sizeof(Out));

// Preconditions
static_assert(BLOCK_M % WARPS_M == 0 && BLOCK_N % WARPS_N == 0,
              "matmul: warps must divide the block tile; change WARPS_M/WARPS_N");   // WARP_M, WARP_N
static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0,
              "matmul: warp tile must be a multiple of 16 in M and N (m16 mma, n16 per "
              "ldmatrix.x4 of B); change the warp grid");                            // MMA_M, MMA_N
static_assert(BLOCK_K == 32 || BLOCK_K == 64,
              "matmul: BLOCK_K must be 32 or 64 (4 or 8 chunks per swizzled row)");  // K_CHUNKS
static_assert(BLOCK_N >= 64,
              "matmul: BLOCK_N must be >= 64 so a row-major B row spans 8 chunks (the XOR "
              "swizzle uses 3 bits)");                                               // N_CHUNKS
static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0,
              "matmul: the 16-byte chunks of a stage must split evenly over the threads; "
              "use fewer warps or a bigger tile");
static_assert(STAGES >= 2, "matmul: the cp.async ring needs at least 2 stages");

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    spio_matmul(const Element* __restrict__ a, const Element* __restrict__ b,
                const Element* __restrict__ bias, Out* __restrict__ c, int m, int n, int k,
                int ldb, int raster) {
    // ---- setup: this CTA's tile, this warp's sub-tile, shared-memory ring --------------------
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const auto smem_a = SmemA(reinterpret_cast<uint4*>(smem_raw));  // (STAGE, M, K8) swizzled
    const auto smem_b = SmemB(smem_a.get() + SmemA::storage_size());  // (STAGE, N|K, K8|N8)
    const auto smem_c = SmemC(reinterpret_cast<Out*>(smem_raw));    // (M, N) padded; reuses ring

    const int tid = threadIdx.x;
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int tiles_m = (m + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (n + BLOCK_N - 1) / BLOCK_N;
    int tile_m, tile_n;
    spio::grouped_tile(blockIdx.x, tiles_m, tiles_n, raster, tile_m, tile_n);
    const int m0 = tile_m * BLOCK_M;
    const int n0 = tile_n * BLOCK_N;
    const int warp_m0 = (warp / WARPS_N) * WARP_M;
    const int warp_n0 = (warp % WARPS_N) * WARP_N;
    const int k_tiles = (k + BLOCK_K - 1) / BLOCK_K;

    // ---- per-thread addressing: computed once through the typed tensors (swizzle included) as
    // chunk offsets from the ring base; the loop only adds the slot and the k tile. Recomputing
    // them per k tile took the main loop from 183 to 269 SASS instructions per 64 HMMA at
    // 128x256x32 (sm_90), and mma.sync at this rate is issue-bound.
    // A thread's copies are THREADS apart in chunk order, i.e. a fixed number of rows apart. The
    // XOR keys use row bits 0-2 only, so an 8-row multiple moves every chunk by the same distance:
    // one destination offset plus compile-time steps (LDGSTS immediates).
    const int slot_a = int(smem_a[STAGE(1)].get() - smem_a.get());  // chunks per A slot
    // B offsets are taken on a copy of the B tensor at the ring base: NVVM folds (base + x) -
    // base to a constant there, but not when the base is smem_b's (smem_a's end), which left
    // the B steps as runtime values in the loop (8 IMAD per k tile at 128x256x64, B transposed).
    const auto b_at_base = SmemB(smem_a.get());
    const int slot_b = int(b_at_base[STAGE(1)].get() - b_at_base.get());  // chunks per B slot
    constexpr int A_COPIES = A_CHUNKS / THREADS;
    constexpr int B_COPIES = B_CHUNKS / THREADS;
    constexpr int A_ROWS = THREADS / K_CHUNKS;  // rows between a thread's A copies
    // Rows (N if transposed, K otherwise) between a thread's B copies.
    constexpr int B_ROWS = THREADS / (B_TRANSPOSED ? K_CHUNKS : N_CHUNKS);
    constexpr bool B_STEP_FIXED = B_ROWS % 8 == 0;  // else one destination offset per copy
    static_assert(A_ROWS % 8 == 0, "matmul: A copies must be 8-row multiples apart");
    const int a_row0 = tid / K_CHUNKS;
    const int a_k = (tid % K_CHUNKS) * 8;  // the same k for all of a thread's A chunks
    const Element* a_src = a + (long long)(m0 + a_row0) * k + a_k;  // not read when masked
    const long long a_copy_step = (long long)A_ROWS * k;
    const int a_dst = int(smem_a[M(a_row0)][K(a_k)].get() - smem_a.get());
    const int a_dst_step = int(smem_a[M(A_ROWS)].get() - smem_a.get());
    bool a_in[A_COPIES];  // row < M
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) a_in[i] = m0 + a_row0 + i * A_ROWS < m;

    // B: row index r = n (transposed) or k (row-major), chunk c = k or n; both constant steps
    // in r and a fixed c per thread.
    const int b_r0 = tid / (B_TRANSPOSED ? K_CHUNKS : N_CHUNKS);
    const int b_c = (tid % (B_TRANSPOSED ? K_CHUNKS : N_CHUNKS)) * 8;
    const int b_n = B_TRANSPOSED ? b_r0 : b_c;  // n of copy 0
    const int b_kk = B_TRANSPOSED ? b_c : b_r0;  // k of copy 0
    const Element* b_src = b + (B_TRANSPOSED ? (long long)(n0 + b_n) * ldb + b_kk
                                             : (long long)b_kk * ldb + n0 + b_n);
    const long long b_copy_step = (long long)B_ROWS * ldb;
    const long long b_tile_step = B_TRANSPOSED ? BLOCK_K : (long long)BLOCK_K * ldb;
    int b_dst[B_STEP_FIXED ? 1 : B_COPIES];
#pragma unroll
    for (int i = 0; i < (B_STEP_FIXED ? 1 : B_COPIES); ++i) {
        const int nn = B_TRANSPOSED ? b_n + i * B_ROWS : b_n;
        const int kk = B_TRANSPOSED ? b_kk : b_kk + i * B_ROWS;
        b_dst[i] = int(b_at_base[N(nn)][K(kk)].get() - b_at_base.get());
    }
    const int b_dst_step = B_TRANSPOSED ? int(b_at_base[N(B_ROWS)].get() - b_at_base.get())
                                        : int(b_at_base[K(B_ROWS)].get() - b_at_base.get());
    bool b_in[B_TRANSPOSED ? B_COPIES : 1];  // n < N (row-major B: one n per thread)
#pragma unroll
    for (int i = 0; i < (B_TRANSPOSED ? B_COPIES : 1); ++i) b_in[i] = n0 + b_n + i * B_ROWS < n;

    // Copies k tile `kt` into ring slot `slot`, zero-filled past M, N, K (masked copies read
    // nothing, so their source addresses need not be valid).
    auto load_stage = [&](int kt, int slot) {
        const int k0 = kt * BLOCK_K;
        uint4* const dst_a = smem_a.get() + slot * slot_a + a_dst;
        const Element* const src_a = a_src + k0;
        const bool a_k_in = k0 + a_k < k;
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i)
            spio::cp_async_16(dst_a + i * a_dst_step, src_a + i * a_copy_step, a_in[i] && a_k_in);
        uint4* const dst_b = smem_b.get() + slot * slot_b;
        const Element* const src_b = b_src + kt * b_tile_step;
#pragma unroll
        for (int i = 0; i < B_COPIES; ++i) {
            const bool ok = B_TRANSPOSED ? b_in[i] && k0 + b_kk < k
                                         : b_in[0] && k0 + b_kk + i * B_ROWS < k;
            uint4* const dst = B_STEP_FIXED ? dst_b + b_dst[0] + i * b_dst_step : dst_b + b_dst[i];
            spio::cp_async_16(dst, src_b + i * b_copy_step, ok);
        }
    };

    // ldmatrix row addresses (chunk offsets in slot 0) of this lane.
    // A 16(m) x 16(k): lanes 0-15 address rows 0-15 at k 0, lanes 16-31 at k 8; the four 8x8
    // matrices come back in mma order (m 0-7 | 8-15) x (k 0-7 | 8-15).
    // B 16(k) x 16(n): matrix q = lane / 8 covers k half q % 2 and n half q / 2, so the registers
    // are b[n tile 2jj][0..1], b[n tile 2jj+1][0..1]. Lane l addresses row l % 8 of its matrix:
    // an n row if B is stored (n, k), a k row if stored (k, n); the transposing ldmatrix then
    // turns k rows into k pairs per register.
    // 16-row moves keep the swizzle (see above), so one offset per k step (A, transposed B) or
    // per n pair (row-major B) plus compile-time row steps, which ptxas folds into the ldmatrix
    // immediates.
    const int q = lane / 8;
    const int a_row16 = int(smem_a[M(16)].get() - smem_a.get());  // 16 rows of A
    const int b_row16 = B_TRANSPOSED ? int(b_at_base[N(16)].get() - b_at_base.get())
                                     : int(b_at_base[K(16)].get() - b_at_base.get());
    constexpr int B_BASES = B_TRANSPOSED ? K_STEPS : MMA_N / 2;
    int a_frag[K_STEPS];
    int b_frag[B_BASES];
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
        const auto row = smem_a[M(warp_m0 + lane % 16)][K(ks * 16 + lane / 16 * 8)];
        a_frag[ks] = int(row.get() - smem_a.get());
    }
#pragma unroll
    for (int x = 0; x < B_BASES; ++x) {
        const int nn = warp_n0 + q / 2 * 8 + (B_TRANSPOSED ? lane % 8 : x * 16);
        const int kk = q % 2 * 8 + (B_TRANSPOSED ? x * 16 : lane % 8);
        b_frag[x] = int(b_at_base[N(nn)][K(kk)].get() - b_at_base.get());
    }

    float reg_acc[MMA_M][MMA_N][4];
#pragma unroll
    for (int i = 0; i < MMA_M; ++i)
#pragma unroll
        for (int j = 0; j < MMA_N; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) reg_acc[i][j][e] = 0.0f;

    // Fragments of two k16 steps: the mma's of step s read set s % 2 while the ldmatrix's of
    // step s + 1 fill the other, so shared-memory latency hides behind the tensor cores.
    unsigned reg_a[2][MMA_M][4];
    unsigned reg_b[2][MMA_N][2];

    // Loads the fragments of k16 step `ks` of ring slot `slot` into set `set`.
    auto load_fragments = [&](int set, int slot, int ks) {
        const uint4* sa = smem_a.get() + slot * slot_a + a_frag[ks];
        const uint4* sb = smem_b.get() + slot * slot_b;
#pragma unroll
        for (int i = 0; i < MMA_M; ++i) spio::ldmatrix_x4(reg_a[set][i], sa + i * a_row16);
#pragma unroll
        for (int jj = 0; jj < MMA_N / 2; ++jj) {
            unsigned r[4];
            if constexpr (B_TRANSPOSED) {
                spio::ldmatrix_x4(r, (sb + b_frag[ks]) + jj * b_row16);
            } else {
                spio::ldmatrix_x4_trans(r, (sb + b_frag[jj]) + ks * b_row16);
            }
            reg_b[set][2 * jj][0] = r[0];
            reg_b[set][2 * jj][1] = r[1];
            reg_b[set][2 * jj + 1][0] = r[2];
            reg_b[set][2 * jj + 1][1] = r[3];
        }
    };
    // The mma's of one k16 step from fragment set `set`.
    auto multiply = [&](int set) {
#pragma unroll
        for (int i = 0; i < MMA_M; ++i)
#pragma unroll
            for (int j = 0; j < MMA_N; ++j)
                spio::mma_m16n8k16<Element>(reg_acc[i][j], reg_a[set][i], reg_b[set][j]);
    };

    // ---- prologue: fill STAGES-1 slots, wait for tile 0, load its first fragments -------------
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        spio::cp_async_commit();  // commit even when empty: the wait count below stays uniform
    }
    spio::cp_async_wait<STAGES - 2>();
    __syncthreads();
    load_fragments(0, 0, 0);

    // ---- main loop: one barrier per k tile, placed before the last k16 step ------------------
    // Step ks of tile kt: (last step only) wait for tile kt+1 and barrier, which also proves that
    // every warp finished reading tile kt-1's slot; load the fragments of the next step (of tile
    // kt+1 at the last step) into the other set; (first step only) refill tile kt-1's slot with
    // tile kt+STAGES-1; then the mma's of step ks. The tensor cores never wait on the barrier
    // with an empty queue: the last step's mma's are issued after it.
    int read_slot = 0;
    int write_slot = STAGES - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ++ks) {
            if (ks == K_STEPS - 1) {
                spio::cp_async_wait<STAGES - 2>();  // tile kt+1 has landed for this thread ...
                __syncthreads();                    // ... for all; tile kt-1's slot is free
                read_slot = read_slot == STAGES - 1 ? 0 : read_slot + 1;
            }
            // Past the last tile this reads a stale slot: harmless, its fragments go unused.
            load_fragments((ks + 1) % 2, read_slot, (ks + 1) % K_STEPS);
            if (ks == 0) {
                if (kt + STAGES - 1 < k_tiles) load_stage(kt + STAGES - 1, write_slot);
                spio::cp_async_commit();
                write_slot = write_slot == STAGES - 1 ? 0 : write_slot + 1;
            }
            multiply(ks % 2);
        }
    }
    spio::cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring: reuse it for the C tile

    // ---- epilogue: accumulators (+ bias) -> OUT in padded smem -> 16-byte global stores --------
    // Lane (g = lane/4, t = lane%4) holds rows g and g+8, columns 2t and 2t+1 of each mma tile.
#pragma unroll
    for (int j = 0; j < MMA_N; ++j) {
        const int col = warp_n0 + j * 8 + (lane % 4) * 2;
        float bias0 = 0.0f, bias1 = 0.0f;
        if constexpr (HAS_BIAS) {
            if (n0 + col < n) bias0 = float(bias[n0 + col]);
            if (n0 + col + 1 < n) bias1 = float(bias[n0 + col + 1]);
        }
#pragma unroll
        for (int i = 0; i < MMA_M; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                Out* dst = smem_c[M(warp_m0 + i * 16 + lane / 4 + half * 8)][N(col)].get();
                const float v0 = reg_acc[i][j][2 * half] + bias0;
                const float v1 = reg_acc[i][j][2 * half + 1] + bias1;
                if constexpr (OUT_KIND == 2) {
                    *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
                } else if constexpr (OUT_KIND == 1) {
                    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
                } else {
                    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(v0, v1);
                }
            }
        }
    }
    __syncthreads();

    constexpr int ROW_VECS = BLOCK_N / OUT_VEC;
    const bool vec_ok = n % OUT_VEC == 0;  // rows of C start 16-byte aligned
    for (int idx = tid; idx < BLOCK_M * ROW_VECS; idx += THREADS) {
        const int row = idx / ROW_VECS;
        const int col = (idx % ROW_VECS) * OUT_VEC;
        const int gm = m0 + row, gn = n0 + col;
        if (gm >= m || gn >= n) continue;
        const Out* src = smem_c[M(row)][N(col)].get();
        Out* dst = c + (long long)gm * n + gn;
        if (vec_ok && gn + OUT_VEC <= n) {
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
#pragma unroll
            for (int e = 0; e < OUT_VEC; ++e)
                if (gn + e < n) dst[e] = src[e];
        }
    }
}
