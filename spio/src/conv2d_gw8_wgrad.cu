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
/// MMA mapping (m16n8k16): M = 16 = (two filter columns s, s+1) x 8 input channels, N = 8
///   output channels, K = 16 output columns q. A = x rows loaded transposed by ldmatrix.x4.trans
///   (per filter column, one 8x8 matrix of each 8 columns), B = dy loaded by ldmatrix.x2.trans.
///   A tile whose 8-column chunks inside Q are odd in number (only a last column tile, or
///   BLOCK_Q 8) takes its last chunk by m16n8k8 (ldmatrix.x2.trans / .x1.trans). The bias
///   gradient is one more mma per dy row step with A = ones. (m16n8k8 throughout until the
///   thirty-second session: twice the mma and ldmatrix instructions per row.)
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
///   and BLOCK_P·BLOCK_Q·WARPS·16 B of dy (FUSE_DGRAD row chunks: BLOCK_P + DY_HALO rows); writes
///   WARPS·8·8·R·S·4 B of partials at the end (FUSE_DGRAD: and the task's dx rows).
///   Bound: at 7x7 the mma.sync issue rate (and the per-row barrier); at 3x3 L2 (ncu at C64 56²
///   k3 N128, 4x64 w4 s3 sp4: L2 81%, DRAM 42%, hit 64%). Where that L2 traffic comes from, in
///   units of one activation tensor (x = dy = 51 MB there):
///   - x halo rows: each task re-reads R - 1 rows: 1.46 x at BLOCK_P 4, 1.21 at 8, 1.11 at 14,
///     1.04 at 28 (block_p is balanced over P: 14 and 28 at P = 56, no ragged chunk).
///   - x halo columns: none when one tile covers Q (56 in 64); 1.07 x at BLOCK_Q 32.
///   - dy: read once. Partials: 18.7 KB per slice at C64 3x3, ~256 slices at 4 splits per SM:
///     0.09 written here and read back by the reduction.
///   - request size (cp.async variant): a warp's cp.async covers WARPS·16 B of each pixel, so
///     at C = 64 one L2 request carries 1 (2 warps), 2 (4) or 4 sectors (8 warps: the whole
///     128-byte line), and 1 warp reads half sectors (the other half goes to another CTA).
///   So 4x64 w4 moves ~2.55 units through L2 where 2.0 are needed. The changes are in the config
///   space and heuristic (spio/kernels/conv2d_gw8/wgrad.py): block_p balanced over P (14 and 28
///   at P = 56 instead of ragged 16 and 32) and the heuristic's tallest task that leaves two
///   CTAs per SM (28 rows: ~2.13 units); 8 warps (full-line requests) compile and run but are
///   left for a sweep to time (WIDE_WARP_CHOICES), out of the default space.
/// Pipeline: STAGES rows of x (and the matching dy row) in flight via cp.async, zero-filled
///   outside the image; one __syncthreads per input row. The rows of a CTA's tasks form one
///   stream, so the pipeline does not drain between tasks.
///   TMA_ROWS (sm_90+, CTAs of 2+ warps, at most 9 taps): instead one thread copies each x row
///   and dy row with the tensor memory accelerator (`in_map`: x as (N*H rows, W, C), a box of
///   one row x TILE_W pixels x the CTA's WARPS*8 channels; `grad_map`: dy as (N*P rows, Q, C),
///   one row x BLOCK_Q pixels; zeros outside the tensor: the padding columns, dy's columns past
///   Q, a ragged group block's channels). Stream position k's x stage has an mbarrier that both
///   of its copies complete; the threads wait on it where they waited for their cp.async
///   groups, then take the same __syncthreads (which still frees the stage and dy slot the next
///   copies overwrite). Rows that are not copied (padding, dy rows past OUT_P) complete the
///   barrier on the thread's arrival alone.
/// Shared memory: x (STAGE, C8, W) and dy (DYROW, C8, Q), 16-byte pixels: each warp reads its
///   group's plane, 8 consecutive pixels per ldmatrix matrix, so no bank conflicts (at SW = 2
///   every other pixel: two wavefronts). TMA_ROWS: (STAGE, W, C8) and (DYROW, Q, C8) as the
///   boxes land, group g of pixel j at slot g ^ (j >> (3 - log2 WARPS)) % WARPS (TMA's
///   WARPS*16-byte swizzle), so the 8 pixels of a matrix are again in 8 bank groups; a stage
///   holds TILE_W rounded up to 8 pixels, and the rings start on the swizzle's period (ROW_ALIGN
///   = 128 * WARPS bytes).
/// Launch: triggers its dependents at entry (sm_90+), so the reduction, launched with PDL, is
///   scheduled while this grid runs and waits in griddepcontrol.wait for its completion.
/// FUSE_DGRAD (the backward's fused kernel, `wgrad.WGRAD_DGRAD`): the same kernel also writes
///   dx from the dy rows it holds, with one column tile; a task of a row chunk also copies the
///   dy rows its last dx rows read past the chunk (see the FUSE_DGRAD section below; the host's
///   `wgrad.fusable` says where it applies).
/// Assumes: NHWC x and dy, C % 8 == 0, 16-byte aligned pointers (partial included); partials laid
///   out like the weight (C, 8, R, S), contiguous or channels_last, in fp32, one slice per
///   (split, column tile).

#include "spio/async_copy.h"
#include "spio/cta.h"
#include "spio/ldmatrix.h"
#include "spio/mbarrier.h"
#include "spio/mma.h"
#include "spio/tma.h"
#include "spio/vector.h"

#if TMA_ROWS && !SPIO_TMA
#error "conv2d_gw8_wgrad.cu: TMA_ROWS needs sm_90 or later"
#endif

namespace {

/// 1.0 in both halves of a 32-bit word: the A operand that turns an mma into a column sum.
SPIO_DEVICE constexpr unsigned ones2() {
    if constexpr (spio::detail::is_half_v<Elem>) {
        return 0x3c003c00u;
    } else {
        return 0x3f803f80u;
    }
}

/// 0.f from an asm volatile: not hoisted above the asm volatile copies before it.
SPIO_DEVICE float zero() {
    float v;
    asm volatile("mov.b32 %0, 0;" : "=f"(v));
    return v;
}

/// The main loop's row walk, unrolled so that most of what a row does is a compile-time
/// constant. A task of at most MAX_TASK_ROWS rows (24, `wgrad.MAX_TASK_ROWS`) is unrolled whole:
/// each row's padding, tap and dy-row conditions, and which task the copy STAGES - 1 rows ahead
/// belongs to, fold away. A longer task runs its first CHUNKED_ROWS rows in a loop of STEP_ROWS
/// unrolled rows (a multiple of STRIDE_H, so tap parities stay constants; the copies ahead stay
/// in the task) and unrolls the rest, the tail, whole.
constexpr int STEP_ROWS = 8;
constexpr int CHUNKED_ROWS =
    TILE_H <= MAX_TASK_ROWS ? 0 : (TILE_H - (STAGES - 1)) / STEP_ROWS * STEP_ROWS;
static_assert(STEP_ROWS % STRIDE_H == 0, "tap parities must stay compile-time constants");
static_assert(CHUNKED_ROWS + STAGES - 1 <= TILE_H, "a chunked row's copy ahead leaves the task");

/// FUSE_DGRAD: whether filter column s feeds dx columns of phase phi (w % STRIDE_W), that is
/// whether STRIDE_W divides phi + PAD_W - s; the phase's number of taps, and its idx-th (-1 past
/// the last).
SPIO_DEVICE constexpr bool phase_tap(int phi, int s) {
    return ((phi + PAD_W - s) % STRIDE_W + STRIDE_W) % STRIDE_W == 0;
}
SPIO_DEVICE constexpr int phase_taps(int phi) {
    int n = 0;
    for (int s = 0; s < KERNEL_S; ++s) n += phase_tap(phi, s) ? 1 : 0;
    return n;
}
SPIO_DEVICE constexpr int phase_tap_at(int phi, int idx) {
    for (int s = 0; s < KERNEL_S; ++s) {
        if (phase_tap(phi, s) && idx-- == 0) return s;
    }
    return -1;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    conv2d_gw8_wgrad(float* __restrict__ partial_ptr, float* __restrict__ bias_partial_ptr,
                     const uint4* __restrict__ in_ptr, const uint4* __restrict__ grad_ptr,
                     int num_tasks, int tasks_per_split
#if TMA_ROWS
                     ,
                     const __grid_constant__ spio::tma::Descriptor in_map,
                     const __grid_constant__ spio::tma::Descriptor grad_map
#endif
#if FUSE_DGRAD
                     ,
                     uint4* __restrict__ dx_ptr, const WElem* __restrict__ weight_ptr
#endif
    ) {
    // PDL trigger (sm_90+): the reduction may be scheduled now; its griddepcontrol.wait holds it
    // until this grid has completed and its partials are visible.
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // ---- setup --------------------------------------------------------------------------------
    extern __shared__ uint4 smem_raw[];
    // TMA_ROWS: the rings start on the swizzle's period (the host adds the slack). The pointer
    // stays smem_raw plus an offset, so the compiler keeps shared-memory loads.
    const unsigned ring_pad =
        TMA_ROWS ? (ROW_ALIGN - spio::smem_address(smem_raw) % ROW_ALIGN) % ROW_ALIGN : 0;
    uint4* const smem_rings =
        reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(smem_raw) + ring_pad);
    // (STAGE, C8, W) uint4; TMA_ROWS (STAGE, W, C8), swizzled
    const SmemInput smem_input(smem_rings);
    // (DYROW, C8, Q) uint4; TMA_ROWS (DYROW, Q, C8), swizzled
    const SmemGrad smem_grad(smem_rings + SmemInput::storage_size());
    const int lane = spio::lane_id();
    const C8 warp_group(spio::warp_id());
    const BlockIdx block(blockIdx.x);
    const int q0 = Q_TILES == 1 ? 0 : block.get<QB>().unfold().get();  // one tile: known here
    const C8 group0 = block.get<GB>().unfold().template fold<8>();
    const C8 group = group0 + warp_group;
    // RAGGED_GROUPS (WARPS does not divide the GROUPS channel groups: odd counts such as 7, 19 or
    // 55 would otherwise run 1-warp CTAs): the last group block has warps past the last group.
    // They copy nothing, multiply nothing and write no partial, but keep to the CTA's barriers.
    const bool warp_live = !RAGGED_GROUPS || group.get() < GROUPS;
    const int slice = blockIdx.y * Q_TILES + block.get<QB>().get();

    float reg_acc[KERNEL_R][S_PAIRS][4];  // dW of taps (r, 2j) rows 0-7 and (r, 2j+1) rows 8-15
    float reg_bias[4];                    // every row holds sum_q dy[q][k]

    // ---- the row stream ---------------------------------------------------------------------
    // The CTA streams the rows of its tasks [first, last) as one sequence: stream position k is
    // row i = k % TILE_H of task first + k / TILE_H, so the pipeline runs on across task
    // boundaries (no drain per task). x of position k sits in STAGE(k % STAGES), its dy row (if
    // any) in DYROW(k % DY_ROWS) until position k + R - 1 has used it.
    const int first = blockIdx.y * tasks_per_split;
    const int last = min(first + tasks_per_split, num_tasks);

    // Task t: image t / P_CHUNKS, dy rows from p0 = (t % P_CHUNKS) BLOCK_P; its row i is image
    // row h0 + i, h0 = SH p0 - PAD_H.
    const Input input(const_cast<uint4*>(in_ptr));  // the kernel only reads x and dy
    const Grad grad(const_cast<uint4*>(grad_ptr));
    // A task holds 32-bit element offsets from the kernel's x and dy pointers, not pointers:
    // the bases stay kernel parameters, and the task and the next one (the copies ahead of an
    // unrolled task's last rows) cost two registers each instead of four; at 4 warps and 8
    // stages 64-bit task pointers left ptxas one register short (a 64-bit base on the stack).
    // Offsets are taken modulo 2^32 (h0 may be negative); an address is in_ptr + x + i * x_row +
    // slot offset, in range whenever the row is inside the image (the host refuses tensors of
    // more than 2^32 uint4: wgrad.check_tensor_size).
    const unsigned x_row = static_cast<unsigned>(input[H(1)].get() - input.get());
    const unsigned dy_row = static_cast<unsigned>(grad[P(1)].get() - grad.get());
    // TMA_ROWS: x and dy are the tasks' first rows as TMA coordinates instead, image * IN_H + h0
    // and image * OUT_P + p0 (h0 may be negative: a padding row is never copied).
    struct Task {
        unsigned x;   // row 0 of the task (image row h0) from in_ptr, in uint4 (TMA: its row)
        unsigned dy;  // dy row p0 of the task's image from grad_ptr, in uint4 (TMA: its row)
        int p0;
        int h0;
    };
    auto task_at = [&](int t) {
        const int image = t / P_CHUNKS;
        const int p0 = (t - image * P_CHUNKS) * BLOCK_P;
        const int h0 = p0 * STRIDE_H - PAD_H;
        if constexpr (TMA_ROWS) {
            return Task{static_cast<unsigned>(image * IN_H + h0),
                        static_cast<unsigned>(image * OUT_P + p0), p0, h0};
        } else {
            return Task{
                static_cast<unsigned>(image) * static_cast<unsigned>(Input::storage_size()) +
                    static_cast<unsigned>(h0) * x_row,
                static_cast<unsigned>(image) * static_cast<unsigned>(Grad::storage_size()) +
                    static_cast<unsigned>(p0) * dy_row,
                p0, h0};
        }
    };
    // Whether task row i is an x row inside the image (else padding: neither copied nor
    // multiplied), and dy row o of a task one inside OUT_P (else a ragged last chunk's). Each
    // bound is tested only where some task can cross it (h0 >= -PAD_H, h0 <= H0_MAX, p0 + o <
    // OUT_P for o < LAST_CHUNK_ROWS), so for whole-image tasks (P_CHUNKS 1) and a row index known
    // at compile time every test folds away.
    constexpr int H0_MAX = (P_CHUNKS - 1) * BLOCK_P * STRIDE_H - PAD_H;
    constexpr int LAST_CHUNK_ROWS = OUT_P - (P_CHUNKS - 1) * BLOCK_P;
    auto x_row_inside = [](const Task& task, int i) {
        return (i >= PAD_H || task.h0 + i >= 0) && (i < IN_H - H0_MAX || task.h0 + i < IN_H);
    };
    auto dy_row_inside = [](const Task& task, int o) {
        return o < BLOCK_P && (o < LAST_CHUNK_ROWS || task.p0 + o < OUT_P);
    };
    // FUSE_DGRAD with row chunks (P_CHUNKS > 1): a task also holds the DY_HALO dy rows past its
    // chunk (those its last dx rows read), copied and multiplied for dx only; without them
    // DY_HALO is 0 and the rows held are the chunk's.
    constexpr int DY_HALO = FUSE_DGRAD && P_CHUNKS > 1 ? (KERNEL_R - 1) / STRIDE_H : 0;
    auto dy_row_held = [](const Task& task, int o) {
        return o < BLOCK_P + DY_HALO && (o < LAST_CHUNK_ROWS || task.p0 + o < OUT_P);
    };

    // Copy slots: which column and group of a row this thread copies (LOAD_SLOTS of x, GRAD_SLOTS
    // of dy), and whether that column is inside the image, is the same in every row: worked out
    // once, as an element offset into row 0 of an image (src), whether that column is inside
    // (in: else zero-filled) and the shared-window address in stage 0 of the ring (dst; NO_COPY:
    // the slot copies nothing). Shared memory is addressed in the shared window throughout the
    // main loop: a generic pointer per use costs a conversion at each. Plain 32-bit values keep
    // the slots in few registers.
    constexpr unsigned NO_COPY = ~0u;
    auto smem_bytes = [](const uint4* a, const uint4* b) {  // b to a, in bytes
        return static_cast<unsigned>(a - b) * static_cast<unsigned>(sizeof(uint4));
    };
    constexpr int THREADS = WARPS * 32;
    constexpr int LOAD_ITEMS = WARPS * TILE_W;
    constexpr int LOAD_SLOTS = (LOAD_ITEMS + THREADS - 1) / THREADS;
    constexpr int GRAD_ITEMS = WARPS * BLOCK_Q;
    constexpr int GRAD_SLOTS = (GRAD_ITEMS + THREADS - 1) / THREADS;
    unsigned x_src[LOAD_SLOTS], x_dst[LOAD_SLOTS], dy_src[GRAD_SLOTS], dy_dst[GRAD_SLOTS];
    bool x_in[LOAD_SLOTS], dy_in[GRAD_SLOTS];
#pragma unroll
    for (int s = 0; s < LOAD_SLOTS; ++s) {
        const int t = static_cast<int>(threadIdx.x) + s * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        const int w = q0 * STRIDE_W - PAD_W + j;
        const bool in = w >= 0 && w < IN_W;
        x_src[s] = static_cast<unsigned>(input[W(in ? w : 0)][group0 + g].get() - in_ptr);
        x_in[s] = in;
        x_dst[s] = (LOAD_ITEMS % THREADS == 0 || t < LOAD_ITEMS) &&
                           (!RAGGED_GROUPS || (group0 + g).get() < GROUPS)
                       ? spio::smem_address(smem_input[g][W(j)].get())
                       : NO_COPY;
    }
#pragma unroll
    for (int s = 0; s < GRAD_SLOTS; ++s) {
        const int t = static_cast<int>(threadIdx.x) + s * THREADS;
        const C8 g(t % WARPS);
        const int j = t / WARPS;
        const bool in = q0 + j < OUT_Q;
        dy_src[s] = static_cast<unsigned>(grad[Q(in ? q0 + j : 0)][group0 + g].get() - grad_ptr);
        dy_in[s] = in;
        dy_dst[s] = (GRAD_ITEMS % THREADS == 0 || t < GRAD_ITEMS) &&
                            (!RAGGED_GROUPS || (group0 + g).get() < GROUPS)
                        ? spio::smem_address(smem_grad[g][Q(j)].get())
                        : NO_COPY;
    }
    // The rings are walked as byte offsets of a stage / dy slot (the typed strides of STAGE and
    // DYROW), which a row adds to its copy slots and ldmatrix rows.
    const unsigned x_stage = smem_bytes(smem_input[STAGE(1)].get(), smem_input.get());
    const unsigned dy_slot = smem_bytes(smem_grad[DYROW(1)].get(), smem_grad.get());

    // TMA_ROWS: one barrier per x stage (stream position k: row_full + 8 (k % STAGES)), past
    // both the rings and the partial's staging below.
    constexpr unsigned RING_BYTES =
        (SmemInput::storage_size() + SmemGrad::storage_size()) * sizeof(uint4);
    // TMA swizzles by shared-memory address bits: every x stage and dy slot starts on the
    // swizzle's period (the host rounds a stage up to 8 pixels; BLOCK_Q is a multiple of 8).
    static_assert(!TMA_ROWS || SmemInput::storage_size() / STAGES * sizeof(uint4) % ROW_ALIGN == 0,
                  "an x stage must span whole swizzle periods");
    static_assert(!TMA_ROWS || SmemGrad::storage_size() / DY_ROWS * sizeof(uint4) % ROW_ALIGN == 0,
                  "a dy slot must span whole swizzle periods");
    constexpr unsigned PARTIAL_BYTES = SmemPartial::storage_size() * sizeof(float);
    const unsigned row_full = spio::smem_address(smem_rings) +
                              (RING_BYTES > PARTIAL_BYTES ? RING_BYTES : PARTIAL_BYTES);

    // Task row i into the x stage at offset xs (tile column j = image column SW q0 - PAD_W + j)
    // and, for i = SH o, dy row p0 + o into the dy slot at offset ds (tile column j = output
    // column q0 + j). Zero-filled outside. A padding row's stage and a dy row past OUT_P are
    // never read (multiply_row skips them), so they are not copied at all; the cp.async commit
    // after this call stays unconditional. TMA_ROWS: thread 0 copies both rows, completing barrier `bar`
    // (its arrival alone when neither row is copied).
    auto load_row = [&](const Task& task, int i, unsigned xs, unsigned ds, unsigned bar) {
#if TMA_ROWS
        if (threadIdx.x == 0) {
            const bool x_copy = x_row_inside(task, i);
            const bool dy_copy = i % STRIDE_H == 0 && dy_row_held(task, i / STRIDE_H);
            if (x_copy || dy_copy) {
                spio::mbarrier::arrive_expect_tx(
                    bar, (x_copy ? X_BOX_BYTES : 0) + (dy_copy ? DY_BOX_BYTES : 0));
            } else {
                spio::mbarrier::arrive(bar);
            }
            if (x_copy) {
                spio::tma::load_3d(spio::smem_address(smem_input.get()) + xs, &in_map,
                                   group0.get() * 8, q0 * STRIDE_W - PAD_W,
                                   static_cast<int>(task.x) + i, bar);
            }
            if (dy_copy) {
                spio::tma::load_3d(spio::smem_address(smem_grad.get()) + ds, &grad_map,
                                   group0.get() * 8, q0, static_cast<int>(task.dy) + i / STRIDE_H,
                                   bar);
            }
        }
#else
        (void)bar;
        if (x_row_inside(task, i)) {
            const unsigned row = task.x + static_cast<unsigned>(i) * x_row;
#pragma unroll
            for (int s = 0; s < LOAD_SLOTS; ++s) {
                if (x_dst[s] != NO_COPY) {
                    spio::cp_async_16(x_dst[s] + xs, in_ptr + (row + x_src[s]), x_in[s]);
                }
            }
        }
        if (i % STRIDE_H == 0 && dy_row_held(task, i / STRIDE_H)) {
            const unsigned row = task.dy + static_cast<unsigned>(i / STRIDE_H) * dy_row;
#pragma unroll
            for (int s = 0; s < GRAD_SLOTS; ++s) {
                if (dy_dst[s] != NO_COPY) {
                    spio::cp_async_16(dy_dst[s] + ds, grad_ptr + (row + dy_src[s]), dy_in[s]);
                }
            }
        }
#endif
    };

    // Task row i (u: i - u is a multiple of STEP_ROWS, so i - r and u - r have one parity) in the
    // x stage at offset xs, times dy rows (i - r) / SH in the slots at offsets ds[r], 16 columns
    // at a time (m16n8k16), the last 8 of an odd number of 8-column chunks by m16n8k8.
    // Dead work is skipped, every condition CTA-uniform (no divergence around ldmatrix/mma, and
    // no barrier inside): column chunks starting at or past OUT_Q (dy zero there), dy rows past
    // OUT_P (a ragged last row chunk) and x rows that are padding (h outside the image: zero);
    // a padding row still adds its dy row to the bias gradient. Skipped products are exact
    // zeros, so the sums (and their order) are those of the full loop.
    // ldmatrix rows, as addresses in stage 0 / slot 0 of this warp's plane: lanes 0-7 give tile
    // columns SW l of filter column 2j, lanes 8-15 those of 2j + 1, lanes 16-31 the same 8
    // columns on (the K = 8-15 half of an m16n8k16 A; an x2 load ignores them); for dy, lanes
    // 0-15 give columns l. x_col(j, qc): the x matrices of s pair j from column chunk qc on.
    // TMA_ROWS keeps a lane address per pair (the swizzle does not commute with the pair's 2j
    // pixels); a chunk's SW 8 qc pixels are a multiple of the swizzle's 8-pixel period, so a
    // plain offset in either layout.
    const int lane_col = STRIDE_W * (lane % 8 + 8 * (lane / 16)) + (lane / 8) % 2;
#if TMA_ROWS
    unsigned x_lane[S_PAIRS];
#pragma unroll
    for (int j = 0; j < S_PAIRS; ++j) {
        x_lane[j] = spio::smem_address(smem_input[warp_group][W(lane_col + 2 * j)].get());
    }
    auto x_col = [&](int j, int qc) {
        return x_lane[j] + smem_bytes(smem_input[W(STRIDE_W * 8 * qc)].get(), smem_input.get());
    };
#else
    const unsigned x_lane = spio::smem_address(smem_input[warp_group][W(lane_col)].get());
    auto x_col = [&](int j, int qc) {
        return x_lane +
               smem_bytes(smem_input[W(STRIDE_W * 8 * qc + 2 * j)].get(), smem_input.get());
    };
#endif
    const unsigned dy_lane = spio::smem_address(smem_grad[warp_group][Q(lane % 16)].get());
    auto dy_col = [&](int qc) {
        return dy_lane + smem_bytes(smem_grad[Q(8 * qc)].get(), smem_grad.get());
    };
    // 8-column chunks of this tile that start inside OUT_Q: q_pairs of 16 columns, then one of 8
    // when their number is odd (only a last column tile's: BLOCK_Q is 8 or a multiple of 16).
    const int q_chunks = min(BLOCK_Q / 8, (OUT_Q - q0 + 7) / 8);
    const int q_pairs = q_chunks / 2;
    const bool q_odd = q_chunks % 2 != 0;
    const unsigned ones[4] = {ones2(), ones2(), ones2(), ones2()};  // A of the bias mmas
    const unsigned ones_k8[2] = {ones2(), ones2()};
    // dy row (i - r) / SH of the task feeds x row i through filter row r (SH divides i - r)
    auto tap_live = [&](const Task& task, int i, int u, int r) {
        return (u - r) % STRIDE_H == 0 && (u >= r || i >= r) &&
               dy_row_inside(task, (i - r) / STRIDE_H);
    };
#if FUSE_DGRAD
    // ---- FUSE_DGRAD: the input gradient from the dy rows in the ring -------------------------
    //   dx[n, h, w, g8+c] = sum_{k,r,s} dy[n, (h+PAD_H-r)/SH, (w+PAD_W-s)/SW, g8+k] w[g8+k, c, r, s]
    // (terms whose division is not exact are absent). The dy rows (i - r) / SH in ds[r] that
    // task row i multiplies through filter row r are those dx row h0 + i needs (`dx_tap_live`:
    // in a whole image the weight gradient's own taps, `tap_live`), so dx row i is computed
    // where x row i is multiplied, from the dy rows the weight gradient already holds (dy read
    // once for both). A whole-image task (P_CHUNKS 1) holds every dy row
    // its dx rows read; a row chunk's task also the DY_HALO rows past its chunk, and writes only
    // the dx rows it owns (below). One column tile (Q_TILES 1) leaves no column halo outside
    // the ring. The host (`wgrad.fusable`) checks that the last chunk's stream reaches the last
    // input row. Columns: dx column w = SW m + phi (phase phi < SW)
    // takes the taps s of its phase ((phi + PAD_W - s) % SW == 0), from dy column m + (phi +
    // PAD_W - s) / SW. MMA mapping, per phase: M = 16 dx columns of the phase, N = 8 input
    // channels c, K = 16 = two of the phase's taps x 8 output channels k (an odd last tap by
    // m16n8k8). A = dy pixels by ldmatrix (rows = pixels, not transposed); a column outside
    // 0..OUT_Q-1 wraps (mod BLOCK_Q) onto a zero-filled column past OUT_Q. B = the weights, one
    // register per tap, loaded once. Columns past the phase's last of the last 16 are computed,
    // not stored (at BLOCK_Q 8, fragment rows 8-15 alias rows 0-7 through the wrap: `fusable`
    // then leaves at most 8 columns per phase, so those rows are never stored).
    static_assert(Q_TILES == 1, "FUSE_DGRAD: one column tile");
    static_assert(P_CHUNKS == 1 || KERNEL_R >= STRIDE_H, "FUSE_DGRAD: chunks that meet or overlap");
    // A chunk's task streams x rows h0 .. h0 + TILE_H - 1, the next chunk's from h0 + SH BLOCK_P:
    // the last R - SH rows of one are the first of the next. Each task writes the dx rows from
    // DX_FIRST_ROW = R - SH on, whose dy rows it holds (the chunk's and DY_HALO past it); those
    // before are complete only in an image's first chunk (no dy rows above it).
    constexpr int DX_FIRST_ROW = KERNEL_R - STRIDE_H;
    static_assert((BLOCK_Q & (BLOCK_Q - 1)) == 0, "FUSE_DGRAD: the column wrap needs 2^k");
    // B[kk][c] = w[g8 + k, c, r, s] (kk = 8 h + k for the phase's tap 2j + h): lane holds
    // k = 2(l%4), 2(l%4)+1 of column c = l/4. A float32 weight (autocast) is rounded to Elem.
    unsigned dx_weight[KERNEL_R][STRIDE_W][S_PAIRS][2];
    {
        const Weight weight(const_cast<WElem*>(weight_ptr));
#pragma unroll
        for (int r = 0; r < KERNEL_R; ++r)
#pragma unroll
            for (int phi = 0; phi < STRIDE_W; ++phi)
#pragma unroll
                for (int j = 0; j < S_PAIRS; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int s = phase_tap_at(phi, 2 * j + h);
                        dx_weight[r][phi][j][h] = 0;
                        if (s >= 0 && warp_live) {
                            const auto tap = weight[group][CI(lane / 4)][R(r)][S(s)];
                            dx_weight[r][phi][j][h] = spio::pack2<Elem>(
                                static_cast<Elem>(*tap[KO(2 * (lane % 4))]),
                                static_cast<Elem>(*tap[KO(2 * (lane % 4) + 1)]));
                        }
                    }
    }
    // ldmatrix rows: lane l gives row l % 8 of matrix l / 8: pixel 8 (l / 8 % 2) + l % 8 of the
    // 16, the phase's tap 2j + l / 16. Its dy column in chunk c16 is dx_col + 16 c16 (mod
    // BLOCK_Q); the swizzle (TMA_ROWS) repeats every 8 pixels, so an address is that of the
    // column mod 8 plus whole 8-pixel steps.
    int dx_col[STRIDE_W][S_PAIRS];
    unsigned dx_lane[STRIDE_W][S_PAIRS];
#pragma unroll
    for (int phi = 0; phi < STRIDE_W; ++phi)
#pragma unroll
        for (int j = 0; j < S_PAIRS; ++j) {
            const int a = phase_tap_at(phi, 2 * j + lane / 16);
            const int s = a >= 0 ? a : max(phase_tap_at(phi, 2 * j), 0);  // x2: lanes 16+ unused
            dx_col[phi][j] = 8 * (lane / 8 % 2) + lane % 8 + (phi + PAD_W - s) / STRIDE_W;
            dx_lane[phi][j] =
                spio::smem_address(smem_grad[warp_group][Q(dx_col[phi][j] & 7)].get());
        }
    const unsigned pix8 = smem_bytes(smem_grad[Q(8)].get(), smem_grad.get());
#endif
    auto multiply_row = [&](const Task& task, int i, int u, unsigned xs,
                            const unsigned (&ds)[KERNEL_R + 1]) {
        if (!warp_live) return;  // warp-uniform
        if (!x_row_inside(task, i)) {
            if constexpr (HAS_BIAS) {
                if (u % STRIDE_H == 0 && dy_row_inside(task, i / STRIDE_H)) {
#pragma unroll 1
                    for (int qp = 0; qp < q_pairs; ++qp) {
                        unsigned b[2];
                        spio::ldmatrix_x2_trans(b, dy_col(2 * qp) + ds[0]);
                        spio::mma_m16n8k16<Elem>(reg_bias, ones, b);
                    }
                    if (q_odd) {
                        unsigned b[1];
                        spio::ldmatrix_x1_trans(b, dy_col(q_chunks - 1) + ds[0]);
                        spio::mma_m16n8k8<Elem>(reg_bias, ones_k8, b[0]);
                    }
                }
            }
            return;
        }
#pragma unroll 1
        for (int qp = 0; qp < q_pairs; ++qp) {
            unsigned a[S_PAIRS][4];
#pragma unroll
            for (int j = 0; j < S_PAIRS; ++j) spio::ldmatrix_x4_trans(a[j], x_col(j, 2 * qp) + xs);
#pragma unroll
            for (int r = 0; r < KERNEL_R; ++r) {
                if (tap_live(task, i, u, r)) {
                    unsigned b[2];
                    spio::ldmatrix_x2_trans(b, dy_col(2 * qp) + ds[r]);
#pragma unroll
                    for (int j = 0; j < S_PAIRS; ++j) {
                        spio::mma_m16n8k16<Elem>(reg_acc[r][j], a[j], b);
                    }
                    if constexpr (HAS_BIAS) {
                        if (r == 0) spio::mma_m16n8k16<Elem>(reg_bias, ones, b);
                    }
                }
            }
        }
        if (q_odd) {
            const int qc = q_chunks - 1;
            unsigned a[S_PAIRS][2];
#pragma unroll
            for (int j = 0; j < S_PAIRS; ++j) spio::ldmatrix_x2_trans(a[j], x_col(j, qc) + xs);
#pragma unroll
            for (int r = 0; r < KERNEL_R; ++r) {
                if (tap_live(task, i, u, r)) {
                    unsigned b[1];
                    spio::ldmatrix_x1_trans(b, dy_col(qc) + ds[r]);
#pragma unroll
                    for (int j = 0; j < S_PAIRS; ++j) {
                        spio::mma_m16n8k8<Elem>(reg_acc[r][j], a[j], b[0]);
                    }
                    if constexpr (HAS_BIAS) {
                        if (r == 0) spio::mma_m16n8k8<Elem>(reg_bias, ones_k8, b[0]);
                    }
                }
            }
        }
#if FUSE_DGRAD
        // dx row h0 + i (an x row inside the image), where this task owns it: rows from
        // DX_FIRST_ROW on (the rows before are the previous chunk's last), every row of an
        // image's first chunk.
        if (P_CHUNKS > 1 && i < DX_FIRST_ROW && task.p0 != 0) return;  // CTA-uniform
        // dy row (i - r) / SH held (the chunk's or its halo's) for dx row i through filter row r
        auto dx_tap_live = [&](int r) {
            return (u - r) % STRIDE_H == 0 && (u >= r || i >= r) &&
                   dy_row_held(task, (i - r) / STRIDE_H);
        };
        // in uint4 from dx_ptr (as x's row i)
        const unsigned dx_row = TMA_ROWS ? (task.x + static_cast<unsigned>(i)) * x_row
                                         : task.x + static_cast<unsigned>(i) * x_row;
        unsigned* const dx_out =
            reinterpret_cast<unsigned*>(dx_ptr + (dx_row + group.get())) + lane % 4;
#pragma unroll
        for (int phi = 0; phi < STRIDE_W; ++phi) {
            const int taps = phase_taps(phi);
            const int cols = (IN_W - phi + STRIDE_W - 1) / STRIDE_W;  // dx columns of the phase
#pragma unroll 1
            for (int c16 = 0; c16 < (cols + 15) / 16; ++c16) {
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int r = 0; r < KERNEL_R; ++r) {
                    if (!dx_tap_live(r)) continue;
#pragma unroll
                    for (int j = 0; j < S_PAIRS; ++j) {
                        if (2 * j >= taps) break;
                        const int q = (dx_col[phi][j] + 16 * c16) & (BLOCK_Q - 1);
                        const unsigned a_row =
                            dx_lane[phi][j] + static_cast<unsigned>(q >> 3) * pix8 + ds[r];
                        if (2 * j + 1 < taps) {
                            unsigned a[4];
                            spio::ldmatrix_x4(a, a_row);
                            spio::mma_m16n8k16<Elem>(acc, a, dx_weight[r][phi][j]);
                        } else {
                            unsigned a[2];
                            spio::ldmatrix_x2(a, a_row);
                            spio::mma_m16n8k8<Elem>(acc, a, dx_weight[r][phi][j][0]);
                        }
                    }
                }
                // c0, c1: the phase's column m = 16 c16 + l / 4, channels 2(l%4), +1; c2, c3:
                // m + 8. A phase without taps stores zeros.
                const int m = 16 * c16 + lane / 4;
                if (m < cols) {
                    dx_out[(STRIDE_W * m + phi) * GROUPS * 4] =
                        spio::round_pack2<Elem>(acc[0], acc[1]);
                }
                if (m + 8 < cols) {
                    dx_out[(STRIDE_W * (m + 8) + phi) * GROUPS * 4] =
                        spio::round_pack2<Elem>(acc[2], acc[3]);
                }
            }
        }
#endif
    };

    // ---- main loop: every row of this split's tasks, STAGES - 1 rows ahead ----------------------
    // Ring state at stream position k: the x stage of k and of k - 1 (the one refilled at k, with
    // position k + STAGES - 1), the dy slots of k, k - 1, ..., k - R (the last refilled at k).
    // TMA_ROWS: the barriers of k and of k - 1 (bar, bar_free), and the parity of k's phase.
    unsigned xs = 0;
    unsigned xs_free = (STAGES - 1) * x_stage;
    unsigned bar = row_full;
    unsigned bar_free = row_full + 8 * (STAGES - 1);
    unsigned phase = 0;
    unsigned ds[KERNEL_R + 1];
#pragma unroll
    for (int r = 0; r <= KERNEL_R; ++r) ds[r] = (DY_ROWS - r) % DY_ROWS * dy_slot;
#if TMA_ROWS
    // The barriers, before the first copy and before anyone waits on them. Without the CTA
    // barrier here (the inits and the first arrivals are all thread 0's) compute-sanitizer's
    // racecheck reported hazards between them (warnings, 48-384 per launch, on an H100).
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) spio::mbarrier::init(row_full + 8 * s, 1);
        spio::mbarrier::fence_init();
    }
    __syncthreads();
#endif
#pragma unroll
    for (int k = 0; k < STAGES - 1; ++k) {
        if (first + k / TILE_H < last) {
            load_row(task_at(first + k / TILE_H), k % TILE_H, k * x_stage, k * dy_slot,
                     row_full + 8 * k);
        }
        if (!TMA_ROWS) spio::cp_async_commit();
    }
    // The accumulators start at zero only now, after the pipeline fill's copies (an asm volatile
    // zero stays behind them): ptxas would otherwise zero them first, and at 5x3 taps and 4
    // warps their 44 registers live through the fill pushed one address to the stack.
#pragma unroll
    for (int r = 0; r < KERNEL_R; ++r)
#pragma unroll
        for (int j = 0; j < S_PAIRS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) reg_acc[r][j][e] = zero();
#pragma unroll
    for (int e = 0; e < 4; ++e) reg_bias[e] = zero();
    // One pipeline step: row i of the task (u: i - u is a multiple of STEP_ROWS) is multiplied
    // while row ia = i + STAGES - 1 of task t + dt (the row STAGES - 1 positions ahead in the
    // stream) is copied. In the chunked rows ia stays in task t; in the unrolled tail i, ia and
    // dt are compile-time constants.
    auto step = [&](int t, const Task& task, int i, int u, bool chunked) {
#if TMA_ROWS
        spio::mbarrier::wait(bar, phase);  // row i's copies have landed
#else
        spio::cp_async_wait<STAGES - 2>();
#endif
        __syncthreads();  // row i visible; everyone is done with the stage refilled
        const int ia = i + STAGES - 1;
        const int dt = chunked ? 0 : ia / TILE_H;
        if (t + dt < last) load_row(dt == 0 ? task : task_at(t + dt), ia - dt * TILE_H, xs_free,
                                    ds[KERNEL_R], bar_free);
        if (!TMA_ROWS) spio::cp_async_commit();
        multiply_row(task, i, u, xs, ds);
        xs_free = xs;
        bar_free = bar;
        const bool wrap = xs + x_stage == STAGES * x_stage;
        xs = wrap ? 0 : xs + x_stage;
        if constexpr (TMA_ROWS) {
            bar = wrap ? row_full : bar + 8;
            phase ^= wrap ? 1u : 0u;
        }
#pragma unroll
        for (int r = KERNEL_R; r > 0; --r) ds[r] = ds[r - 1];
        ds[0] = ds[0] + dy_slot == DY_ROWS * dy_slot ? 0 : ds[0] + dy_slot;
    };
#pragma unroll 1
    for (int t = first; t < last; ++t) {
        const Task task = task_at(t);
#pragma unroll 1
        for (int i0 = 0; i0 < CHUNKED_ROWS; i0 += STEP_ROWS) {
#pragma unroll
            for (int u = 0; u < STEP_ROWS; ++u) step(t, task, i0 + u, u, true);
        }
#pragma unroll
        for (int i = CHUNKED_ROWS; i < TILE_H; ++i) step(t, task, i, i, false);
    }
    if (!TMA_ROWS) spio::cp_async_wait<0>();  // TMA_ROWS: every copy was waited for in its step
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
