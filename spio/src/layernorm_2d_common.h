/// Shared part of layernorm_2d.cu (forward) and layernorm_2d_bwd.cu (backward): the row
/// geometry's preconditions, fp16/bf16/fp32 vector unpack/pack, the row sum over a row's threads,
/// row and weight/bias loads. Included after the generated header (its names: X, THREAD, CV,
/// VEC_STEP, AFFINE, ROW, DATA, WEIGHT, CHANNELS, VEC, ROW_VECS, VECS_PER_THREAD,
/// THREADS_PER_ROW, ROWS_PER_BLOCK, BLOCK_THREADS). Found through the -I of the kernels' specs
/// (spio/kernels/layernorm_2d.py), which keys the compile cache on this directory too.
#pragma once

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

}  // namespace
