/// Grouped 2-D convolution, group width 8, stride 1 or 2, forward (also the input gradient):
///   y[n,p,q,g8+k] = b[g8+k] + sum_{r,s} sum_{c<8} xv[n, SH p+r-PAD_H, SW q+s-PAD_W, g8+c] w[g8+k, c, r, s]
/// where SH, SW = STRIDE_H, STRIDE_W and xv is x dilated by DILATE_H, DILATE_W (xv row v = x row
/// v / DILATE_H when DILATE_H divides v, else zero; the dgrad of a stride-2 layer runs with
/// DILATE 2 and end padding that gives dx the layer's input size). Zero rows of xv are never
/// loaded nor multiplied; zero columns are neither loaded nor multiplied when the tile has an
/// even number of 16-column M tiles (PHASED: see tile_col), else zero-filled in shared memory.
/// (the dgrad variant, TRANSPOSED_WEIGHT, passes dy as x and the forward weight, padding R-1-pad,
/// and reads each tap as w[g8+c, k, R-1-r, S-1-s]: the 8x8 block transposed and the taps rotated
/// 180 degrees, so dx is this same formula with no separate weight transform).
///
/// Tiling: one CTA per (BLOCK_P output rows, BLOCK_Q output columns, WARPS channel groups) tile of
///   IMAGES images (blockIdx.y = n / IMAGES; the batch is a run-time argument: no recompile per
///   batch size). One warp per group of 8 channels; when WARPS does not divide the GROUPS
///   groups (RAGGED_GROUPS) the last group block's warps past the last group idle through the
///   barriers. IMAGES = 2 (BLOCK_Q = 8, for Q <= 8 such as
///   7x7 maps) puts two images side by side in the M = 16 side of the mma: fragment rows 0-7 are
///   columns of image n, rows 8-15 the same columns of image n + 1, each image its own TILE_W
///   region of the shared-memory row (A_HI apart), so a 7-column map fills 14 of 16 rows
///   instead of 7. Each filter tap (r, s) of a group is an 8x8 matrix held in one register per
///   thread (R*S registers: the B operand of mma.m16n8k8), for the whole CTA. A 16-column strip of
///   an output row is the M = 16 side of the mma; K = 8 input channels; N = 8 output channels.
/// Overlap-add: input row i of the tile contributes to output rows o = (i-r) / SH (r < R, SH
///   dividing i-r). The accumulators are a ring of RING = ceil(R / SH) output rows (output row o
///   in slot o mod RING); the row loop steps by STEP_ROWS rows, a multiple of UNROLL = SH * RING,
///   so every ring slot index is a compile-time constant (and, when STAGES and 2 divide it too,
///   every stage and staged-output buffer index). After input row i, output row (i-(R-1)) / SH (when SH divides
///   i-(R-1)) has received all R contributions: it is staged (+ bias) for storing and its slot
///   restarts at zero (the next row of that slot, o + RING, starts at input row SH (o + RING)
///   >= SH o + R). Products that cannot reach a stored row are skipped
///   (CTA-uniform predicates): input rows in the zero padding, and output rows outside the tile
///   or the image; at 7x7 on a 7x7 map that is 54 of the 91 (input row, filter row) products.
/// Traffic per CTA: reads IMAGES·TILE_H·TILE_W·WARPS·16 B of x (TILE_H = (BLOCK_P-1)·SH + R,
///   TILE_W = (BLOCK_Q-1)·SW + S) (halo re-reads
///   mostly hit L2) and WARPS·8·8·R·S·2 B of w; writes IMAGES·BLOCK_P·BLOCK_Q·WARPS·16 B of y
///   (at most; columns past Q are not stored). Bound: DRAM (2·8·R·S
///   FLOP per 4 B of x + y = 36 FLOP/B at 3x3; at 7x7 the mma.sync rate is the ceiling).
/// Pipeline: STAGES input rows in shared memory, filled by cp.async (zero-fill for rows/columns
///   outside the image: that is the padding); one __syncthreads per input row, which also frees
///   the stage the next prefetch overwrites.
///   TMA_ROWS (sm_90+, tiles of one image, no dilation along W): instead one thread copies each
///   row with the tensor memory accelerator (`in_map`: x as (N*H rows, W, C), a box of one row x
///   TILE_W pixels x the CTA's WARPS*8 channels, zeros outside the tensor: the padding columns
///   and a ragged group block's missing channels), and the row's stage has an mbarrier that the
///   copy's bytes complete; the threads wait on it where they waited for their cp.async groups.
///   Rows in the padding (or the dilation's zero rows) are not copied: the barrier completes on
///   the thread's arrival alone, and no product reads them. Measured on an H100 (C64 56x56 N128,
///   a loads-only variant): the cp.async row stream read 51 MB at 1.1-1.3 TB/s, from DRAM or L2
///   alike, while one bulk copy per row read it at 1.7 TB/s (3.4 from L2).
/// Shared memory: (STAGES, WARPS, TILE_W, 4 words): each warp reads only its group's plane, 8
///   consecutive 16-byte pixels per mma row block = 32 consecutive words, so no bank conflicts
///   (at SW = 2 every other pixel: two wavefronts per read). TMA_ROWS: (STAGES, W, WARPS, 4 words),
///   as the box lands, group g of pixel j at 16-byte slot g ^ (j >> (3 - log2 WARPS)) % WARPS
///   (TMA's WARPS*16-byte swizzle), so the 8 pixels a fragment reads are again in 8 bank groups;
///   each stage holds TILE_W rounded up to 8 pixels and starts on the swizzle's period
///   (ROW_ALIGN = 128 * WARPS bytes).
/// Stores: a finished row (+ bias, rounded) goes to a double-buffered shared-memory row
///   (WARPS, STAGED_Q, 16 B; plane stride padded by 8/WARPS chunks so the 16-byte reads of 8
///   consecutive threads hit 8 distinct bank groups); after the next barrier the whole CTA
///   writes it out with 16-byte stores, consecutive threads covering consecutive 16 B of a pixel.
/// Weights: the CTA's WARPS groups of w are one contiguous block, copied to shared memory by
///   coalesced loads while the prologue rows are in flight (a float32 weight, WElem = float
///   under autocast, rounded to Elem on the way), then read into registers.
/// Assumes: NHWC (channels_last) x and y, C % 8 == 0, 16-byte aligned x/y, weight (C, 8, R, S)
///   contiguous or channels_last (the Weight types' dimension order: (C8, KO, CI, R, S) or
///   (C8, KO, R, S, CI); the kernel indexes it by name), bias (C) contiguous, both of WElem
///   (Elem, or float); one image of x and y below 2^31 elements (the CTA's first image is a
///   64-bit offset; the second image of IMAGES = 2 sits in the 32-bit copy-slot offsets, which
///   holds: x in 16-byte units stays below 2^29, y in 4-byte words below 2^31 - 8);
///   `batch` = N (the second image of the last CTA is masked when N is odd).

#include "spio/async_copy.h"
#include "spio/cta.h"
#include "spio/mbarrier.h"
#include "spio/mma.h"
#include "spio/tma.h"
#include "spio/vector.h"

#if TMA_ROWS && !SPIO_TMA
#error "conv2d_gw8_fprop.cu: TMA_ROWS needs sm_90 or later"
#endif

namespace {

/// Output column (within the tile) of fragment row g of M tile m. Usually 16 m + g. PHASED (an
/// input dilated by 2 in W: the dgrad of a layer with stride 2 in W) pairs the tiles: tile 2k
/// holds the even columns 32 k + 2 g, tile 2k + 1 the odd ones 32 k + 2 g + 1. Every column a tile
/// reads for one tap s then has one parity, so the taps that land on the dilation's zero columns
/// are skipped at compile time (half the MMAs of a 3x3 layer).
SPIO_DEVICE constexpr int tile_col(int m, int g) {
    return PHASED ? 32 * (m / 2) + 2 * g + m % 2 : 16 * m + g;
}

/// PHASED: whether tap s of M tile m reads the dilation's zero columns (dilated column
/// q0 - PAD_W + tile_col(m, g) + s; q0 and 32 k + 2 g are even, STRIDE_W is 1).
SPIO_DEVICE constexpr bool zero_tap(int m, int s) {
    return PHASED && ((m % 2 + s - PAD_W) % 2 + 2) % 2 != 0;
}

SPIO_DEVICE constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }
SPIO_DEVICE constexpr int lcm(int a, int b) { return a / gcd(a, b) * b; }

/// Input rows per step of the main loop: UNROLL (so ring slots are compile-time constants), or
/// a multiple of it that STAGES and 2 divide too (stage and output-buffer indices constant as
/// well) when that stays short: at most MAX_STEP_ROWS rows (24, `fprop.MAX_STEP_ROWS`: at stride
/// 1, 3x3 at every stage count, 5x5 with 2 or 4 stages, 7x7 with 2), so the unrolled loop stays
/// small.
constexpr int STEP_ROWS =
    lcm(lcm(UNROLL, STAGES), 2) <= MAX_STEP_ROWS ? lcm(lcm(UNROLL, STAGES), 2) : UNROLL;

/// (i0 + u) mod n for i0 a multiple of STEP_ROWS: a compile-time constant when n divides
/// STEP_ROWS and u is one.
SPIO_DEVICE constexpr int step_mod(int i0, int u, int n) {
    return STEP_ROWS % n == 0 ? u % n : (i0 + u) % n;
}

/// The accumulator-ring slot of output row (i0 + d) / STRIDE_H, for i0 a multiple of UNROLL and
/// d a compile-time constant that STRIDE_H divides (negative d included).
SPIO_DEVICE constexpr int ring_slot(int d) { return ((d / STRIDE_H) % RING + RING) % RING; }

}  // namespace

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    conv2d_gw8_fprop(unsigned* __restrict__ out_ptr, const uint4* __restrict__ in_ptr,
                     const WElem* __restrict__ weight_ptr, const WElem* __restrict__ bias_ptr,
                     int batch
#if TMA_ROWS
                     ,
                     const __grid_constant__ spio::tma::Descriptor in_map
#endif
    ) {
    // ---- setup: block -> tile, warp -> channel group, lane -> fragment coordinates ----------
    extern __shared__ uint4 smem_raw[];
    // TMA_ROWS: the input rows start on the swizzle's period (the host adds the slack). The
    // pointer stays smem_raw plus an offset, so the compiler keeps shared-memory loads (LDS; an
    // address rebuilt from an integer would be a generic load).
    const unsigned row_pad = TMA_ROWS ? (ROW_ALIGN - spio::smem_address(smem_raw) % ROW_ALIGN) %
                                            ROW_ALIGN
                                      : 0;
    unsigned* const smem_words =
        reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(smem_raw) + row_pad);
    const SmemInput smem_input(smem_words);  // (STAGE, C8, W, CP); TMA_ROWS (STAGE, W, C8, CP)
    const SmemOutput smem_output(smem_words +
                                 SmemInput::storage_size());  // (OUTBUF, C8, Q, CP), padded
    const SmemWeight smem_weight(reinterpret_cast<Elem*>(
        smem_words + SmemInput::storage_size() +
        SmemOutput::storage_size()));  // this CTA's WARPS groups, in the weight's layout
    // TMA_ROWS: one barrier per stage, completed by its row's copy.
    unsigned long long* const row_full =
        reinterpret_cast<unsigned long long*>(smem_weight.get() + SmemWeight::storage_size());
    const int lane = spio::lane_id();
    const C8 warp_group(spio::warp_id());  // this warp's group within the CTA
    const BlockIdx block(blockIdx.x);
    const int p0 = block.get<PB>().unfold().get();  // first output row of the tile
    const int q0 = block.get<QB>().unfold().get();  // first output column of the tile
    const C8 group0 = block.get<GB>().unfold().template fold<8>();
    const C8 group = group0 + warp_group;
    // RAGGED_GROUPS (WARPS does not divide the GROUPS channel groups; odd group counts such as
    // 7, 19 or 55 would otherwise run 1-warp CTAs): the last group block has warps past the
    // last group. They load nothing, multiply nothing and store nothing, but keep to the
    // CTA's barriers.
    const bool warp_live = !RAGGED_GROUPS || group.get() < GROUPS;
    const long long image0 = static_cast<long long>(blockIdx.y) * IMAGES;  // 64-bit offsets
    const int images = min(IMAGES, batch - static_cast<int>(image0));  // 1 or 2 images here
    // Tensors take non-const pointers; the kernel only reads x, w and b.
    const Input input(const_cast<uint4*>(in_ptr) + image0 * Input::storage_size());  // (H, W, C8)
    const Output output(out_ptr + image0 * Output::storage_size());    // (P, Q, C8, CP) half2
    const CP lane_pair(lane % 4);  // this thread's channel pair (2t, 2t+1) in A, B and C
    const int lane_row = lane / 4;  // this thread's fragment row (pixel) and B column (channel)

    unsigned reg_weight[KERNEL_R][KERNEL_S];  // filled once the weights are in shared memory
    float bias_lo = 0.f, bias_hi = 0.f;
    if (HAS_BIAS && warp_live) {
        // Rounded to Elem first (a no-op for Elem data): a float32 bias adds what autocast's
        // cast to fp16/bf16 would.
        const Bias bias(const_cast<WElem*>(bias_ptr));  // (C8, KO)
        bias_lo = static_cast<float>(static_cast<Elem>(*bias[group][KO(2 * lane_pair.get())]));
        bias_hi =
            static_cast<float>(static_cast<Elem>(*bias[group][KO(2 * lane_pair.get() + 1)]));
    }

    // ---- copy slots: what this thread copies of every input row and writes of every output row
    // A tile row is WARPS * IMAGES * TILE_W 16-byte chunks of x (consecutive threads:
    // consecutive 16 B of one pixel), LOAD_SLOTS per thread; a staged output row is WARPS *
    // STAGED_Q chunks of y, STORE_SLOTS per thread. Which pixel, group and image a slot holds,
    // and whether it lies inside the image, is the same in every row, so it is worked out once
    // here, as offsets in the tensors' units (16-byte chunks of x, 4-byte words of y and of the
    // shared-memory tiles) into row 0 (of x or y, from the CTA's first image; -1: outside
    // the image, zero-filled / not stored) and into stage 0 of the shared-memory ring (-1: the
    // slot copies nothing); a row only adds its H / P and its STAGE / OUTBUF. Plain 32-bit
    // offsets keep the slots in few registers.
    constexpr int THREADS = WARPS * 32;
    constexpr int LOAD_ITEMS = WARPS * IMAGES * TILE_W;
    constexpr int LOAD_SLOTS = (LOAD_ITEMS + THREADS - 1) / THREADS;
    constexpr int STORE_ITEMS = WARPS * STAGED_Q;
    constexpr int STORE_SLOTS = (STORE_ITEMS + THREADS - 1) / THREADS;
    int load_src[LOAD_SLOTS], load_dst[LOAD_SLOTS], store_dst[STORE_SLOTS], store_src[STORE_SLOTS];
#pragma unroll
    for (int k = 0; k < LOAD_SLOTS; ++k) {
        // Tile column j of image img is column SW q0 - PAD_W + j of the dilated input.
        const int t = static_cast<int>(threadIdx.x) + k * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        const int img = IMAGES == 1 ? 0 : j / TILE_W;
        const int wv = q0 * STRIDE_W - PAD_W + (IMAGES == 1 ? j : j % TILE_W);
        const int w = wv / DILATE_W;
        const bool inside = wv >= 0 && wv % DILATE_W == 0 && w < IN_W && img < images &&
                            (!RAGGED_GROUPS || (group0 + g).get() < GROUPS);
        load_src[k] = inside ? static_cast<int>(input[W(w)][group0 + g].get() - input.get()) +
                                   img * Input::storage_size()
                             : -1;
        // PHASED never reads the dilation's zero columns: they are not filled.
        const bool active =
            (LOAD_ITEMS % THREADS == 0 || t < LOAD_ITEMS) && !(PHASED && (wv & 1) != 0);
        load_dst[k] =
            active ? static_cast<int>(smem_input[g][W(j)].get() - smem_input.get()) : -1;
    }
#pragma unroll
    for (int k = 0; k < STORE_SLOTS; ++k) {
        // Staged column j is column j of the tile, or with IMAGES = 2 column j % 8 of image j / 8.
        const int t = static_cast<int>(threadIdx.x) + k * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        const int img = IMAGES == 1 ? 0 : j / 8;
        const int q = q0 + (IMAGES == 1 ? j : j % 8);
        const bool active = (STORE_ITEMS % THREADS == 0 || t < STORE_ITEMS) && q < OUT_Q &&
                            img < images && (!RAGGED_GROUPS || (group0 + g).get() < GROUPS);
        store_dst[k] = active ? static_cast<int>(output[Q(q)][group0 + g].get() - output.get()) +
                                    img * Output::storage_size()
                              : -1;
        store_src[k] = active ? static_cast<int>(smem_output[g][Q(j)].get() - smem_output.get())
                              : 0;
    }

    // ---- stages: load one input row, multiply it into the ring, store a finished row ----------
    // Input row i of the tile is row SH p0 - PAD_H + i of the dilated input. Pixels outside the
    // image and the dilation's zero rows and columns are zero-filled: that is the convolution's
    // padding. With IMAGES = 2, shared-memory column j = img * TILE_W + jj holds column jj of
    // image img.
    auto load_input_row = [&](int i, int stage) {
        const int v = p0 * STRIDE_H - PAD_H + i;  // row of the dilated input (x itself at DILATE 1)
        const int h = v / DILATE_H;
        const bool row_inside = v >= 0 && v % DILATE_H == 0 && h < IN_H;
#if TMA_ROWS
        if (threadIdx.x == 0) {
            unsigned long long* const bar = &row_full[stage];
            if (row_inside) {
                spio::mbarrier::arrive_expect_tx(bar, ROW_BOX_BYTES);
                spio::tma::load_3d(smem_input[STAGE(stage)].get(), &in_map, group0.get() * 8,
                                   q0 * STRIDE_W - PAD_W, static_cast<int>(image0) * IN_H + h,
                                   bar);
            } else {
                spio::mbarrier::arrive(bar);  // a padding or dilation row: nothing reads it
            }
        }
#else
        // An outside row is zero-filled from row 0's address.
        const uint4* row = input[H(row_inside ? h : 0)].get();
        unsigned* stage_base = smem_input[STAGE(stage)].get();
#pragma unroll
        for (int k = 0; k < LOAD_SLOTS; ++k) {
            if (load_dst[k] >= 0) {
                spio::cp_async_16(stage_base + load_dst[k], row + max(load_src[k], 0),
                                  row_inside && load_src[k] >= 0);
            }
        }
#endif
    };

    float reg_acc[RING][MMA_M_TILES][4];  // ring of RING output rows x 16-column strips
#pragma unroll
    for (int slot = 0; slot < RING; ++slot)
#pragma unroll
        for (int m = 0; m < MMA_M_TILES; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) reg_acc[slot][m][e] = 0.f;

    // Input row i (i = i0 + u, u < STEP_ROWS): A(s) = pixels SW j + s of the row, shared by
    // every r; it adds to output row (i - r) / SH when SH divides i - r (u - r: i0 is a multiple
    // of STEP_ROWS, hence of SH), in ring slot ring_slot(u - r). A product is skipped when the input row is zero
    // (padding or a dilation row) or the output row is outside the tile or the image: it could
    // only add zeros or feed a row that is never stored.
    auto multiply_row = [&](int i, int stage, int u) {
        if (!warp_live) return;  // warp-uniform
        const auto plane = smem_input[STAGE(stage)][warp_group];
        const int v = p0 * STRIDE_H - PAD_H + i;
        const bool row_real = v >= 0 && v % DILATE_H == 0 && v / DILATE_H < IN_H;
        const int rows = min(BLOCK_P, OUT_P - p0);  // output rows this tile stores
        bool live[KERNEL_R];
#pragma unroll
        for (int r = 0; r < KERNEL_R; ++r) {
            live[r] = row_real && (u - r) % STRIDE_H == 0 && i - r >= 0 &&
                      (i - r) / STRIDE_H < rows;
        }
#pragma unroll
        for (int s = 0; s < KERNEL_S; ++s) {
#pragma unroll
            for (int m = 0; m < MMA_M_TILES; ++m) {
                if (zero_tap(m, s)) continue;  // compile-time: m and s are unrolled
                const auto pixel = plane[W(STRIDE_W * tile_col(m, lane_row) + s)][lane_pair];
                const unsigned a[2] = {*pixel, *pixel[W(A_HI)]};  // fragment rows g, g + 8
#pragma unroll
                for (int r = 0; r < KERNEL_R; ++r) {
                    if ((u - r) % STRIDE_H == 0 && live[r]) {
                        spio::mma_m16n8k8<Elem>(reg_acc[ring_slot(u - r)][m], a, reg_weight[r][s]);
                    }
                }
            }
        }
    };

    // Output row j = (i - (R - 1)) / SH has all its contributions after input row i: add the
    // bias, round, and stage it in smem_output[buf] (each warp its own plane); restart the slot.
    auto stage_row = [&](bool valid, int buf, int slot) {
        if (valid) {
            const auto plane = smem_output[OUTBUF(buf)][warp_group];
#pragma unroll
            for (int m = 0; m < MMA_M_TILES; ++m) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {  // fragment rows lane/4 and lane/4 + 8
                    // Without a bias nothing is added (x + 0.f is an instruction: it maps -0
                    // to +0).
                    const float lo = reg_acc[slot][m][2 * half] + (HAS_BIAS ? bias_lo : -0.f);
                    const float hi = reg_acc[slot][m][2 * half + 1] + (HAS_BIAS ? bias_hi : -0.f);
                    *plane[Q(tile_col(m, lane_row + 8 * half))][lane_pair] =
                        spio::round_pack2<Elem>(lo, hi);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MMA_M_TILES; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) reg_acc[slot][m][e] = 0.f;
    };

    // A staged row (visible after a barrier) to global memory, 16 B per thread and slot.
    auto write_row = [&](int p, int buf) {
        unsigned* row = output[P(p)].get();
        const unsigned* staged = smem_output[OUTBUF(buf)].get();
#pragma unroll
        for (int k = 0; k < STORE_SLOTS; ++k) {
            if (store_dst[k] >= 0) {
                *reinterpret_cast<uint4*>(row + store_dst[k]) =
                    *reinterpret_cast<const uint4*>(staged + store_src[k]);
            }
        }
    };

    // ---- prologue: the first STAGES - 1 rows in flight ----------------------------------------
#if TMA_ROWS
    // The barriers, before the first copy; the other threads first wait on them after the
    // weights' __syncthreads below.
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) spio::mbarrier::init(&row_full[s], 1);
        spio::mbarrier::fence_init();
    }
#endif
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (i < TILE_H) load_input_row(i, i);
        if (!TMA_ROWS) spio::cp_async_commit();
    }

    // ---- weights: the CTA's WARPS groups are one contiguous block of w; copy it to shared memory
    // with coalesced 2-byte loads (a direct fragment load touches 32 sectors per instruction:
    // 32 L1 wavefronts), overlapping the prologue's rows in flight. Then each tap in a register:
    // B[c][k] = w[g8 + k, c, r, s], k = lane/4, c = 2t, 2t+1.
    // A float32 weight (WElem = float, under autocast) is rounded to Elem here, as autocast's
    // cast would round it.
    const Weight weight(const_cast<WElem*>(weight_ptr));  // (C8, KO, CI, R, S) or (.., R, S, CI)
    const WElem* weight_block = weight[group0].get();
    // The groups of this block that exist (all WARPS unless RAGGED_GROUPS); a group's weights
    // are contiguous (C8 is the outermost dimension of either layout).
    const int weight_count = RAGGED_GROUPS ? min(WARPS, GROUPS - group0.get()) *
                                                 (SmemWeight::storage_size() / WARPS)
                                           : SmemWeight::storage_size();
    for (int t = threadIdx.x; t < weight_count; t += WARPS * 32) {
        smem_weight.get()[t] = static_cast<Elem>(weight_block[t]);
    }
    __syncthreads();
    // An idle warp (RAGGED_GROUPS) fills its registers from weight slots the copy above skipped;
    // it never multiplies, so those values are never used.
#pragma unroll
    for (int r = 0; r < KERNEL_R; ++r) {
#pragma unroll
        for (int s = 0; s < KERNEL_S; ++s) {
            if constexpr (TRANSPOSED_WEIGHT) {
                // dgrad: B[c][k] = w[g8 + c, k, R-1-r, S-1-s] (the 8x8 block transposed, the
                // taps rotated 180 degrees), read straight from the forward weight.
                const auto tap = smem_weight[warp_group][R(KERNEL_R - 1 - r)][S(KERNEL_S - 1 - s)]
                                            [CI(lane_row)];
                reg_weight[r][s] = spio::pack2<Elem>(*tap[KO(2 * lane_pair.get())],
                                                     *tap[KO(2 * lane_pair.get() + 1)]);
            } else {
                const auto tap = smem_weight[warp_group][KO(lane_row)][R(r)][S(s)];
                reg_weight[r][s] = spio::pack2<Elem>(*tap[CI(2 * lane_pair.get())],
                                                     *tap[CI(2 * lane_pair.get() + 1)]);
            }
        }
    }

    // ---- main loop: rows in groups of STEP_ROWS so ring slots are compile-time constants ------
    // STEP_ROWS is a multiple of UNROLL (ring slots); when it is also one of STAGES and of 2 (the
    // staged-output buffers), every shared-memory offset of a row is a compile-time constant too.
    int pending_p = -1;  // output row staged by the previous step (-1: none), and its buffer
    int pending_buf = 0;
#pragma unroll 1
    for (int i0 = 0; i0 < TILE_H; i0 += STEP_ROWS) {
#pragma unroll
        for (int u = 0; u < STEP_ROWS; ++u) {  // fully unrolled: u and every slot are constants
            const int i = i0 + u;
            if (i < TILE_H) {  // uniform across the CTA: the barrier below is safe
#if TMA_ROWS
                // Row i's copy has landed (its stage's (i / STAGES)-th phase).
                spio::mbarrier::wait(&row_full[step_mod(i0, u, STAGES)], (i / STAGES) & 1);
#else
                spio::cp_async_wait<STAGES - 2>();
#endif
                __syncthreads();  // row i visible; row i - 1 and the last staged row are done
                if (pending_p >= 0) write_row(pending_p, pending_buf);
                const int next = i + STAGES - 1;
                if (next < TILE_H) load_input_row(next, step_mod(i0, u + STAGES - 1, STAGES));
                if (!TMA_ROWS) spio::cp_async_commit();
                multiply_row(i, step_mod(i0, u, STAGES), u);
                pending_p = -1;
                if ((u - (KERNEL_R - 1)) % STRIDE_H == 0) {  // an output row is complete
                    const int d = i - (KERNEL_R - 1);
                    const int j = d / STRIDE_H;
                    const bool valid = d >= 0 && p0 + j < OUT_P;
                    // The next staging into buffer i % 2 (input row i + 2) comes after the
                    // barrier that follows this row's write.
                    const int buf = step_mod(i0, u, 2);
                    stage_row(valid, buf, ring_slot(u - (KERNEL_R - 1)));
                    pending_p = valid ? p0 + j : -1;
                    pending_buf = buf;
                }
            }
        }
    }

    // ---- epilogue: the last staged row ---------------------------------------------------------
    __syncthreads();
    if (pending_p >= 0) write_row(pending_p, pending_buf);
}
