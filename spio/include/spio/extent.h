/// Extents: one dimension of a tensor or compound index, with its size and stride.
///
/// `Extent<D, Size, Stride>` says D takes Size values and one step of D moves Stride elements.
/// Leaving Stride out means row-major: the stride is the size times stride of the next extent
/// (1 for the last). The generators always emit explicit strides.
///
/// Example: spio::Tensor<float, spio::Extent<I, 16>, spio::Extent<K, 32>> has strides I 32, K 1.
#pragma once

#include "spio/dim.h"
#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

/// The Stride of an Extent that was not given: computed row-major from the following extents.
inline constexpr int row_major_stride = -2147483647 - 1;

/// One dimension of a layout.
///
/// Template parameters:
///   D        the dimension (base, fold or module)
///   Size     number of values of D, > 0
///   Stride   elements per step of D (row_major_stride: computed; 0 broadcasts)
template <DimLike D, int Size, int Stride = row_major_stride>
struct Extent {
    static_assert(Size > 0,
                  "spio::Extent<D, Size, Stride>: Size must be positive; drop the extent if "
                  "the dimension is empty");
    using dim = D;
    static constexpr int size = Size;
    static constexpr int stride = Stride;
};

namespace detail {
template <class T>
inline constexpr bool is_extent_v = false;
template <class D, int Size, int Stride>
inline constexpr bool is_extent_v<Extent<D, Size, Stride>> = true;
}  // namespace detail

/// An Extent<D, Size, Stride>.
template <class T>
concept ExtentLike = detail::is_extent_v<T>;

namespace detail {

/// A constexpr fixed-size array (NVRTC has no <array>).
template <class T, int N>
struct Array {
    T data[N > 0 ? N : 1];
    SPIO_HOST_DEVICE constexpr T& operator[](int i) { return data[i]; }
    SPIO_HOST_DEVICE constexpr const T& operator[](int i) const { return data[i]; }
};

/// The strides of extents Es..., row_major_stride entries resolved right to left.
///
/// Example: (Extent<I, 16>, Extent<K, 32>) -> {32, 1};  (Extent<I, 16>, Extent<K, 32, 2>) -> {64, 2}.
template <class... Es>
SPIO_HOST_DEVICE constexpr Array<int, sizeof...(Es)> resolved_strides() {
    Array<int, sizeof...(Es)> out{};
    if constexpr (sizeof...(Es) > 0) {
        constexpr int n = sizeof...(Es);
        const int sizes[n] = {Es::size...};
        const int given[n] = {Es::stride...};
        int next = 1;
        for (int i = n - 1; i >= 0; --i) {
            out[i] = given[i] == row_major_stride ? next : given[i];
            next = out[i] * sizes[i];
        }
    }
    return out;
}

}  // namespace detail
}  // namespace spio
