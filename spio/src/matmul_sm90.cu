/// Hopper matmul (sm_90a):  C[m, n] = Σ_k A[m, k] · B[n, k]  (+ bias[n]),  fp32 accumulation.
///   A (M, K) row-major and B (N, K) row-major (nn.Linear's weight layout: both K-major), or
///   with B_MN_MAJOR B stored (K, N) row-major (N-major: a row-major right operand, as the
///   gradients of nn.Linear read theirs), read through TMA tensor maps (spio/tma.h) with the
///   128-byte swizzle; C (M, N) row-major in OUT (fp16, bf16 or fp32). M, N, K are runtime
///   arguments (the maps carry the operands' shapes).
///
/// Tiling: one CTA per BLOCK_M x BLOCK_N tile of C (BLOCK_M = 128), 1-D grid rasterized in groups
///   of `raster` M-tiles (spio/raster.h). Three warpgroups: warpgroup 0 is the producer (one
///   thread issues the TMA copies), warpgroups 1 and 2 the consumers, each owning 64 rows of the
///   tile as BLOCK_N / 2 fp32 accumulators per thread (wgmma m64nBLOCK_Nk16, spio/wgmma.h).
/// Pipeline: STAGES slots of (A: 128 x 64, B: BLOCK_N x 64) elements, one 128-byte swizzled row
///   per operand row (BLOCK_K = 64), each slot with two mbarriers: `full` (the producer announces
///   the slot's bytes; TMA counts them down) and `empty` (one arrival per consumer warpgroup once
///   its wgmma reading the slot has completed). The producer waits on `empty` before refilling a
///   slot; the first pass over the ring waits for the phase before the barrier's first, which a
///   fresh barrier reports complete. A consumer issues the slot's 4 wgmma k-steps, commits, and
///   waits until at most one batch is in flight: the previous slot's batch is then done and that
///   slot is released, so the tensor cores always have the current batch queued.
/// Registers: with BLOCK_N >= 128 (one CTA an SM) the producer warpgroup lowers its registers to
///   40 a thread and the consumers raise theirs to 232 (setmaxnreg, REBALANCE below).
/// Ragged shapes: TMA zero-fills what lies past M, N or K, so the sums are exact; the epilogue
///   stores only rows < M and columns < N.
/// Traffic per CTA: (128 + BLOCK_N / CLUSTER_M) · K · 2 B of A and B read from L2 (mostly, with
///   the rasterization), 128 · BLOCK_N · sizeof(OUT) B of C (TAIL: a split CTA writes 128 ·
///   BLOCK_N · 4 B of fp32 partials instead, which the sum reads back). Per slot 2 · 128 · BLOCK_N · 64
///   FLOP on (128 + BLOCK_N) · 128 B of shared memory: 85 FLOP/B at BLOCK_N = 256. Bound: the
///   wgmma rate for K >~ 512.
/// Epilogue (EPI_TMA 1: C's rows 16-byte aligned, no split-K): each consumer warpgroup rounds
///   its accumulators (+ bias) to OUT into shared memory, a box of 64 rows x 128 bytes at a
///   time (BOX_COLS columns) in one of its two staging buffers (128-byte swizzle: a warp's
///   stores hit all 32 banks), and one thread stores the box with TMA (store_2d: full 128-byte
///   lines, clipped at M and N by the map), which runs on while the warpgroup goes on. Stores
///   from registers (EPI_TMA 0) write 16 bytes of each of 8 rows per warp instruction, half
///   sectors: on the H100 that epilogue cost 8-16% of the kernel at 4096-8192 (the kernel
///   timed with it skipped). EPI_TMA 0 keeps it: two adjacent columns per store where the
///   alignment allows (N even, C 2-element aligned), else one.
/// Clusters (CLUSTER_M 2, opt-in): the kernel is declared __cluster_dims__(2, 1, 1) and the two
///   CTAs of a cluster take M tiles 2i and 2i + 1 of the same N tile (the grid padded to an even
///   number of M tiles; a CTA past M computes on TMA's zeros and stores nothing). B is loaded
///   once for both: each CTA's producer copies half of the B box (BLOCK_N / 2 rows; the host's
///   B map has that box) into the same slot of both CTAs (tma::load_2d_multicast), so each CTA's
///   `full` barrier still expects SLOT_BYTES (its A box + both halves of B, one from each CTA).
///   A slot is refilled only once the consumers of BOTH CTAs released it (the peer's copy writes
///   into this CTA's slot): each consumer warpgroup arrives on the `empty` barrier of both CTAs
///   (mbarrier::arrive_cluster, release at CTA scope as in CUTLASS), whose count is 2 x
///   CONSUMERS, and the producer waits on it as on its own. A cluster barrier orders the
///   barriers' initialisation before any remote access, and another keeps both CTAs (their
///   shared memory) alive until neither can still arrive on or copy into the other. The protocol is modelled in
///   tests/host/kernels/test_matmul_sm90_pipeline.py.
/// Persistent (PERSISTENT 1, opt-in): the host launches at most as many CTAs as the SMs hold;
///   CTA (cluster) i walks work items i, i + stride, ... (tiles, or pairs of M tiles with a
///   cluster; stride = gridDim.x / CLUSTER_M) in the same raster order (tile_of), as one k-tile
///   stream: producer and consumers carry their slot and phase from tile to tile, so the
///   producer fills the next tile's first slots while the consumers store this one. The
///   consumers zero their accumulators per tile (harmless: ptxas keeps the wgmma batches
///   unserialized there, a host test checks) and release a tile's last slot as soon as its
///   batch completed (the plain kernel never releases it), before the epilogue. Both CTAs of a
///   cluster walk the same pairs, so their streams stay in step; the cluster barrier follows
///   the last tile. PERSISTENT 0 compiles the one-tile code, whose SASS the persistent path
///   leaves unchanged.
/// Split-K (SPLIT_K > 1; plain CTAs only): for shapes with too few tiles to fill the GPU against
///   long K (decode, small M x N at any M: the host's heuristic decides), the grid is (tiles,
///   SPLIT_K) and CTA (t, y) sums k tiles [y per, (y + 1) per),
///   per = ceil(k tiles / SPLIT_K), into fp32 slice y of a workspace (c points at it; Out is
///   float, no bias): C is then their ordered sum (+ bias), rounded once, by
///   matmul_splitk_reduce.cu. An empty range (more splits than k tiles) stores zeros.
///   SPLIT_K 1 compiles the code without it.
/// Split tail (TAIL 1; plain CTAs, no cluster, no split-K): against wave quantization, the host
///   (`matmul_sm90.tail_plan`) runs the first `dp_tiles` tiles of the raster order whole, one
///   CTA each (their waves fill every SM), and splits each of the last tiles (the partial last
///   wave) over `splits` CTAs along K: CTA dp_tiles + t takes tile dp_tiles + t / splits and the
///   balanced k range y kt / splits .. (y + 1) kt / splits of split y = t % splits (never empty:
///   splits <= k tiles), and stores its fp32 accumulators as they lie in the registers to
///   partial t of `ws` (`store_partial`); matmul_tail_sum.cu then sums each tail tile's
///   partials in order (+ bias) into C. The whole tiles' epilogue is the plain one.
/// A_MN_MAJOR: A is given as its transpose's storage, (K, M) row-major (M-major: the op's dB =
///   dC^T A reads dC^T from dC this way, no copy); each slot holds A as 2 blocks of 64 k rows x
///   128 bytes (64 m), one box each, read in wgmma's transposed-A mode: consumer warpgroup w
///   reads block w (its 64 rows), descriptor SBO 1024 between 8-row atoms along K. No clusters.
/// B_MN_MAJOR: each slot holds B as BLOCK_N / 64 blocks of 64 rows (k) x 128 bytes (64 n), one
///   TMA box each, in the 128-byte swizzle: wgmma reads it in its transposed-B mode (descriptor
///   SBO 1024 between 8-row atoms along K, LBO between the 64-wide blocks along N). Plain and
///   persistent CTAs and split-K; no clusters yet (their B halves are cut along N).
/// SWAP_AB (decode: few rows of A against many of B): the host passes the operands swapped, so
///   the kernel multiplies C^T = B A^T: its A is the product's B (N, K), its B the product's A
///   (M, K), both K-major, and its m, n are the product's N, M; a tile is 128 rows of B against
///   BLOCK_N (16, 32 or 64) rows of A, so at M = 16 the wgmma work is the product's where a
///   128-row tile of A (the unswapped kernel) would multiply 8 times as many rows. store_tile
///   writes the transposed tile into C (M, N) row-major (a split-K CTA its slice of partials,
///   laid out as the unswapped kernel's, so the same sum serves) and adds the bias by the
///   tile's rows. Register epilogue only; no cluster, split tail or M- / N-major operand.
/// Not yet: multicast of A (clusters along N), clusters with an N-major B or an M-major A.
/// Assumes: K % 8 == 0 (16-byte row strides for TMA; M % 8 == 0 for an M-major A, N % 8 == 0 for
///   an N-major B), A, B 16-byte aligned (launch checks, the op copies), C and bias
///   element-aligned (EPI_TMA: C 16-byte aligned, its rows whole 16-byte units); sm_90a.
// The generated header (included first) defines Element (__half or __nv_bfloat16), Out (the
// same or float), BLOCK_N, STAGES, HAS_BIAS, PERSISTENT (0 or 1), SPLIT_K, the macros CLUSTER_M
// (1 or 2), EPI_TMA, TAIL, A_MN_MAJOR, B_MN_MAJOR and SWAP_AB (0 or 1), the dims M, N, K, K8,
// STAGE and the swizzled shared-memory rings SmemA (STAGE, M, K8; A_MN_MAJOR: STAGE, MB, KROW,
// M8) and SmemB (STAGE, N, K8; B_MN_MAJOR: STAGE, NB, KROW, N8), and with EPI_TMA the staging
// buffers SmemC (EPI, ROW, CH); see spio/kernels/matmul_sm90.py.
#include "spio/cta.h"
#include "spio/mbarrier.h"
#include "spio/meta.h"
#include "spio/raster.h"
#include "spio/tma.h"
#include "spio/vector.h"
#include "spio/wgmma.h"

#if !SPIO_WGMMA || !SPIO_TMA
#error "matmul_sm90.cu needs sm_90a (wgmma and TMA)"
#endif

namespace {

constexpr int BLOCK_M = 128;
constexpr int BLOCK_K = 64;                         // one 128-byte swizzled row per operand row
constexpr int CONSUMERS = 2;                        // consumer warpgroups, 64 rows each
constexpr int THREADS = (CONSUMERS + 1) * 128;      // + the producer warpgroup
constexpr int SLOT_BYTES = (BLOCK_M + BLOCK_N) * BLOCK_K * int(sizeof(Element));
constexpr int K_STEPS = BLOCK_K / 16;               // wgmma k16 steps per slot
constexpr int ACC = BLOCK_N / 2;                    // fp32 accumulators per consumer thread
constexpr unsigned SWIZZLE_ATOM = 1024;             // 8 rows x 128 bytes
// Registers (setmaxnreg): the producer warpgroup, one thread of which issues copies, hands what
// it does not need to the consumers, which hold the accumulators. A kernel that rebalances is
// compiled for the launch bound's cap (ptxas: 168 a thread at 384 threads, the pool the
// consumers draw from; `raise_registers` would wait forever on a smaller one). 64-wide tiles run
// two CTAs an SM at <= 80 registers and keep the launch's. Measured (H100 and H200, 8192^3 to
// 2048^3): the 256-wide 4-slot config unchanged, 3-slot, persistent and 128-wide configs 2-11%
// faster (docs/ops/matmul.md, "Twenty-first session").
constexpr bool REBALANCE = BLOCK_N >= 128;
// CTAs an SM must hold (__launch_bounds__): 2 caps a swapped variant at 80 registers a thread,
// as the host's `ctas_per_sm` counts (its transposed stores took 96 uncapped at BLOCK_N 64).
constexpr int MIN_CTAS = SWAP_AB ? 2 : 1;
constexpr int LAUNCH_REGISTERS = (65536 / THREADS) / 8 * 8;  // 168: an SM's 64 K registers
constexpr int PRODUCER_REGISTERS = 40;
constexpr int CONSUMER_REGISTERS =
    (LAUNCH_REGISTERS * THREADS - PRODUCER_REGISTERS * 128) / (CONSUMERS * 128) / 8 * 8;  // 232
static_assert(PRODUCER_REGISTERS * 128 + CONSUMER_REGISTERS * CONSUMERS * 128 <=
                  LAUNCH_REGISTERS * THREADS,
              "matmul_sm90: the consumers' registers must come from the producer's");

static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64 || BLOCK_N == 128 || BLOCK_N == 256,
              "matmul_sm90: BLOCK_N must be 16, 32, 64, 128 or 256 (a wgmma N and a TMA box "
              "<= 256)");
static_assert(BLOCK_N >= 64 || (CLUSTER_M == 1 && !B_MN_MAJOR && !EPI_TMA && !TAIL),
              "matmul_sm90: 16- and 32-wide tiles (swapped decode products) run without a "
              "cluster, an N-major B, the TMA-store epilogue or a split tail");
static_assert(!SWAP_AB || (!EPI_TMA && !TAIL && !A_MN_MAJOR && !B_MN_MAJOR),
              "matmul_sm90: SWAP_AB stores from registers, both operands K-major, no split tail");
static_assert(STAGES >= 2, "matmul_sm90: the ring needs at least 2 slots");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "matmul_sm90: CLUSTER_M must be 1 or 2");

static_assert(SPLIT_K == 1 || (CLUSTER_M == 1 && !PERSISTENT && !HAS_BIAS && !EPI_TMA &&
                               spio::detail::is_same_v<Out, float>),
              "matmul_sm90: split-K runs plain CTAs writing fp32 partials (no bias) from registers");

static_assert(!TAIL || (CLUSTER_M == 1 && !PERSISTENT && SPLIT_K == 1),
              "matmul_sm90: a split tail runs plain CTAs without a cluster or split-K");

constexpr int B_ROWS = BLOCK_N / CLUSTER_M;  // rows of the B box this CTA's producer copies
static_assert(!B_MN_MAJOR || CLUSTER_M == 1, "matmul_sm90: an N-major B runs without clusters");
static_assert(!A_MN_MAJOR || CLUSTER_M == 1, "matmul_sm90: an M-major A runs without clusters");
#if B_MN_MAJOR
constexpr int B_BLOCKS = BLOCK_N / 64;  // 64-wide blocks of an N-major B slot (one box each)
#endif

#if CLUSTER_M == 2
#define SPIO_MATMUL_CLUSTER __cluster_dims__(2, 1, 1)
#else
#define SPIO_MATMUL_CLUSTER
#endif

/// Dynamic shared memory: the rings SmemA (STAGE, M, K8) and SmemB (STAGE, N, K8) of 16-byte
/// chunks, typed with the 128-byte swizzle TMA writes (chunk k8 of row m at k8 ^ (m % 8)), the
/// ring 1024-byte aligned (the swizzle's atom); with EPI_TMA the epilogue's staging buffers
/// SmemC (EPI, ROW, CH): two per consumer warpgroup, each 64 rows of 128 bytes in the same
/// swizzle; then the 2 x STAGES barriers. The host adds 1024 bytes for the alignment.
struct Smem {
    SmemA a;
    SmemB b;
#if EPI_TMA
    SmemC c;
#endif
    unsigned long long* full;
    unsigned long long* empty;
};

SPIO_DEVICE Smem carve(unsigned char* raw) {
    const unsigned long long base = reinterpret_cast<unsigned long long>(raw);
    auto* ring = reinterpret_cast<uint4*>((base + SWIZZLE_ATOM - 1) & ~(SWIZZLE_ATOM - 1ull));
    const SmemA a(ring);
    const SmemB b(ring + SmemA::storage_size());
#if EPI_TMA
    // A slot of either ring is whole 1024-byte atoms, so the staging stays aligned.
    const SmemC c(b.get() + SmemB::storage_size());
    auto* full = reinterpret_cast<unsigned long long*>(c.get() + SmemC::storage_size());
    return {a, b, c, full, full + STAGES};
#else
    auto* full = reinterpret_cast<unsigned long long*>(b.get() + SmemB::storage_size());
    return {a, b, full, full + STAGES};
#endif
}

/// The bias of the columns a consumer thread holds in one tile (unswapped): pair q is columns
/// col0 + 8 q + 2 (t % 4) and + 1 (acc_col of d[4 q .. 4 q + 3]: both of the thread's rows), two
/// Elements packed in one register, zero past N. Loaded once a tile, before the tile's last
/// wgmma batch completes, so the loads' latency hides under it; the epilogue then reads
/// registers (per accumulator pair, in the epilogue, the loads stood between the boxes' stores:
/// +3.5% at 8192^3 to +10% at 2048^3 on the H100). SWAP_AB adds its bias by rows instead
/// (store_tile).
constexpr int BIAS_PAIRS = HAS_BIAS ? BLOCK_N / 8 : 1;  // SWAP_AB: unused (zero)
struct TileBias {
    unsigned pair[BIAS_PAIRS];
};

SPIO_DEVICE TileBias load_bias(const Element* __restrict__ bias, int col0, int n) {
    TileBias b{};
    if constexpr (HAS_BIAS && !SWAP_AB) {
        const int t = threadIdx.x % 128;
        const Element* src = bias + col0 + 2 * (t % 4);
        // Whole pairs by 32-bit loads where the tile lies inside N (every pair's columns exist)
        // and the bias is 4-byte aligned (the op's are 16-byte aligned).
        if (col0 + BLOCK_N <= n && reinterpret_cast<unsigned long long>(bias) % 4 == 0) {
#pragma unroll
            for (int q = 0; q < BIAS_PAIRS; ++q) {
                b.pair[q] = __ldg(reinterpret_cast<const unsigned*>(src + 8 * q));
            }
        } else {
            const Element zero = static_cast<Element>(0.f);
#pragma unroll
            for (int q = 0; q < BIAS_PAIRS; ++q) {
                const int col = col0 + 8 * q + 2 * (t % 4);
                b.pair[q] = spio::pack2<Element>(col < n ? src[8 * q] : zero,
                                                 col + 1 < n ? src[8 * q + 1] : zero);
            }
        }
    }
    return b;
}

/// The accumulators (+ bias) of one consumer warpgroup to C, in wgmma's accumulator layout
/// (spio::warpgroup::acc_row / acc_col); d[i] and d[i + 1] (i even) are adjacent columns.
/// `tile_bias`: the tile's (load_bias); SWAP_AB reads `bias` by the tile's rows.
SPIO_DEVICE void store_tile(Out* __restrict__ c, const Element* __restrict__ bias,
                            const TileBias& tile_bias, const float (&d)[ACC], int row0, int col0,
                            int m, int n) {
    const int t = threadIdx.x % 128;
    // Every (row, even column) is 2-element aligned when N is even and C's base is.
    const bool pairs =
        n % 2 == 0 && reinterpret_cast<unsigned long long>(c) % (2 * sizeof(Out)) == 0;
#pragma unroll
    for (int i = 0; i < ACC; i += 2) {
        const int row = row0 + spio::warpgroup::acc_row(t, i);
        const int col = col0 + spio::warpgroup::acc_col(t, i);  // even: i is
        if (row >= m || col >= n) continue;
        float lo = d[i], hi = d[i + 1];
#if SWAP_AB
        // The tile's (row, col) is C's (col, row): C has n rows of m elements, the bias one
        // value per row of the tile. A split-K slice is laid out as C too.
        if constexpr (HAS_BIAS) {
            const float b = static_cast<float>(bias[row]);
            lo += b, hi += b;
        }
        c[static_cast<long long>(col) * m + row] = static_cast<Out>(lo);
        if (col + 1 < n) c[static_cast<long long>(col + 1) * m + row] = static_cast<Out>(hi);
        continue;
#endif
        if constexpr (HAS_BIAS) {
            const float2 b = spio::unpack2<Element>(tile_bias.pair[i / 4]);
            lo += b.x, hi += b.y;
        }
        Out* dst = c + static_cast<long long>(row) * n + col;
        if (pairs) {  // col + 1 < n too, since n and col are even
            if constexpr (spio::detail::is_same_v<Out, float>) {
                *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
            } else {
                *reinterpret_cast<unsigned*>(dst) = spio::round_pack2<Out>(lo, hi);
            }
        } else {
            dst[0] = static_cast<Out>(lo);
            if (col + 1 < n) dst[1] = static_cast<Out>(hi);
        }
    }
}

#if TAIL
constexpr int CONSUMER_THREADS = CONSUMERS * 128;

/// TAIL: this split CTA's fp32 accumulators to partial `part` of the workspace, as they lie in
/// the registers (the sum maps them to C with acc_row / acc_col): float4 j of consumer thread t
/// at float4 (part * ACC / 4 + j) * CONSUMER_THREADS + t, so a warp writes 512 consecutive bytes
/// per store.
SPIO_DEVICE void store_partial(float* __restrict__ ws, const float (&d)[ACC], int part) {
    const int t = static_cast<int>(threadIdx.x) - 128;  // consumer thread 0..255
    float4* dst = reinterpret_cast<float4*>(ws) +
                  static_cast<long long>(part) * (ACC / 4) * CONSUMER_THREADS + t;
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j) {
        dst[j * CONSUMER_THREADS] = make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
    }
}
#endif

#if EPI_TMA
constexpr int BOX_COLS = 128 / int(sizeof(Out));  // columns of C in one 128-byte box row
constexpr int BOXES = BLOCK_N / BOX_COLS;         // boxes per warpgroup and tile
static_assert(BLOCK_N % BOX_COLS == 0, "matmul_sm90: a tile is whole boxes");

/// One consumer warpgroup (`wg` 0 or 1: rows 64 wg .. of the tile, C's rows row0 ..) stores its
/// accumulators (+ bias), rounded to Out, through the TMA map of C, box after box: box j (its
/// columns col0 + j BOX_COLS ..) is written to staging buffer `boxes` % 2 of the warpgroup,
/// then thread 0 of the warpgroup stores it (store_2d: rows >= M and columns >= N are not
/// written) and goes on; `boxes` counts the warpgroup's boxes over the CTA's tiles. Before a
/// buffer is rewritten the store that read it (two boxes back) has finished reading.
SPIO_DEVICE void store_tile_tma(const Smem& smem, const spio::tma::Descriptor* c_map,
                                const TileBias& tile_bias, const float (&d)[ACC], int wg,
                                int row0, int col0, unsigned& boxes) {
    const int t = threadIdx.x % 128;
    const unsigned barrier = 1 + wg;  // named barrier of the warpgroup (0 is __syncthreads')
    constexpr int PAIRS = BOX_COLS / 2;  // accumulator pairs (i, i + 1) a thread holds per box
    // One flat loop over the pairs, fully unrolled (d stays in registers): box j = i / PAIRS
    // starts at i % PAIRS == 0 and is stored after its last pair.
#pragma unroll
    for (int i = 0; i < ACC; i += 2) {
        const int j = i / PAIRS;
        const auto stage = smem.c[EPI(2 * wg + boxes % 2)];
        if (i % PAIRS == 0) {
            if (t == 0) spio::tma::store_wait_read<1>();  // the store two boxes back has read it
            spio::named_barrier_sync<128>(barrier);
        }
        // d[i], d[i + 1]: columns col, col + 1 of row `row` (col even), bytes `byte`.. of the
        // box row.
        const int row = spio::warpgroup::acc_row(t, i);
        const int col = spio::warpgroup::acc_col(t, i);
        const int byte = (col - j * BOX_COLS) * int(sizeof(Out));
        float lo = d[i], hi = d[i + 1];
        if constexpr (HAS_BIAS) {
            const float2 b = spio::unpack2<Element>(tile_bias.pair[i / 4]);
            lo += b.x, hi += b.y;
        }
        unsigned char* dst =
            reinterpret_cast<unsigned char*>(stage[ROW(row)][CH(byte / 16)].get()) + byte % 16;
        if constexpr (spio::detail::is_same_v<Out, float>) {
            *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
        } else {
            *reinterpret_cast<unsigned*>(dst) = spio::round_pack2<Out>(lo, hi);
        }
        if (i % PAIRS == PAIRS - 2) {
            spio::warpgroup::fence_async_proxy();  // the box's stores, seen by the TMA store
            spio::named_barrier_sync<128>(barrier);
            if (t == 0) {
                spio::tma::store_2d(c_map, col0 + j * BOX_COLS, row0, stage.get());
                spio::tma::store_commit();
            }
            ++boxes;
        }
    }
}
#endif

/// Tile `index` of the raster order: the (M, N) tile of C it names. `index` counts tiles
/// (CLUSTER_M 1) or pairs of M tiles of one N tile (CLUSTER_M 2: rasterized over pairs in groups
/// of ceil(raster / 2) pairs, i.e. raster M tiles rounded up to pairs; the CTA of `rank` takes
/// M tile 2 pair + rank).
SPIO_DEVICE void tile_of(int index, int tiles_m, int tiles_n, int raster, unsigned rank,
                         int& tile_m, int& tile_n) {
    if constexpr (CLUSTER_M == 1) {
        spio::grouped_tile(index, tiles_m, tiles_n, raster, tile_m, tile_n);
    } else {
        int pair;
        spio::grouped_tile(index, (tiles_m + 1) / 2, tiles_n, (raster + 1) / 2, pair, tile_n);
        tile_m = CLUSTER_M * pair + static_cast<int>(rank);
    }
}

/// The producer's copies of k tile `kt` of tile (tile_m, tile_n) into slot s, once the
/// consumers freed it: A's box, and B's (with a cluster, this CTA's half of it into slot s of
/// both CTAs; `full` still expects all of B: the peer copies the other half).
SPIO_DEVICE void load_slot(const Smem& smem, int s, unsigned phase, int kt, int tile_m,
                           int tile_n, unsigned rank, const spio::tma::Descriptor* a_map,
                           const spio::tma::Descriptor* b_map) {
    // The consumers freed slot s (with a cluster, those of both CTAs).
    spio::mbarrier::wait(&smem.empty[s], phase ^ 1);
    // A's box and all of B's (with a cluster, half of it comes from the peer).
    spio::mbarrier::arrive_expect_tx(&smem.full[s], SLOT_BYTES);
#if A_MN_MAJOR
    // A^T (K, M): block mb is 64 k rows x 64 m columns from column tile_m BLOCK_M + 64 mb.
#pragma unroll
    for (int mb = 0; mb < BLOCK_M / 64; ++mb) {
        spio::tma::load_2d(smem.a[STAGE(s)][MB(mb)].get(), a_map, tile_m * BLOCK_M + 64 * mb,
                           kt * BLOCK_K, &smem.full[s]);
    }
#else
    spio::tma::load_2d(smem.a[STAGE(s)].get(), a_map, kt * BLOCK_K, tile_m * BLOCK_M,
                       &smem.full[s]);
#endif
#if B_MN_MAJOR
    // B (K, N): block nb is 64 k rows x 64 n columns from column tile_n BLOCK_N + 64 nb.
#pragma unroll
    for (int nb = 0; nb < B_BLOCKS; ++nb) {
        spio::tma::load_2d(smem.b[STAGE(s)][NB(nb)].get(), b_map, tile_n * BLOCK_N + 64 * nb,
                           kt * BLOCK_K, &smem.full[s]);
    }
    (void)rank;
#else
    if constexpr (CLUSTER_M == 1) {
        spio::tma::load_2d(smem.b[STAGE(s)].get(), b_map, kt * BLOCK_K, tile_n * BLOCK_N,
                           &smem.full[s]);
    } else {  // rows rank * B_ROWS.. of the B tile, into slot s of both CTAs
        const int row = static_cast<int>(rank) * B_ROWS;
        spio::tma::load_2d_multicast(smem.b[STAGE(s)][N(row)].get(), b_map, kt * BLOCK_K,
                                     tile_n * BLOCK_N + row, &smem.full[s],
                                     (1u << CLUSTER_M) - 1);
    }
#endif
}

/// One consumer warpgroup's wgmma batch on slot s (its 64 rows from `rows`), accumulating onto
/// d, or overwriting it at the first k step when `accumulate` is false; committed.
SPIO_DEVICE void mma_slot(float (&d)[ACC], const Smem& smem, int s, int rows, bool accumulate) {
#if A_MN_MAJOR
    const auto a = smem.a[STAGE(s)][MB(rows / 64)];  // the warpgroup's 64-wide block
#else
    const auto a = smem.a[STAGE(s)][M(rows)];  // row 64 (w - 1): an 8-row atom's start
#endif
    const auto b = smem.b[STAGE(s)];
    spio::warpgroup::fence();
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
        // K-step ks: chunks 2 ks, 2 ks + 1 of the rows. The descriptor takes the address of
        // the atom's row 0, whose XOR key is 0; the hardware swizzles the other rows.
#if A_MN_MAJOR
        // Rows 16 ks.. of the block: 2 atoms of 8 rows along K, SBO apart (LBO unused: the
        // wgmma's 64 rows of M are one block).
        const auto da = spio::warpgroup::make_desc(a[KROW(16 * ks)].get(), 64 * 128, SWIZZLE_ATOM,
                                                   spio::warpgroup::Swizzle::B128);
#else
        const auto da = spio::warpgroup::make_desc(a[K8(2 * ks)].get(), 16, SWIZZLE_ATOM,
                                                   spio::warpgroup::Swizzle::B128);
#endif
#if B_MN_MAJOR
        // Rows 16 ks.. of every 64-wide block (2 atoms of 8 rows along K, SBO apart); the
        // blocks along N are one block's bytes apart (LBO).
        constexpr unsigned B_BLOCK_BYTES = 64 * 128;
        const auto db = spio::warpgroup::make_desc(b[NB(0)][KROW(16 * ks)].get(), B_BLOCK_BYTES,
                                                   SWIZZLE_ATOM, spio::warpgroup::Swizzle::B128);
        spio::warpgroup::mma_async<Element, BLOCK_N, true, A_MN_MAJOR>(d, da, db,
                                                                       accumulate || ks > 0);
#else
        const auto db = spio::warpgroup::make_desc(b[K8(2 * ks)].get(), 16, SWIZZLE_ATOM,
                                                   spio::warpgroup::Swizzle::B128);
        spio::warpgroup::mma_async<Element, BLOCK_N, false, A_MN_MAJOR>(d, da, db,
                                                                        accumulate || ks > 0);
#endif
    }
    spio::warpgroup::commit_group();
}

/// The persistent stream's next ring position: slot s + 1, or slot 0 with the phase flipped
/// after the last slot. The producer and the consumers walk the same sequence.
SPIO_DEVICE void next_slot(int& s, unsigned& phase) {
    if (++s == STAGES) {
        s = 0;
        phase ^= 1;
    }
}

/// A consumer warpgroup frees slot s if `when`: one arrival on this CTA's `empty` barrier, or
/// with a cluster thread r of the warpgroup arrives on the barrier of the CTA of rank r.
SPIO_DEVICE void release_slot(const Smem& smem, int s, bool when) {
    if constexpr (CLUSTER_M == 1) {
        if (when && threadIdx.x % 128 == 0) spio::mbarrier::arrive(&smem.empty[s]);
    } else {
        const unsigned t = threadIdx.x % 128;
        if (when && t < CLUSTER_M) spio::mbarrier::arrive_cluster(&smem.empty[s], t);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS) SPIO_MATMUL_CLUSTER
    matmul_sm90(Out* __restrict__ c, const __grid_constant__ spio::tma::Descriptor a_map,
                const __grid_constant__ spio::tma::Descriptor b_map,
#if EPI_TMA
                const __grid_constant__ spio::tma::Descriptor c_map,  // C (M, N), box 64 x BOX_COLS
#endif
                const Element* __restrict__ bias, int m, int n, int k, int raster
#if TAIL
                ,
                float* __restrict__ ws, int dp_tiles, int splits  // the split tail (tail_plan)
#endif
    ) {
    extern __shared__ unsigned char smem_raw[];
    const Smem smem = carve(smem_raw);
    const int warpgroup = threadIdx.x / 128;
    const int tiles_m = (m + BLOCK_M - 1) / BLOCK_M;
    const int tiles_n = (n + BLOCK_N - 1) / BLOCK_N;
    int tile_m, tile_n;
    unsigned rank = 0;  // this CTA's rank in its cluster: which half of the B box it copies
    if constexpr (CLUSTER_M > 1) {
        // Not launched as a cluster of 2 (the peer would never come): fail, don't hang.
        if (spio::cluster::size() != CLUSTER_M) __trap();
        rank = spio::cluster::rank();
    }
    int tile = static_cast<int>(blockIdx.x / CLUSTER_M);  // in the raster order
#if TAIL
    // CTAs past the whole tiles split the last ones along K: partial `part` of tile
    // dp_tiles + part / splits, split y = part % splits (its k range below).
    const int part = static_cast<int>(blockIdx.x) - dp_tiles;
    if (part >= 0) tile = dp_tiles + part / splits;
#endif
    // Cluster c takes the pair of M tiles 2 pair, 2 pair + 1 of one N tile (tile_of).
    if constexpr (!PERSISTENT) tile_of(tile, tiles_m, tiles_n, raster, rank, tile_m, tile_n);
    // Persistent: this CTA (cluster) walks work items first, first + stride, ... (tiles, or
    // pairs of M tiles with a cluster) in the raster order, one continuous k-tile stream.
    const int work = (tiles_m + CLUSTER_M - 1) / CLUSTER_M * tiles_n;
    const int first = static_cast<int>(blockIdx.x) / CLUSTER_M;
    const int stride = static_cast<int>(gridDim.x) / CLUSTER_M;
    int k_tiles = (k + BLOCK_K - 1) / BLOCK_K;
    int kt0 = 0;  // split-K or a split tail: this CTA's k tiles are kt0 .. kt0 + k_tiles - 1
#if TAIL
    if (part >= 0) {  // split y's balanced share: never empty (splits <= k tiles)
        const int y = part % splits;
        kt0 = y * k_tiles / splits;
        k_tiles = (y + 1) * k_tiles / splits - kt0;
    }
#endif
    if constexpr (SPLIT_K > 1) {
        const int per = (k_tiles + SPLIT_K - 1) / SPLIT_K;
        kt0 = min(static_cast<int>(blockIdx.y) * per, k_tiles);
        k_tiles = min(per, k_tiles - kt0);
        c += static_cast<long long>(blockIdx.y) * m * n;  // slice y of the workspace
    }

    if (threadIdx.x == 0) {
        spio::tma::prefetch(&a_map);
        spio::tma::prefetch(&b_map);
#if EPI_TMA
        spio::tma::prefetch(&c_map);
#endif
        for (int s = 0; s < STAGES; ++s) {
            spio::mbarrier::init(&smem.full[s], 1);
            spio::mbarrier::init(&smem.empty[s], CONSUMERS * CLUSTER_M);
        }
        spio::mbarrier::fence_init();
    }
    if constexpr (CLUSTER_M == 1) {
        __syncthreads();
    } else {
        spio::cluster::sync();  // both CTAs' barriers initialised before any remote access
    }

    if (warpgroup == 0) {
        // ---- producer: one thread keeps the ring full ----------------------------------------
        if constexpr (REBALANCE) spio::warpgroup::lower_registers<PRODUCER_REGISTERS>();
        if (threadIdx.x == 0) {
            if constexpr (!PERSISTENT) {
                for (int kt = 0; kt < k_tiles; ++kt) {
                    load_slot(smem, kt % STAGES, (kt / STAGES) & 1, kt0 + kt, tile_m, tile_n,
                              rank, &a_map, &b_map);
                }
            } else {
                // One stream over the CTA's tiles: slot and phase carry over, so the next
                // tile's first slots fill while the consumers run this tile's epilogue.
                int s = 0;
                unsigned phase = 0;
                for (int w = first; w < work; w += stride) {
                    int tm, tn;
                    tile_of(w, tiles_m, tiles_n, raster, rank, tm, tn);
                    for (int kt = 0; kt < k_tiles; ++kt) {
                        load_slot(smem, s, phase, kt, tm, tn, rank, &a_map, &b_map);
                        next_slot(s, phase);
                    }
                }
            }
        }
        if constexpr (CLUSTER_M > 1) {
            spio::cluster::arrive();  // stay until the peer is done with this CTA's memory
            spio::cluster::wait();
        }
        return;
    }

    // ---- consumers: warpgroup w multiplies rows 64 (w - 1) .. of the tile -------------------
    if constexpr (REBALANCE) spio::warpgroup::raise_registers<CONSUMER_REGISTERS>();
    const int rows = 64 * (warpgroup - 1);
    float d[ACC];
#if EPI_TMA
    unsigned boxes = 0;  // this warpgroup's boxes stored so far (store_tile_tma)
#endif
    if constexpr (!PERSISTENT) {
        // The first k tile's wgmma overwrites d (accumulate false), so only a split-K CTA with
        // an empty range (it stores zeros) needs d zeroed: zeroing it here too made ptxas
        // serialize every wgmma of the TMA-store variants (C7515, "non wgmma instructions
        // defining accumulator registers").
        if constexpr (SPLIT_K > 1) {
#pragma unroll
            for (int i = 0; i < ACC; ++i) d[i] = 0.f;
        }
        for (int kt = 0; kt < k_tiles; ++kt) {
            const int s = kt % STAGES;
            spio::mbarrier::wait(&smem.full[s], (kt / STAGES) & 1);
            mma_slot(d, smem, s, rows, kt > 0);
            spio::warpgroup::wait_group<1>();  // slot kt - 1's batch has completed
            release_slot(smem, (kt - 1) % STAGES, kt > 0);
        }
        const TileBias tile_bias = load_bias(bias, tile_n * BLOCK_N, n);
        spio::warpgroup::wait_group<0>();
        // Every arrival on the peer's barriers is issued: the peer may exit once this CTA's own
        // consumers are done too (a CTA past M stores nothing: its rows are >= m).
        if constexpr (CLUSTER_M > 1) spio::cluster::arrive();
#if TAIL
        if (part >= 0) {
            store_partial(ws, d, part);
        } else
#endif
        {
#if EPI_TMA
            store_tile_tma(smem, &c_map, tile_bias, d, warpgroup - 1, tile_m * BLOCK_M + rows,
                           tile_n * BLOCK_N, boxes);
#else
            store_tile(c, bias, tile_bias, d, tile_m * BLOCK_M + rows, tile_n * BLOCK_N, m, n);
#endif
        }
    } else {
        // The producer's stream, tile after tile: slot and phase carry over. Each tile's last
        // slot is released once its batch completed, before the epilogue, so the producer
        // refills it with the next tile's k tiles while this one is stored.
        int s = 0;
        unsigned phase = 0;
        for (int w = first; w < work; w += stride) {
            int tm, tn;
            tile_of(w, tiles_m, tiles_n, raster, rank, tm, tn);
#pragma unroll
            for (int i = 0; i < ACC; ++i) d[i] = 0.f;
            int prev = 0;  // the slot of the previous k tile of this tile
            for (int kt = 0; kt < k_tiles; ++kt) {
                spio::mbarrier::wait(&smem.full[s], phase);
                mma_slot(d, smem, s, rows, kt > 0);
                spio::warpgroup::wait_group<1>();  // the previous slot's batch has completed
                release_slot(smem, prev, kt > 0);
                prev = s;
                next_slot(s, phase);
            }
            const TileBias tile_bias = load_bias(bias, tn * BLOCK_N, n);
            spio::warpgroup::wait_group<0>();
            release_slot(smem, prev, true);  // the tile's last slot: its batch has completed
#if EPI_TMA
            // The boxes' stores run on under the next tile's main loop.
            store_tile_tma(smem, &c_map, tile_bias, d, warpgroup - 1, tm * BLOCK_M + rows,
                           tn * BLOCK_N, boxes);
#else
            store_tile(c, bias, tile_bias, d, tm * BLOCK_M + rows, tn * BLOCK_N, m, n);
#endif
        }
        // Every arrival on the peer's barriers is issued (the last ones above).
        if constexpr (CLUSTER_M > 1) spio::cluster::arrive();
    }
#if EPI_TMA
    // The staging buffers stay until the last stores have read them; their writes to C
    // complete with the grid (as CUTLASS's TMA-store epilogue ends: wait_group.read 0).
    if (threadIdx.x % 128 == 0) spio::tma::store_wait_read<0>();
#endif
    if constexpr (CLUSTER_M > 1) spio::cluster::wait();
}
