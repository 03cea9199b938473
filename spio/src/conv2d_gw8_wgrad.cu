/// Grouped 2-D convolution, group width 8, stride 1 or 2, weight and bias gradients (partials):
///   dw[g8+k, c, r, s] = sum_{n,p,q} dy[n, p, q, g8+k] x[n, SH p+r-PAD_H, SW q+s-PAD_W, g8+c]
///   db[g8+k]          = sum_{n,p,q} dy[n, p, q, g8+k]
/// This kernel writes one fp32 partial of dw and db per (split, column tile); the
/// conv2d_gw8_wgrad_reduce kernel sums the partials in a fixed order, so results are bitwise
/// reproducible (no float atomics).
///
/// Tiling: blockIdx.x = (column tile of BLOCK_Q output columns, block of WARPS channel groups);
///   blockIdx.y = split. A task is (image n, chunk of BLOCK_P output rows); split y runs tasks
///   [y*TPS, min((y+1)*TPS, tasks)) in order (tasks and TPS are run-time: the batch is not
///   compiled in). One warp per channel group; when WARPS does not divide the GROUPS groups
///   (RAGGED_GROUPS) the last group block's warps past the last group idle through the barriers.
/// MMA mapping (m16n8k8): M = 16 = (two filter columns s, s+1) x 8 input channels, N = 8 output
///   channels, K = 8 output columns q. A = x rows loaded transposed by ldmatrix.x2.trans (one 8x8
///   matrix per filter column), B = dy loaded by ldmatrix.x1.trans. The bias gradient is one more
///   mma per dy row chunk with A = ones.
/// Rows: input row i of a task feeds dy rows (i - r) / SH (r < R, SH dividing i - r) through
///   filter row r; dy row o is loaded with input row SH o (the stream position of its first use)
///   and stays in a shared-memory ring of R + STAGES - 1 positions until its last use, SH o + R - 1.
/// Columns (SW = 2): output column q reads x column SW q + s; lane l of an ldmatrix gives the
///   address of its row, so the strided rows cost only bank conflicts (two wavefronts).
/// Dead work skipped (CTA-uniform, results unchanged: the skipped products are exact zeros):
///   column chunks starting at or past OUT_Q (Q = 7 with BLOCK_Q 16: half the mma work; 56 in
///   64: an eighth), dy rows past OUT_P (a ragged last chunk) and x rows that are padding (at
///   7x7, k7, pad 3: 12 of the 49 (x row, filter row) products); padding rows and dy rows past
///   OUT_P are not copied either. When one chunk covers P, a task streams only TILE_H =
///   min(BLOCK_P + R - 1, max(BLOCK_P, IN_H + PAD_H)) rows: the trailing padding rows (3 of 13
///   at 7x7 k7) cost no pipeline step. Left: at odd S the last s-pair's unused second column
///   (S = 7: 1/8 of the mma work) and the leading padding rows' steps (their dy rows load there).
/// Traffic per CTA and task: reads (rows of the task inside the image, at most BLOCK_P+R-1) x
///   (BLOCK_Q+2·ceil(S/2)-1 columns, those outside zero-filled without a read)·WARPS·16 B of x
///   and BLOCK_P·BLOCK_Q·WARPS·16 B of dy; writes WARPS·8·8·R·S·4 B of partials at the end.
///   Bound: at 7x7 the mma.sync issue rate (and the per-row barrier); at 3x3 L2 (ncu at C64 56²
///   k3 N128, 4x64 w4 s3 sp4: L2 81%, DRAM 42%, hit 64%). Where that L2 traffic comes from, in
///   units of one activation tensor (x = dy = 51 MB there):
///   - x halo rows: each task re-reads R - 1 rows: 1.46 x at BLOCK_P 4, 1.21 at 8, 1.11 at 14,
///     1.04 at 28 (block_p is balanced over P: 14 and 28 at P = 56, no ragged chunk).
///   - x halo columns: none when one tile covers Q (56 in 64); 1.07 x at BLOCK_Q 32.
///   - dy: read once. Partials: 18.7 KB per slice at C64 3x3, ~256 slices at 4 splits per SM:
///     0.09 written here and read back by the reduction.
///   - request size: a warp's cp.async covers WARPS·16 B of each pixel, so at C = 64 one L2
///     request carries 1 (2 warps), 2 (4) or 4 sectors (8 warps: the whole 128-byte line),
///     and 1 warp reads half sectors (the other half goes to another CTA).
///   So 4x64 w4 moves ~2.55 units through L2 where 2.0 are needed. The changes are in the config
///   space and heuristic (spio/kernels/conv2d_gw8/wgrad.py): block_p balanced over P (14 and 28
///   at P = 56 instead of ragged 16 and 32) and the heuristic's tallest task that leaves two
///   CTAs per SM (28 rows: ~2.13 units); 8 warps (full-line requests) compile and run but are
///   left for a sweep to time (WIDE_WARP_CHOICES), out of the default space.
/// Pipeline: STAGES rows of x (and the matching dy row) in flight via cp.async, zero-filled
///   outside the image; one __syncthreads per input row. The rows of a CTA's tasks form one
///   stream, so the pipeline does not drain between tasks.
/// Launch: triggers its dependents at entry (sm_90+), so the reduction, launched with PDL, is
///   scheduled while this grid runs and waits in griddepcontrol.wait for its completion.
/// Assumes: NHWC x and dy, C % 8 == 0, 16-byte aligned pointers (partial included); partials laid
///   out like the weight (C, 8, R, S), contiguous or channels_last, in fp32, one slice per
///   (split, column tile).

#include "spio/async_copy.h"
#include "spio/cta.h"
#include "spio/ldmatrix.h"
#include "spio/mma.h"

namespace {

/// 1.0 in both halves of a 32-bit word: the A operand that turns an mma into a column sum.
SPIO_DEVICE constexpr unsigned ones2() {
    if constexpr (spio::detail::is_half_v<Elem>) {
        return 0x3c003c00u;
    } else {
        return 0x3f803f80u;
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    conv2d_gw8_wgrad(float* __restrict__ partial_ptr, float* __restrict__ bias_partial_ptr,
                     const uint4* __restrict__ in_ptr, const uint4* __restrict__ grad_ptr,
                     int num_tasks, int tasks_per_split) {
    // PDL trigger (sm_90+): the reduction may be scheduled now; its griddepcontrol.wait holds it
    // until this grid has completed and its partials are visible.
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // ---- setup --------------------------------------------------------------------------------
    extern __shared__ uint4 smem_raw[];
    const SmemInput smem_input(smem_raw);                         // (STAGE, C8, W, ...) uint4
    const SmemGrad smem_grad(smem_raw + SmemInput::storage_size());  // (DYROW, C8, Q) uint4
    const int lane = spio::lane_id();
    const C8 warp_group(spio::warp_id());
    const BlockIdx block(blockIdx.x);
    const int q0 = block.get<QB>().unfold().get();
    const C8 group0 = block.get<GB>().unfold().template fold<8>();
    const C8 group = group0 + warp_group;
    // RAGGED_GROUPS (WARPS does not divide the GROUPS channel groups: odd counts such as 7, 19 or
    // 55 would otherwise run 1-warp CTAs): the last group block has warps past the last group.
    // They copy nothing, multiply nothing and write no partial, but keep to the CTA's barriers.
    const bool warp_live = !RAGGED_GROUPS || group.get() < GROUPS;
    const int slice = blockIdx.y * Q_TILES + block.get<QB>().get();

    float reg_acc[KERNEL_R][S_PAIRS][4];  // dW of taps (r, 2j) rows 0-7 and (r, 2j+1) rows 8-15
    float reg_bias[4];                    // every row holds sum_q dy[q][k]
#pragma unroll
    for (int r = 0; r < KERNEL_R; ++r)
#pragma unroll
        for (int j = 0; j < S_PAIRS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) reg_acc[r][j][e] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) reg_bias[e] = 0.f;

    // ---- stages ---------------------------------------------------------------------------------
    // The CTA streams the rows of its tasks [first, last) as one sequence: stream position k is
    // row i = k % TILE_H of task first + k / TILE_H, so the pipeline runs on across task
    // boundaries (no drain per task). x of position k sits in STAGE(k % STAGES), its dy row (if
    // any) in DYROW(k % DY_ROWS) until position k + R - 1 has used it.
    const int first = blockIdx.y * tasks_per_split;
    const int last = min(first + tasks_per_split, num_tasks);
    const int stream_rows = max(last - first, 0) * TILE_H;

    // A stream position, advanced one row at a time: no division per row. The loader runs
    // STAGES - 1 positions ahead of the multiplier; each keeps its own.
    struct StreamPos {
        int i;      // row of the task
        int p0;     // the task's first dy row
        int image;  // the task's image
        int stage;  // k % STAGES
        int dy;     // k % DY_ROWS
        SPIO_DEVICE void advance() {
            if (++i == TILE_H) {
                i = 0;
                p0 += BLOCK_P;
                if (p0 == P_CHUNKS * BLOCK_P) {
                    p0 = 0;
                    ++image;
                }
            }
            stage = stage + 1 == STAGES ? 0 : stage + 1;
            dy = dy + 1 == DY_ROWS ? 0 : dy + 1;
        }
    };
    const StreamPos start{0, (first % P_CHUNKS) * BLOCK_P, first / P_CHUNKS, 0, 0};

    // Copy slots: which column and group of a row this thread copies (LOAD_SLOTS of x, GRAD_SLOTS
    // of dy), and whether that column is inside the image, is the same in every row: worked out
    // once, as element offsets into row 0 of image 0 (-1: the column is outside, zero-filled)
    // and into stage 0 of the shared-memory rings (-1: the slot copies nothing). Plain 32-bit
    // offsets keep the slots in few registers.
    constexpr int THREADS = WARPS * 32;
    constexpr int LOAD_ITEMS = WARPS * TILE_W;
    constexpr int LOAD_SLOTS = (LOAD_ITEMS + THREADS - 1) / THREADS;
    constexpr int GRAD_ITEMS = WARPS * BLOCK_Q;
    constexpr int GRAD_SLOTS = (GRAD_ITEMS + THREADS - 1) / THREADS;
    const Input input(const_cast<uint4*>(in_ptr));  // the kernel only reads x and dy
    const Grad grad(const_cast<uint4*>(grad_ptr));
    int x_src[LOAD_SLOTS], x_dst[LOAD_SLOTS], dy_src[GRAD_SLOTS], dy_dst[GRAD_SLOTS];
#pragma unroll
    for (int s = 0; s < LOAD_SLOTS; ++s) {
        const int t = static_cast<int>(threadIdx.x) + s * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        const int w = q0 * STRIDE_W - PAD_W + j;
        x_src[s] = w >= 0 && w < IN_W ? static_cast<int>(input[W(w)][group0 + g].get() - in_ptr) : -1;
        x_dst[s] = (LOAD_ITEMS % THREADS == 0 || t < LOAD_ITEMS) &&
                           (!RAGGED_GROUPS || (group0 + g).get() < GROUPS)
                       ? static_cast<int>(smem_input[g][W(j)].get() - smem_input.get())
                       : -1;
    }
#pragma unroll
    for (int s = 0; s < GRAD_SLOTS; ++s) {
        const int t = static_cast<int>(threadIdx.x) + s * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        dy_src[s] = q0 + j < OUT_Q ? static_cast<int>(grad[Q(q0 + j)][group0 + g].get() - grad_ptr)
                                   : -1;
        dy_dst[s] = (GRAD_ITEMS % THREADS == 0 || t < GRAD_ITEMS) &&
                            (!RAGGED_GROUPS || (group0 + g).get() < GROUPS)
                        ? static_cast<int>(smem_grad[g][Q(j)].get() - smem_grad.get())
                        : -1;
    }

    // Task row i: x image row SH p0 - PAD_H + i (tile column j = image column SW q0 - PAD_W + j)
    // and, for i = SH o with o < BLOCK_P, dy row p0 + o (tile column j = output column q0 + j).
    // Zero-filled outside.
    auto load_rows = [&](const StreamPos& pos) {
        const int h = pos.p0 * STRIDE_H - PAD_H + pos.i;
        // A padding row's stage and a dy row past OUT_P are never read (multiply_row skips
        // them), so they are not copied at all; the commit after this call stays unconditional.
        if (h >= 0 && h < IN_H) {
            const uint4* row =
                input[H(h)].get() + static_cast<long long>(pos.image) * Input::storage_size();
            uint4* stage = smem_input[STAGE(pos.stage)].get();
#pragma unroll
            for (int s = 0; s < LOAD_SLOTS; ++s) {
                if (x_dst[s] >= 0) {
                    spio::cp_async_16(stage + x_dst[s], row + max(x_src[s], 0), x_src[s] >= 0);
                }
            }
        }
        const int o = pos.i / STRIDE_H;
        const int p = pos.p0 + o;
        if (pos.i % STRIDE_H == 0 && o < BLOCK_P && p < OUT_P) {
            const uint4* row =
                grad[P(p)].get() + static_cast<long long>(pos.image) * Grad::storage_size();
            uint4* slot = smem_grad[DYROW(pos.dy)].get();
#pragma unroll
            for (int s = 0; s < GRAD_SLOTS; ++s) {
                if (dy_dst[s] >= 0) {
                    spio::cp_async_16(slot + dy_dst[s], row + max(dy_src[s], 0), dy_src[s] >= 0);
                }
            }
        }
    };

    // Input row i (stream position k) times dy rows i - r (positions k - r), 8 columns at a time.
    // Dead work is skipped, every condition CTA-uniform (no divergence around ldmatrix/mma, and
    // no barrier inside): column chunks starting at or past OUT_Q (dy zero there), dy rows past
    // OUT_P (a ragged last row chunk) and x rows that are padding (h outside the image: zero);
    // a padding row still adds its dy row to the bias gradient. Skipped products are exact
    // zeros, so the sums (and their order) are those of the full loop.
    const int q_chunks = min(BLOCK_Q / 8, (OUT_Q - q0 + 7) / 8);
    auto multiply_row = [&](const StreamPos& pos) {
        if (!warp_live) return;  // warp-uniform
        const int i = pos.i;
        const int h = pos.p0 * STRIDE_H - PAD_H + i;
        const bool x_row_inside = h >= 0 && h < IN_H;
        const int dy_rows_inside = min(BLOCK_P, OUT_P - pos.p0);  // dy rows [0, this) of the task
        const auto x_plane = smem_input[STAGE(pos.stage)][warp_group];
        // The dy ring slot of position k - r.
        auto dy_slot = [&](int r) { return DYROW(pos.dy - r < 0 ? pos.dy - r + DY_ROWS : pos.dy - r); };
        if (!x_row_inside) {
            if constexpr (HAS_BIAS) {
                if (i % STRIDE_H == 0 && i / STRIDE_H < dy_rows_inside) {
                    const auto dy_plane = smem_grad[dy_slot(0)][warp_group];
#pragma unroll 1
                    for (int qc = 0; qc < q_chunks; ++qc) {
                        unsigned b[1];
                        spio::ldmatrix_x1_trans(b, dy_plane[Q(8 * qc + lane % 8)].get());
                        const unsigned ones[2] = {ones2(), ones2()};
                        spio::mma_m16n8k8<Elem>(reg_bias, ones, b[0]);
                    }
                }
            }
            return;
        }
#pragma unroll 1
        for (int qc = 0; qc < q_chunks; ++qc) {
            unsigned a[S_PAIRS][2];
#pragma unroll
            for (int j = 0; j < S_PAIRS; ++j) {
                // lanes 0-7: columns of filter column 2j, lanes 8-15: of 2j + 1 (16-31 unused).
                const int col = STRIDE_W * (8 * qc + lane % 8) + 2 * j + (lane / 8) % 2;
                spio::ldmatrix_x2_trans(a[j], x_plane[W(col)].get());
            }
#pragma unroll
            for (int r = 0; r < KERNEL_R; ++r) {
                const int d = i - r;  // dy row d / SH of the task, when SH divides d
                if (d >= 0 && d % STRIDE_H == 0 && d / STRIDE_H < dy_rows_inside) {
                    unsigned b[1];
                    const auto dy_plane = smem_grad[dy_slot(r)][warp_group];
                    spio::ldmatrix_x1_trans(b, dy_plane[Q(8 * qc + lane % 8)].get());
#pragma unroll
                    for (int j = 0; j < S_PAIRS; ++j) {
                        spio::mma_m16n8k8<Elem>(reg_acc[r][j], a[j], b[0]);
                    }
                    if constexpr (HAS_BIAS) {
                        if (r == 0) {
                            const unsigned ones[2] = {ones2(), ones2()};
                            spio::mma_m16n8k8<Elem>(reg_bias, ones, b[0]);
                        }
                    }
                }
            }
        }
    };

    // ---- main loop: every row of this split's tasks, STAGES - 1 rows ahead --------------------
    StreamPos load_pos = start;
#pragma unroll
    for (int k = 0; k < STAGES - 1; ++k) {
        if (k < stream_rows) load_rows(load_pos);
        spio::cp_async_commit();
        load_pos.advance();
    }
    StreamPos pos = start;
#pragma unroll 1
    for (int k = 0; k < stream_rows; ++k) {
        spio::cp_async_wait<STAGES - 2>();
        __syncthreads();  // row k visible; everyone is done with the stage being refilled
        if (k + STAGES - 1 < stream_rows) load_rows(load_pos);
        spio::cp_async_commit();
        load_pos.advance();
        multiply_row(pos);
        pos.advance();
    }
    spio::cp_async_wait<0>();
    __syncthreads();  // every warp is done with the pipeline's shared memory: reuse it below

    // ---- epilogue: this CTA's partial, laid out like the weight: (C8, KO, CI, R, S), or
    // (C8, KO, R, S, CI) for a channels_last weight (the Partial types' dimension order) --------
    // The CTA's WARPS groups are one contiguous block of the slice. Each warp puts its fragments
    // in the same layout in shared memory (a direct store would touch 32 sectors per
    // instruction), then the CTA copies the block out with coalesced 16-byte stores.
    // Fragment element e of a[j]: row = 8 * (e / 2) + lane / 4 -> (filter column 2j + e / 2,
    // input channel lane / 4); column = 2 * (lane % 4) + e % 2 -> output channel.
    const SmemPartial smem_partial(reinterpret_cast<float*>(smem_raw));  // the weight's layout
#pragma unroll
    for (int r = 0; r < KERNEL_R; ++r) {
#pragma unroll
        for (int j = 0; j < S_PAIRS; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int s = 2 * j + e / 2;
                if (s < KERNEL_S) {
                    *smem_partial[warp_group][KO(2 * (lane % 4) + e % 2)][CI(lane / 4)][R(r)]
                                 [S(s)] = reg_acc[r][j][e];
                }
            }
        }
    }
    __syncthreads();
    const Partial partial(partial_ptr + static_cast<long long>(slice) * Partial::storage_size());
    float4* partial_block = reinterpret_cast<float4*>(partial[group0].get());
    const float4* staged = reinterpret_cast<const float4*>(smem_partial.get());
    // The groups of this block that exist (all WARPS unless RAGGED_GROUPS); a group's partial is
    // contiguous (C8 is the outermost dimension of either layout).
    constexpr int BLOCK_FLOAT4S = SmemPartial::storage_size() / 4;
    const int live_float4s =
        RAGGED_GROUPS ? min(WARPS, GROUPS - group0.get()) * (BLOCK_FLOAT4S / WARPS) : BLOCK_FLOAT4S;
    spio::for_each_strided<BLOCK_FLOAT4S, WARPS * 32>([&](int t) {
        if (!RAGGED_GROUPS || t < live_float4s) partial_block[t] = staged[t];
    });
    if constexpr (HAS_BIAS) {
        if (lane < 4 && warp_live) {  // fragment row 0: columns 2 * lane and 2 * lane + 1
            const BiasPartial bias_partial(bias_partial_ptr +
                                           static_cast<long long>(slice) *
                                               BiasPartial::storage_size());
            *bias_partial[group][KO(2 * lane)] = reg_bias[0];
            *bias_partial[group][KO(2 * lane + 1)] = reg_bias[1];
        }
    }
}
