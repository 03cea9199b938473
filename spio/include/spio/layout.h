/// Layouts: the offset function of a tensor type, from its extents and swizzles.
///
/// A cursor (cursor.h) keeps a pointer, a linear element offset (one int) and, for some base dims,
/// an accumulated logical coordinate in base units (a "slot"). A subscript either adds to the
/// linear offset at once ("immediate") or adds to a slot:
///   - a base whose only extent is the plain dim (stride 1, not a Module, not swizzled) has no
///     slot: every subscript of it (the dim, a fold, a module) is immediate;
///   - a base with one fold extent (e.g. only C8) is immediate for subscripts whose
///     stride is a multiple of the fold's (C8, C16...), and accumulates finer ones (C) in its slot;
///   - a base with several extents (K8 and K % 8), a Module extent, or a swizzled dim always
///     accumulates, so `a[K(7)][K(5)] == a[K(12)]` (carry across folds).
/// At dereference each slot is split into its extents' indices by floor division (negative
/// coordinates work like pointer arithmetic); the coarsest extent of a base is not reduced modulo
/// its size (a cursor may step past the end, like a pointer), finer ones and Modules are. Swizzles
/// then permute their Col index by their Row index. All of it is compile-time except the adds,
/// shifts and masks a hand-written kernel would do.
#pragma once

#include "spio/dim.h"
#include "spio/extent.h"
#include "spio/macros.h"
#include "spio/meta.h"
#include "spio/swizzle.h"

namespace spio {
namespace detail {

template <class T, class List>
inline constexpr int index_in_list_v = -1;
template <class T, class... Ts>
inline constexpr int index_in_list_v<T, TypeList<Ts...>> = index_of_v<T, Ts...>;

/// The first of Ts... that is not void (void when all are).
template <class... Ts>
struct FirstNonVoid {
    using type = void;
};
template <class T, class... Ts>
struct FirstNonVoid<T, Ts...> {
    using type = T;
};
template <class... Ts>
struct FirstNonVoid<void, Ts...> : FirstNonVoid<Ts...> {};
template <class... Ts>
using first_non_void_t = typename FirstNonVoid<Ts...>::type;

template <class T>
struct IsExtent {
    static constexpr bool value = is_extent_v<T>;
};
template <class T>
struct IsSwizzle {
    static constexpr bool value = is_swizzle_v<T>;
};

template <class Extents, class Swizzles>
struct Layout;

/// The layout of extents Es... (with resolved strides) and swizzles Ss...
template <class... Es, class... Ss>
struct Layout<TypeList<Es...>, TypeList<Ss...>> {
    static constexpr int rank = sizeof...(Es);
    static constexpr Array<int, sizeof...(Es)> strides = resolved_strides<Es...>();

    /// Elements spanned: max over extents of size * stride, at least 1 (padding included).
    static constexpr int storage_size =
        max_of(1, (Es::size * strides[index_of_v<Es, Es...>])...);

    /// The element stride of extent E.
    template <class E>
    static constexpr int stride_of = strides[index_of_v<E, Es...>];

    /// The distinct base dims, in extent order.
    using bases = unique_t<typename Es::dim::base...>;

    template <class B>
    static constexpr bool has_base = (is_same_v<typename Es::dim::base, B> || ...);

    template <class B>
    static constexpr int count = (0 + ... + (is_same_v<typename Es::dim::base, B> ? 1 : 0));

    /// The first extent whose dim is exactly D (void when none).
    template <class D>
    using extent_for_dim = first_non_void_t<conditional_t<is_same_v<typename Es::dim, D>, Es, void>...>;

    template <class B>
    static constexpr bool swizzled =
        (false || ... ||
         (is_same_v<typename Ss::row::base, B> || is_same_v<typename Ss::col::base, B>));

    /// The largest dim stride among B's extents (the coarsest extent) and the smallest.
    template <class B>
    static constexpr int max_dim_stride =
        max_of(0, (is_same_v<typename Es::dim::base, B> ? Es::dim::stride : 0)...);
    template <class B>
    static constexpr int min_dim_stride = min_of(
        2147483647, (is_same_v<typename Es::dim::base, B> ? Es::dim::stride : 2147483647)...);

    /// The logical span of base B in base units: max over its extents of size * dim stride.
    template <class B>
    static constexpr int span =
        max_of(0, (is_same_v<typename Es::dim::base, B> ? Es::size * Es::dim::stride : 0)...);

    /// The extent of B when B has exactly one (else some extent of B).
    template <class B>
    using first_extent =
        first_non_void_t<conditional_t<is_same_v<typename Es::dim::base, B>, Es, void>...>;

    template <class B>
    struct NeedsSlot {
        static constexpr bool value = !(count<B> == 1 &&
                                        is_same_v<typename first_extent<B>::dim, B> &&
                                        !swizzled<B>);
    };

    template <class List>
    struct SlotsOf;
    template <class... Bs>
    struct SlotsOf<TypeList<Bs...>> {
        using type = filter_t<NeedsSlot, Bs...>;
    };
    /// The bases that keep an accumulated logical coordinate in a cursor.
    using slot_bases = typename SlotsOf<bases>::type;
    static constexpr int num_slots = slot_bases::size;

    template <class B>
    static constexpr int slot = index_in_list_v<B, slot_bases>;

    template <class D>
    SPIO_HOST_DEVICE static constexpr bool immediate_impl() {
        using B = typename D::base;
        if constexpr (count<B> != 1 || swizzled<B>) {
            return false;
        } else {
            using E = first_extent<B>;
            return !is_module_v<typename E::dim> && D::stride % E::dim::stride == 0;
        }
    }

    /// True when a subscript of dim D adds to the linear offset at once (see the file comment).
    template <class D>
    static constexpr bool immediate = immediate_impl<D>();

    /// Elements the linear offset moves per unit of an immediate subscript D.
    template <class D>
    static constexpr int immediate_scale =
        (D::stride / first_extent<typename D::base>::dim::stride) *
        stride_of<first_extent<typename D::base>>;

    /// The index of extent E resolved from the accumulated slots (before swizzles).
    template <class E>
    SPIO_HOST_DEVICE static constexpr int index(const int* acc) {
        using D = typename E::dim;
        using B = typename D::base;
        const int q = floor_div<D::stride>(acc[slot<B>]);
        if constexpr (is_module_v<D>) {
            return floor_mod<D::size>(q);
        } else if constexpr (D::stride == max_dim_stride<B>) {
            return q;
        } else {
            return floor_mod<E::size>(q);
        }
    }

    /// Swizzle S applied to index i of extent E (i itself when S's Col is not E's dim).
    template <class S, class E>
    SPIO_HOST_DEVICE static constexpr int apply_swizzle(int i, const int* acc) {
        if constexpr (is_same_v<typename S::col, typename E::dim>) {
            return S::apply(i, index<extent_for_dim<typename S::row>>(acc));
        } else {
            return i;
        }
    }

    /// The index of extent E after the swizzle (if any) whose Col is E's dim.
    template <class E>
    SPIO_HOST_DEVICE static constexpr int swizzled_index(const int* acc) {
        int i = index<E>(acc);
        ((i = apply_swizzle<Ss, E>(i, acc)), ...);
        return i;
    }

    template <class E>
    SPIO_HOST_DEVICE static constexpr int term(const int* acc) {
        if constexpr (NeedsSlot<typename E::dim::base>::value) {
            return swizzled_index<E>(acc) * stride_of<E>;
        } else {
            return 0;
        }
    }

    /// The element offset of the accumulated slots (the linear offset excluded).
    SPIO_HOST_DEVICE static constexpr int offset(const int* acc) { return (0 + ... + term<Es>(acc)); }

    // ---- checks ---------------------------------------------------------------------------------
    static_assert(all_distinct_v<typename Es::dim...>,
                  "spio::Tensor: each dim may have only one Extent; merge the duplicate extents "
                  "or use a fold (K / 8) and a module (K % 8) for a tiled layout");
    template <class E>
    static constexpr bool unique_stride =
        (0 + ... + (same_base_v<typename Es::dim, typename E::dim> &&
                            Es::dim::stride == E::dim::stride
                        ? 1
                        : 0)) == 1;
    static_assert((unique_stride<Es> && ...),
                  "spio::Tensor: two extents of one base dim have the same stride (e.g. a Fold "
                  "and a Module of K by 8); keep one of them");
    template <class S>
    static constexpr bool swizzle_ok = !is_same_v<extent_for_dim<typename S::row>, void> &&
                                       !is_same_v<extent_for_dim<typename S::col>, void>;
    static_assert((swizzle_ok<Ss> && ...),
                  "spio::Tensor: a spio::Xor<Row, Col, ...> needs extents whose dims are exactly "
                  "Row and Col; use the tensor's own dim types in the swizzle");
    template <class S>
    SPIO_HOST_DEVICE static constexpr bool swizzle_fits_impl() {
        if constexpr (swizzle_ok<S>) {
            return extent_for_dim<typename S::col>::size % (1 << S::bits) == 0;
        } else {
            return true;
        }
    }
    template <class S>
    static constexpr bool swizzle_fits = swizzle_fits_impl<S>();
    static_assert((swizzle_fits<Ss> && ...),
                  "spio::Tensor: spio::Xor<Row, Col, Bits>: Col's extent size must be a multiple "
                  "of 2^Bits so the permutation stays inside the row; lower Bits or widen Col");
    static_assert(all_distinct_v<typename Ss::col...>,
                  "spio::Tensor: at most one swizzle per Col dim; combine them into one Xor");
};

}  // namespace detail
}  // namespace spio
