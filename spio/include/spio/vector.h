/// 16-byte vectors: global loads/stores (coherent and non-coherent) and 8 x 16-bit <-> fp32.
///
/// A 16-byte access is the widest single memory instruction (LDG.E.128 / STG.E.128); kernels that
/// move activations use it for every global access. Vec8<T> holds 8 halves or bfloat16s in one
/// uint4 and converts them to and from 8 floats, so kernels never shuffle bits by hand.
///
/// Example (scale 8 halves):
///     spio::Half8 v = spio::Half8::load(x_ptr);        // 16-byte aligned
///     float f[8];  v.to_float(f);
///     for (float& e : f) e *= 2.0f;
///     spio::Half8::from_float(f).store(y_ptr);
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Loads 16 bytes from global memory (one LDG.E.128). ptr must be 16-byte aligned.
///
/// A plain C++ load, so the compiler sees the access and orders it against this thread's stores.
SPIO_DEVICE uint4 load_global_16(const void* ptr) { return *static_cast<const uint4*>(ptr); }

/// Loads 16 bytes through the read-only (non-coherent) path (ld.global.nc.v4.u32). 16-byte aligned.
///
/// Only for data that no thread of the grid writes during the kernel.
SPIO_DEVICE uint4 ldg_nc_16(const void* ptr) { return __ldg(static_cast<const uint4*>(ptr)); }

/// Stores 16 bytes to global memory (one STG.E.128). ptr must be 16-byte aligned.
SPIO_DEVICE void store_global_16(void* ptr, const uint4& v) { *static_cast<uint4*>(ptr) = v; }

namespace detail {
template <typename T>
struct Pair;
template <>
struct Pair<__half> {
    using type = __half2;
    SPIO_DEVICE static float2 to_float2(type p) { return __half22float2(p); }
    SPIO_DEVICE static type from_float2(float2 f) { return __float22half2_rn(f); }
};
template <>
struct Pair<__nv_bfloat16> {
    using type = __nv_bfloat162;
    SPIO_DEVICE static float2 to_float2(type p) { return __bfloat1622float2(p); }
    SPIO_DEVICE static type from_float2(float2 f) { return __float22bfloat162_rn(f); }
};
template <typename T>
inline constexpr bool is_16bit_float_v = false;
template <>
inline constexpr bool is_16bit_float_v<__half> = true;
template <>
inline constexpr bool is_16bit_float_v<__nv_bfloat16> = true;
}  // namespace detail

/// Eight 16-bit floats (__half or __nv_bfloat16) in one 16-byte register vector.
///
/// Element i sits at byte offset 2 i, so load/store keep memory order.
template <typename T>
struct Vec8 {
    static_assert(detail::is_16bit_float_v<T>,
                  "spio::Vec8<T>: T must be __half or __nv_bfloat16; use float4 pairs for fp32");
    using element_type = T;
    using pair_type = typename detail::Pair<T>::type;
    static constexpr int size = 8;

    uint4 raw;

    /// Wraps 16 raw bytes.
    SPIO_DEVICE static Vec8 from_raw(uint4 r) { return Vec8{r}; }

    /// Loads 16 bytes from global memory (coherent). 16-byte aligned.
    SPIO_DEVICE static Vec8 load(const void* gmem) { return Vec8{load_global_16(gmem)}; }

    /// Loads 16 bytes through the non-coherent read-only path. 16-byte aligned.
    SPIO_DEVICE static Vec8 load_nc(const void* gmem) { return Vec8{ldg_nc_16(gmem)}; }

    /// Stores the 16 bytes to global memory. 16-byte aligned.
    SPIO_DEVICE void store(void* gmem) const { store_global_16(gmem, raw); }

    /// The i-th pair of elements (2i, 2i+1), i in [0, 4).
    SPIO_DEVICE pair_type pair(int i) const {
        const unsigned* w = &raw.x;
        const unsigned bits = w[i];
        return *reinterpret_cast<const pair_type*>(&bits);
    }

    /// Converts the 8 elements to fp32 (exact).
    SPIO_DEVICE void to_float(float (&out)[8]) const {
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f =
                detail::Pair<T>::to_float2(*reinterpret_cast<const pair_type*>(&words[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }

    /// Rounds 8 floats to T (round to nearest even).
    SPIO_DEVICE static Vec8 from_float(const float (&in)[8]) {
        unsigned words[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const pair_type p = detail::Pair<T>::from_float2(make_float2(in[2 * i], in[2 * i + 1]));
            words[i] = *reinterpret_cast<const unsigned*>(&p);
        }
        return Vec8{make_uint4(words[0], words[1], words[2], words[3])};
    }
};

/// Eight halves in 16 bytes.
using Half8 = Vec8<__half>;
/// Eight bfloat16s in 16 bytes.
using Bf16x8 = Vec8<__nv_bfloat16>;

/// Packs two 16-bit floats into one 32-bit mma operand register (lo = lower index).
template <typename T>
SPIO_DEVICE unsigned pack2(T lo, T hi) {
    static_assert(detail::is_16bit_float_v<T>,
                  "spio::pack2<T>: T must be __half or __nv_bfloat16; convert the values first");
    const unsigned short l = *reinterpret_cast<const unsigned short*>(&lo);
    const unsigned short h = *reinterpret_cast<const unsigned short*>(&hi);
    return static_cast<unsigned>(l) | (static_cast<unsigned>(h) << 16);
}

/// The two 16-bit floats of a packed 32-bit word (pack2's layout: lo = lower index) as floats.
template <typename T>
SPIO_DEVICE float2 unpack2(unsigned word) {
    static_assert(detail::is_16bit_float_v<T>,
                  "spio::unpack2<T>: T must be __half or __nv_bfloat16");
    using pair_type = typename detail::Pair<T>::type;
    return detail::Pair<T>::to_float2(*reinterpret_cast<const pair_type*>(&word));
}

/// Rounds two floats to T (nearest even) and packs them into one 32-bit word (lo = lower index):
/// a __half2 / __nv_bfloat162 as raw bits, e.g. an mma accumulator pair on its way to memory.
template <typename T>
SPIO_DEVICE unsigned round_pack2(float lo, float hi) {
    static_assert(detail::is_16bit_float_v<T>,
                  "spio::round_pack2<T>: T must be __half or __nv_bfloat16");
    const typename detail::Pair<T>::type p = detail::Pair<T>::from_float2(make_float2(lo, hi));
    return *reinterpret_cast<const unsigned*>(&p);
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
