/// CompoundIndex: splits one linear index (blockIdx.x, threadIdx.x, a lane id) into typed dims.
///
/// `CompoundIndex<Extent<P16, 4>, Extent<Q16, 4>>` is row-major (the last dim varies fastest):
/// index i has P16 = i / 4 and Q16 = i % 4. Explicit strides in the extents give other orders.
/// The coarsest extent (largest stride; the first in row-major order) is not reduced modulo its
/// size, so an index past size() maps past the end, like a pointer. Pre: index >= 0.
///
/// Example:
///     using BlockIdx = spio::CompoundIndex<spio::Extent<P16, 4>, spio::Extent<Q16, 4>>;
///     BlockIdx idx(blockIdx.x);  idx.get<P16>();  idx.coordinates();  BlockIdx::size() == 16
///     BlockIdx(6).get<P16>() == P16(1);  BlockIdx(6).get<Q16>() == Q16(2)
#pragma once

#include "spio/coordinates.h"
#include "spio/dim.h"
#include "spio/extent.h"
#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

/// A linear index viewed as the coordinates of Extents... (each an Extent<D, Size[, Stride]>).
template <ExtentLike... Extents>
class CompoundIndex {
    static_assert(sizeof...(Extents) > 0,
                  "spio::CompoundIndex<Extents...>: needs at least one Extent<D, Size>");
    static_assert(detail::all_distinct_v<typename Extents::dim...>,
                  "spio::CompoundIndex<Extents...>: each dim may appear once; remove the "
                  "duplicate Extent");
    static constexpr detail::Array<int, sizeof...(Extents)> strides_ =
        detail::resolved_strides<Extents...>();
    // The unreduced component: the first extent with the largest stride (size-1 extents can tie
    // with their neighbour; the first of a tie is the outer one in row-major order).
    SPIO_HOST_DEVICE static constexpr int coarsest_index() {
        int best = 0;
        for (int i = 1; i < static_cast<int>(sizeof...(Extents)); ++i) {
            best = strides_[i] > strides_[best] ? i : best;
        }
        return best;
    }

  public:
    SPIO_HOST_DEVICE constexpr explicit CompoundIndex(int index) : index_(index) {}
    SPIO_HOST_DEVICE constexpr explicit CompoundIndex(unsigned index)
        : index_(static_cast<int>(index)) {}

    /// Number of distinct indices: the product of the sizes.
    SPIO_HOST_DEVICE static constexpr int size() { return (1 * ... * Extents::size); }

    /// The linear index.
    SPIO_HOST_DEVICE constexpr int get() const { return index_; }

    /// The value of dim D: exactly one of the extents' dims, or any dim of a present base (the
    /// sum of that base's entries, converted to D).
    ///
    /// Example: CompoundIndex<Extent<P16, 4>, Extent<Q16, 4>>(6).get<Q16>() == Q16(2).
    template <DimLike D>
    SPIO_HOST_DEVICE constexpr D get() const {
        constexpr int i = detail::index_of_v<D, typename Extents::dim...>;
        if constexpr (i >= 0) {
            using E = detail::type_at_t<i, Extents...>;
            return D(component<E>());
        } else {
            static_assert((same_base_v<D, typename Extents::dim> || ...),
                          "spio::CompoundIndex::get<D>(): no extent has D's base dim; ask for one "
                          "of the index's dims");
            return coordinates().template get<D>();
        }
    }

    /// All components as coordinates (components of one base summed).
    SPIO_HOST_DEVICE constexpr auto coordinates() const {
        return make_coordinates(typename Extents::dim(component<Extents>())...);
    }

  private:
    template <class E>
    SPIO_HOST_DEVICE constexpr int component() const {
        constexpr int i = detail::index_of_v<E, Extents...>;
        // Unsigned: thread and block ids are non-negative, and unsigned division by a constant
        // is a shift or a multiply-high, as in hand-written index code.
        const unsigned q = static_cast<unsigned>(index_) / static_cast<unsigned>(strides_[i]);
        if constexpr (i == coarsest_index()) {
            return static_cast<int>(q);
        } else {
            return static_cast<int>(q % static_cast<unsigned>(E::size));
        }
    }

    int index_;
};

}  // namespace spio
