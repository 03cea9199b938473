/// Tensors: a pointer plus a compile-time layout of typed dimensions.
///
/// `Tensor<T, Extent<D, Size, Stride>..., Xor<...>...>` describes element type T, one Extent per
/// dim (row-major when strides are left out; the generators emit them) and optional swizzles
/// (swizzle.h). Subscripts are position-free and return cursors (cursor.h). Sizes are types:
/// `storage_size()`, `size<D>()` and `extents()` are constexpr.
///
/// Example:
///     using X = spio::Tensor<float, spio::Extent<I, 16, 32>, spio::Extent<K, 32, 1>>;
///     float buf[X::storage_size()];  auto x = X(buf);
///     x[I(2)][K(3)].get() == buf + 67;  x[K(3)][I(2)] == x[I(2) + K(3)];
///     X::size<K>() == K(32);  X::extents() == I(16) + K(32)
#pragma once

#include "spio/coordinates.h"
#include "spio/cursor.h"
#include "spio/dim.h"
#include "spio/extent.h"
#include "spio/layout.h"
#include "spio/macros.h"
#include "spio/meta.h"
#include "spio/swizzle.h"

namespace spio {

namespace detail {
template <class T>
inline constexpr bool is_layout_part_v = is_extent_v<T> || is_swizzle_v<T>;
}  // namespace detail

/// A tensor of T with extents and swizzles Parts...
///
/// Template parameters:
///   T       the element type: a scalar, or a vector such as uint4 (8 halves in 16 bytes)
///   Parts   spio::Extent<D, Size, Stride> per dim, then any spio::Xor swizzles
template <class T, class... Parts>
class Tensor {
    static_assert((detail::is_layout_part_v<Parts> && ...),
                  "spio::Tensor<T, Parts...>: every Part must be a spio::Extent<D, Size, Stride> "
                  "or a spio::Xor swizzle; wrap dims in Extent");

  public:
    using data_type = T;
    using layout =
        detail::Layout<detail::filter_t<detail::IsExtent, Parts...>,
                       detail::filter_t<detail::IsSwizzle, Parts...>>;

  private:
    // Naming layout::rank instantiates the layout, which checks its extents and swizzles.
    static_assert(layout::rank > 0, "spio::Tensor<T, Parts...>: a tensor needs at least one Extent");

  public:
    using cursor_type = Cursor<T, layout>;
    /// The same layout over read-only elements: `X::const_tensor(const_ptr)`.
    using const_tensor = Tensor<const T, Parts...>;

    SPIO_HOST_DEVICE constexpr explicit Tensor(T* ptr) : ptr_(ptr) {}

    /// Elements the tensor spans: max over extents of size * stride (padding included).
    SPIO_HOST_DEVICE static constexpr int storage_size() {
        return layout::storage_size;
    }

    /// Bytes the tensor spans: storage_size() * sizeof(T).
    SPIO_HOST_DEVICE static constexpr int storage_bytes() { return storage_size() * static_cast<int>(sizeof(T)); }

    /// The size of dim D: the extent's size when D is one of the dims, else the logical extent
    /// of D's base (max over its extents of size * stride) in units of D.
    ///
    /// Example: for (K8: 4, I: 16, K % 8: 8), size<K8>() == K8(4), size<K>() == K(32).
    template <DimLike D>
    SPIO_HOST_DEVICE static constexpr D size() {
        using B = typename D::base;
        static_assert(layout::template has_base<B>,
                      "spio::Tensor::size<D>(): the tensor has no dim of D's base; ask for one "
                      "of its dims");
        using E = typename layout::template extent_for_dim<D>;
        if constexpr (!detail::is_same_v<E, void>) {
            return D(E::size);
        } else {
            return D(layout::template span<B> / D::stride);
        }
    }

    /// Coordinates of the logical extent of every base dim, in the finest stride of the tensor.
    ///
    /// Example: (N: 4, C8: 8) -> N(4) + C8(8);  (K8: 4, I: 16, K % 8: 8) -> K(32) + I(16).
    SPIO_HOST_DEVICE static constexpr auto extents() { return extents_of(typename layout::bases{}); }

    /// A cursor at the tensor's origin.
    SPIO_HOST_DEVICE constexpr cursor_type cursor() const { return cursor_type(ptr_); }

    /// A cursor moved by x (a dim value or coordinates); see Cursor::step.
    template <class X>
    SPIO_HOST_DEVICE constexpr cursor_type operator[](X x) const {
        return cursor()[x];
    }

    /// The base pointer.
    SPIO_HOST_DEVICE constexpr T* get() const { return ptr_; }
    SPIO_HOST_DEVICE constexpr T& operator*() const { return *ptr_; }

  private:
    template <class... Bs>
    SPIO_HOST_DEVICE static constexpr auto extents_of(detail::TypeList<Bs...>) {
        return make_coordinates(detail::fold_t<Bs, layout::template min_dim_stride<Bs>>(
            layout::template span<Bs> / layout::template min_dim_stride<Bs>)...);
    }

    T* ptr_;
};

namespace detail {
template <class T>
inline constexpr bool is_tensor_v = false;
template <class T, class... Parts>
inline constexpr bool is_tensor_v<Tensor<T, Parts...>> = true;
}  // namespace detail

/// A spio::Tensor type.
template <class T>
concept TensorLike = detail::is_tensor_v<T>;

}  // namespace spio
