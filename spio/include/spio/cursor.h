/// Cursors: typed pointers into a tensor, moved by dims instead of element offsets.
///
/// A subscripted tensor is a cursor. `cur[d]` returns a moved copy, `cur.step(d)` moves in place,
/// `cur.get()` is the element pointer, `*cur` the element. Subscripts are position-free
/// (`x[n][h] == x[h][n] == x[n + h]`); a Coordinates subscript uses only the dims the tensor has
/// (projection), while a single dim the tensor lacks is a compile error. How folded and swizzled
/// dims resolve is described in layout.h.
///
/// Example: auto cur = x[N(1)][H(2)];  cur.step(W(1));  float v = *cur;  cur[C(3)].store(v);
#pragma once

#include "spio/coordinates.h"
#include "spio/dim.h"
#include "spio/layout.h"
#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

/// A position in a tensor of T laid out by Layout (a detail::Layout; get one from Tensor).
///
/// Template parameters:
///   T        the element type (const for read-only tensors)
///   Layout   the tensor's layout
template <class T, class Layout>
class Cursor {
  public:
    using data_type = T;
    using layout = Layout;

    SPIO_HOST_DEVICE constexpr explicit Cursor(T* ptr) : ptr_(ptr), offset_(0), acc_{} {}

    /// Moves by d in place and returns *this. d's base must be one of the tensor's dims.
    ///
    /// Example: cur.step(W(1)) moves one W; cur.step(K(5)) on a (K8, K % 8) layout carries.
    template <DimLike D>
    SPIO_HOST_DEVICE constexpr Cursor& step(D d) {
        using B = typename D::base;
        if constexpr (!Layout::template has_base<B>) {
            static_assert(detail::always_false_v<D>,
                          "spio::Cursor subscript/step: the tensor has no dim with this base; "
                          "subscript with a dim of the tensor, or pass coordinates (they project "
                          "away dims the tensor lacks)");
        } else if constexpr (Layout::template immediate<D>) {
            offset_ += d.get() * Layout::template immediate_scale<D>;
        } else {
            acc_[Layout::template slot<B>] += d.get() * D::stride;
        }
        return *this;
    }

    /// Moves by every entry of c whose base the tensor has; other entries are ignored.
    template <DimLike... Ds>
    SPIO_HOST_DEVICE constexpr Cursor& step(const Coordinates<Ds...>& c) {
        (step_if_present(c.template entry<Ds>()), ...);
        return *this;
    }

    /// A copy moved by x (a dim value or coordinates).
    template <class X>
    SPIO_HOST_DEVICE constexpr Cursor operator[](X x) const {
        static_assert(DimLike<X> || CoordinatesLike<X>,
                      "spio::Cursor[]/Tensor[]: subscript with a dim value (K(3)) or coordinates "
                      "(I(1) + K(3)), not a bare integer or another type");
        Cursor moved = *this;
        moved.step(x);
        return moved;
    }

    /// Pointer to the element at this position.
    ///
    /// The linear part of the offset is kept as one int (like hand-written `base + i * ld + j`),
    /// so the pointer is formed with a single 64-bit add; tensors hold < 2^31 elements.
    SPIO_HOST_DEVICE constexpr T* get() const { return ptr_ + (offset_ + Layout::offset(acc_)); }
    SPIO_HOST_DEVICE constexpr T& operator*() const { return *get(); }
    SPIO_HOST_DEVICE constexpr T* operator->() const { return get(); }

    /// Reads the element (one vector load for 16-byte element types).
    SPIO_HOST_DEVICE constexpr T load() const { return *get(); }
    /// Writes the element (one vector store for 16-byte element types).
    template <class U>
    SPIO_HOST_DEVICE constexpr void store(const U& value) const {
        *get() = value;
    }

  private:
    template <class D>
    SPIO_HOST_DEVICE constexpr void step_if_present(D d) {
        if constexpr (Layout::template has_base<typename D::base>) {
            step(d);
        }
    }

    T* ptr_;
    int offset_;
    int acc_[Layout::num_slots > 0 ? Layout::num_slots : 1];
};

namespace detail {
template <class T>
inline constexpr bool is_cursor_v = false;
template <class T, class L>
inline constexpr bool is_cursor_v<Cursor<T, L>> = true;
}  // namespace detail

/// A spio::Cursor (a subscripted tensor).
template <class T>
concept CursorLike = detail::is_cursor_v<T>;

/// Two cursors are equal when they point at the same element.
template <class T, class L, class U, class M>
SPIO_HOST_DEVICE constexpr bool operator==(const Cursor<T, L>& a, const Cursor<U, M>& b) {
    return a.get() == b.get();
}
template <class T, class L, class U, class M>
SPIO_HOST_DEVICE constexpr bool operator!=(const Cursor<T, L>& a, const Cursor<U, M>& b) {
    return a.get() != b.get();
}

}  // namespace spio
