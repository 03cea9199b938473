/// Hopper warpgroup MMA (`wgmma.mma_async`) on shared-memory matrix descriptors: sm_90a only.
///
/// D(64xN, fp32) = A(64x16) * B(16xN) (+ D), A and B read from shared memory through 64-bit
/// descriptors (`make_desc`), D in registers spread over the 128 threads of a warpgroup (four
/// consecutive warps, the first a multiple of 4). The instruction is asynchronous: issue
/// `fence()` before the first wgmma that touches the accumulators, `commit_group()` after a
/// batch, `wait_group<N>()` before reading D or overwriting the operands' shared memory.
///
/// Accumulator layout (the PTX ISA's; per warp as mma.m16n8): thread t of the warpgroup holds
/// d[i] at row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (t % 4) + i % 2.
///
/// Shared-memory operands without swizzle: 8x8 core matrices of 8 rows x 16 bytes (8 elements
/// along K: K-major), each stored contiguously (128 bytes); `lbo_bytes` is the distance between
/// core matrices adjacent along K, `sbo_bytes` between those adjacent along M (A) or N (B).
/// With the 128-byte swizzle (Swizzle::B128, what TMA writes): rows of 128 bytes (64 elements
/// along K), the 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8 rows per 1024-byte
/// atom (1024-byte aligned; `sbo_bytes` 1024, `lbo_bytes` unused); the K-step of 16 elements at
/// byte 32 ks of the row is the descriptor of the tile's start plus 32 ks bytes.
///
/// Defined only where the compiler targets sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`): SPIO_WGMMA is 1
/// there and 0 elsewhere (sm_80, plain sm_90, a host compiler). Compile-tested on the host
/// (tests/host/include/test_wgmma.py); the numerics are checked by tests/gpu/test_wgmma.py.
///
/// Example (one 64x64 tile, K = 16, no swizzle; A 64x16 and B^T 64x16 staged K-major):
///     float d[32];
///     const auto da = spio::warpgroup::make_desc(smem_a, 128, 256);
///     const auto db = spio::warpgroup::make_desc(smem_b, 128, 256);
///     spio::warpgroup::fence();
///     spio::warpgroup::mma_async<__half, 64>(d, da, db, false);   // D = A B
///     spio::warpgroup::commit_group();
///     spio::warpgroup::wait_group<0>();
#pragma once

#include "spio/device.h"
#include "spio/mma.h"

#if SPIO_GPU_BLOCKS && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPIO_WGMMA 1
namespace spio::warpgroup {

/// The swizzle mode of a descriptor's shared-memory layout (descriptor bits 62-63).
enum class Swizzle : unsigned { None = 0, B128 = 1, B64 = 2, B32 = 3 };

/// The 64-bit shared-memory matrix descriptor of a wgmma operand.
///
/// Parameters:
///   smem       the operand's first core matrix in shared memory, 16-byte aligned
///   lbo_bytes  bytes between core matrices adjacent along K (the leading dimension)
///   sbo_bytes  bytes between core matrices adjacent along M or N (the stride dimension)
///   swizzle    the layout's swizzle mode
/// Addresses and offsets are multiples of 16 below 256 KiB (14-bit fields in 16-byte units).
SPIO_DEVICE unsigned long long make_desc(const void* smem, unsigned lbo_bytes, unsigned sbo_bytes,
                                         Swizzle swizzle = Swizzle::None) {
    const unsigned long long field = 0x3FFFull;
    const unsigned long long addr = smem_address(smem);
    return ((addr >> 4) & field) | (((lbo_bytes >> 4) & field) << 16) |
           (((sbo_bytes >> 4) & field) << 32) | (static_cast<unsigned long long>(swizzle) << 62);
}

/// Row (0..63) of D that accumulator d[i] of warpgroup thread t (0..127) holds (the file
/// comment's layout).
SPIO_DEVICE constexpr int acc_row(int t, int i) {
    return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}

/// Column of D that accumulator d[i] of warpgroup thread t holds; d[i] and d[i + 1] (i even)
/// are adjacent columns of one row.
SPIO_DEVICE constexpr int acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

/// Makes this thread's ordinary stores to shared memory visible to the async proxy that wgmma
/// (and TMA) read through (fence.proxy.async.shared::cta): each thread that wrote an operand,
/// before the barrier that precedes the wgmma.
SPIO_DEVICE void fence_async_proxy() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Orders the warpgroup's earlier accesses to the accumulators and to shared memory before the
/// wgmma that follow (wgmma.fence). Warpgroup-wide.
SPIO_DEVICE void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

/// Closes the batch of wgmma issued since the last commit (wgmma.commit_group). Warpgroup-wide.
SPIO_DEVICE void commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/// Waits until at most N committed batches are in flight (wgmma.wait_group). Warpgroup-wide.
template <int N>
SPIO_DEVICE void wait_group() {
    static_assert(N >= 0 && N <= 7,
                  "spio::warpgroup::wait_group<N>: N is a count of pending batches, 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/// Sets the warpgroup's registers per thread to N (setmaxnreg): fewer (`lower_registers`) hands
/// the rest back to the CTA's pool, more (`raise_registers`) takes them from it, blocking until
/// the pool has them. A warp-specialised kernel gives its copy warpgroup's registers to the
/// warpgroups that hold accumulators. Warpgroup-wide (every thread of the warpgroup executes the
/// same one); N a multiple of 8 in [24, 256]. The pool is what the launch allocated (registers a
/// thread x threads): raising past it never returns.
template <int N>
SPIO_DEVICE void lower_registers() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256,
                  "spio::warpgroup::lower_registers<N>: N is a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N>
SPIO_DEVICE void raise_registers() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256,
                  "spio::warpgroup::raise_registers<N>: N is a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

namespace detail {
template <int N>
struct Mma;
}  // namespace detail

/// D(64xN) = A(64x16) B(16xN) + (accumulate ? D : 0) with fp32 accumulators, A K-major or
/// (MMajorA) M-major in shared memory, B K-major or (NMajorB) N-major. Warpgroup-wide;
/// asynchronous (see commit_group / wait_group).
///
/// Template parameters:
///   T           the operand type, __half or __nv_bfloat16
///   N           16, 32, 64, 128 or 256: the columns of D (N / 2 accumulators per thread)
///   NMajorB     false: B stored as N rows along K (B transposed, K-major); true: B stored as
///               16 rows along K of N elements (N-major, the wgmma's transposed-B mode: 16-bit
///               types only). With the 128-byte swizzle an N-major operand is 64-element
///               (128-byte) rows of N, one per k, in 1024-byte atoms of 8 rows: `sbo_bytes`
///               between atoms along K (1024 for rows stored one after another), `lbo_bytes`
///               between the 64-wide blocks along N.
///   MMajorA     the same for A: false, 64 rows along K (K-major); true, 16 rows along K of
///               64 elements of M (M-major, the transposed-A mode), `sbo_bytes` between the
///               8-row atoms along K.
/// Parameters:
///   d           this thread's accumulators (layout in the file comment)
///   desc_a      A's descriptor (64 rows x 16 along K)
///   desc_b      B's descriptor (16 along K x N)
///   accumulate  false: D = A B; true: D += A B
template <typename T, int N, bool NMajorB = false, bool MMajorA = false>
SPIO_DEVICE void mma_async(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                           bool accumulate) {
    // Preconditions
    static_assert(spio::detail::is_mma_input_v<T>,
                  "spio::warpgroup::mma_async<T, N>: T must be __half or __nv_bfloat16 (fp32 "
                  "accumulators); convert the operands to one of those types");  // T
    static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                  "spio::warpgroup::mma_async<T, N>: N must be 16, 32, 64, 128 or 256 (the "
                  "wrapped shapes); tile wider N as several calls");  // N
    detail::Mma<N>::template run<T, MMajorA, NMajorB>(d, desc_a, desc_b, accumulate);
}

namespace detail {

#define SPIO_WGMMA_REGS_16 \
    "%0,%1,%2,%3,%4,%5,%6,%7"
#define SPIO_WGMMA_OUTS_16 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7])
#define SPIO_WGMMA_REGS_32 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define SPIO_WGMMA_OUTS_32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define SPIO_WGMMA_REGS_64 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define SPIO_WGMMA_OUTS_64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31])
#define SPIO_WGMMA_REGS_128 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define SPIO_WGMMA_OUTS_128 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
    "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define SPIO_WGMMA_REGS_256 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define SPIO_WGMMA_OUTS_256 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
    "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), \
    "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
    "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), \
    "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), \
    "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
    "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), \
    "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), \
    "+f"(d[126]), "+f"(d[127])
// The asm text of one wgmma m64nNk16 with fp32 accumulators: TY the operand type's PTX name,
// REGS the accumulators' operand list, IA/IB/IP the operand numbers of the two descriptors and
// the accumulate flag (after the N / 2 accumulators), TA / TB the transpose flags of A and B
// (1: M-major / N-major).
#define SPIO_WGMMA_ASM(N, TY, REGS, IA, IB, IP, TA, TB)                            \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                             \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" #IA \
    ", %" #IB ", p, 1, 1, " #TA ", " #TB ";\n}\n"
// One wgmma statement of Mma<N>::run (a, b, acc and d in scope).
#define SPIO_WGMMA_ONE(N, TY, IA, IB, IP, TA, TB)                                \
    asm volatile(SPIO_WGMMA_ASM(N, TY, SPIO_WGMMA_REGS_##N, IA, IB, IP, TA, TB) \
                 : SPIO_WGMMA_OUTS_##N                                          \
                 : "l"(a), "l"(b), "r"(static_cast<int>(acc)))

// One specialization Mma<N>: the fp16 and bf16 forms of wgmma m64nNk16 (N / 2 accumulators,
// then the descriptors and the accumulate flag as operands N / 2, N / 2 + 1, N / 2 + 2).
#define SPIO_WGMMA_SPECIALIZE(N, HALF_N, IA, IB, IP)                                             \
    template <>                                                                                \
    struct Mma<N> {                                                                            \
        template <typename T, bool TA, bool TB>                                                \
        SPIO_DEVICE static void run(float (&d)[HALF_N], unsigned long long a,                  \
                                    unsigned long long b, bool acc) {                          \
            constexpr bool H = spio::detail::is_half_v<T>;                                     \
            if constexpr (H && !TA && !TB) {                                                   \
                SPIO_WGMMA_ONE(N, "f16", IA, IB, IP, 0, 0);                                    \
            } else if constexpr (H && !TA) {                                                   \
                SPIO_WGMMA_ONE(N, "f16", IA, IB, IP, 0, 1);                                    \
            } else if constexpr (H && !TB) {                                                   \
                SPIO_WGMMA_ONE(N, "f16", IA, IB, IP, 1, 0);                                    \
            } else if constexpr (H) {                                                          \
                SPIO_WGMMA_ONE(N, "f16", IA, IB, IP, 1, 1);                                    \
            } else if constexpr (!TA && !TB) {                                                 \
                SPIO_WGMMA_ONE(N, "bf16", IA, IB, IP, 0, 0);                                   \
            } else if constexpr (!TA) {                                                        \
                SPIO_WGMMA_ONE(N, "bf16", IA, IB, IP, 0, 1);                                   \
            } else if constexpr (!TB) {                                                        \
                SPIO_WGMMA_ONE(N, "bf16", IA, IB, IP, 1, 0);                                   \
            } else {                                                                           \
                SPIO_WGMMA_ONE(N, "bf16", IA, IB, IP, 1, 1);                                   \
            }                                                                                  \
        }                                                                                      \
    };

SPIO_WGMMA_SPECIALIZE(16, 8, 8, 9, 10)
SPIO_WGMMA_SPECIALIZE(32, 16, 16, 17, 18)
SPIO_WGMMA_SPECIALIZE(64, 32, 32, 33, 34)
SPIO_WGMMA_SPECIALIZE(128, 64, 64, 65, 66)
SPIO_WGMMA_SPECIALIZE(256, 128, 128, 129, 130)

#undef SPIO_WGMMA_REGS_16
#undef SPIO_WGMMA_OUTS_16
#undef SPIO_WGMMA_REGS_32
#undef SPIO_WGMMA_OUTS_32
#undef SPIO_WGMMA_REGS_64
#undef SPIO_WGMMA_OUTS_64
#undef SPIO_WGMMA_REGS_128
#undef SPIO_WGMMA_OUTS_128
#undef SPIO_WGMMA_REGS_256
#undef SPIO_WGMMA_OUTS_256
#undef SPIO_WGMMA_ASM
#undef SPIO_WGMMA_ONE
#undef SPIO_WGMMA_SPECIALIZE

}  // namespace detail

}  // namespace spio::warpgroup
#else
#define SPIO_WGMMA 0
#endif
