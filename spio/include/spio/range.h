/// range(): loops over the values of a dim or over a box of coordinates.
///
/// Example:
///     for (auto k : spio::range(K(32))) ...            // K(0) .. K(31)
///     for (auto k : spio::range(K(8), K(32))) ...      // K(8) .. K(31)
///     for (auto c : spio::range(X::extents())) ...     // coordinates, row-major (last fastest)
///     for (auto c : spio::range(I(2) + J(0), I(4) + J(3))) ...   // a tile: I in [2,4), J in [0,3)
#pragma once

#include "spio/coordinates.h"
#include "spio/dim.h"
#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

/// The values begin, begin + 1, ..., end - 1 of dim D.
template <DimLike D>
class DimRange {
  public:
    class Iterator {
      public:
        SPIO_HOST_DEVICE constexpr explicit Iterator(int v) : v_(v) {}
        SPIO_HOST_DEVICE constexpr D operator*() const { return D(v_); }
        SPIO_HOST_DEVICE constexpr Iterator& operator++() {
            ++v_;
            return *this;
        }
        SPIO_HOST_DEVICE constexpr bool operator!=(const Iterator& o) const { return v_ != o.v_; }
        SPIO_HOST_DEVICE constexpr bool operator==(const Iterator& o) const { return v_ == o.v_; }

      private:
        int v_;
    };

    SPIO_HOST_DEVICE constexpr DimRange(D begin, D end)
        : begin_(begin.get()), end_(end.get() > begin.get() ? end.get() : begin.get()) {}
    SPIO_HOST_DEVICE constexpr Iterator begin() const { return Iterator(begin_); }
    SPIO_HOST_DEVICE constexpr Iterator end() const { return Iterator(end_); }

  private:
    int begin_;
    int end_;
};

/// The coordinates of the box [begin, end) of Ds..., row-major: the last entry varies fastest.
template <DimLike... Ds>
class CoordinatesRange {
    static constexpr int n = sizeof...(Ds);

  public:
    class Iterator {
      public:
        SPIO_HOST_DEVICE constexpr Iterator(const int* v, const int* b, const int* e) {
            for (int i = 0; i < n; ++i) {
                v_[i] = v[i];
                b_[i] = b[i];
                e_[i] = e[i];
            }
        }
        SPIO_HOST_DEVICE constexpr Coordinates<Ds...> operator*() const {
            return Coordinates<Ds...>(Ds(v_[detail::index_of_v<Ds, Ds...>])...);
        }
        SPIO_HOST_DEVICE constexpr Iterator& operator++() {
            for (int i = n - 1; i >= 0; --i) {
                if (++v_[i] < e_[i] || i == 0) {
                    break;
                }
                v_[i] = b_[i];
            }
            return *this;
        }
        SPIO_HOST_DEVICE constexpr bool operator!=(const Iterator& o) const {
            for (int i = 0; i < n; ++i) {
                if (v_[i] != o.v_[i]) return true;
            }
            return false;
        }
        SPIO_HOST_DEVICE constexpr bool operator==(const Iterator& o) const { return !(*this != o); }

      private:
        int v_[n];
        int b_[n];
        int e_[n];
    };

    SPIO_HOST_DEVICE constexpr CoordinatesRange(const Coordinates<Ds...>& begin,
                                                const Coordinates<Ds...>& end)
        : b_{begin.template entry<Ds>().get()...}, e_{end.template entry<Ds>().get()...} {
        empty_ = false;
        for (int i = 0; i < n; ++i) {
            empty_ = empty_ || e_[i] <= b_[i];
        }
    }

    SPIO_HOST_DEVICE constexpr Iterator begin() const {
        return empty_ ? end() : Iterator(b_, b_, e_);
    }
    /// One past the last: the first entry at its end, the others at their beginnings.
    SPIO_HOST_DEVICE constexpr Iterator end() const {
        int v[n];
        for (int i = 0; i < n; ++i) v[i] = b_[i];
        v[0] = e_[0] > b_[0] ? e_[0] : b_[0];
        return Iterator(v, b_, e_);
    }

  private:
    int b_[n];
    int e_[n];
    bool empty_;
};

/// D(0) .. end - 1.
template <DimLike D>
SPIO_HOST_DEVICE constexpr DimRange<D> range(D end) {
    return DimRange<D>(D(0), end);
}

/// begin .. end - 1.
template <DimLike D>
SPIO_HOST_DEVICE constexpr DimRange<D> range(D begin, D end) {
    return DimRange<D>(begin, end);
}

/// Every coordinate of the box [0, end), row-major.
template <DimLike... Ds>
SPIO_HOST_DEVICE constexpr CoordinatesRange<Ds...> range(const Coordinates<Ds...>& end) {
    static_assert(sizeof...(Ds) > 0,
                  "spio::range(coordinates): needs at least one dim; pass a tensor's extents()");
    return CoordinatesRange<Ds...>(Coordinates<Ds...>(), end);
}

/// Every coordinate of the tile [begin, end), row-major. Both must have the same entry types.
template <DimLike... Ds>
SPIO_HOST_DEVICE constexpr CoordinatesRange<Ds...> range(const Coordinates<Ds...>& begin,
                                                         const Coordinates<Ds...>& end) {
    static_assert(sizeof...(Ds) > 0, "spio::range(begin, end): needs at least one dim");
    return CoordinatesRange<Ds...>(begin, end);
}

}  // namespace spio
