/// Typed dimensions: integers that carry their meaning in their type.
///
/// A dimension type wraps an `int`. Values of one dimension add, subtract, compare and scale like
/// integers; values of different dimensions never mix (comparing I with J or subtracting them does
/// not compile, and adding them builds spio::Coordinates, see coordinates.h). Folds (`Fold<K, 8>`,
/// fold.h) and modules (`Module<K, 8, 1>`, module.h) are dimensions with the same *base* K and a
/// stride in base units; values of one base mix freely and meet in the finer stride.
///
/// Example:
///     struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };   // what the generator emits
///     using K8 = spio::Fold<K, 8>;
///     K(37).get() == 37;  K(37) + K(1) == K(38);  K8(3) == K(24);  K8(3) + K(4) == K(28)
#pragma once

#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

template <class Base, int Stride>
class FoldDim;
template <class Base, int Size, int Stride>
class ModuleDim;

/// A dimension: a type with a base dimension, a stride in base units and an int value.
///
/// `D::base` is the base dimension (K for K, Fold<K, 8> and Module<K, 8, 1>), `D::stride` the
/// number of base units one step of D covers, `d.get()` the value.
template <class T>
concept DimLike = requires(const T& d) {
    typename T::base;
    typename T::dim_type;
    T::stride;
    { d.get() } -> SameAs<int>;
};

/// True when dims A and B share a base dimension (so their values mix).
template <class A, class B>
inline constexpr bool same_base_v = detail::is_same_v<typename A::base, typename B::base>;

namespace detail {

template <class Base, int Stride>
struct FoldOf {
    using type = FoldDim<Base, Stride>;
};
template <class Base>
struct FoldOf<Base, 1> {
    using type = Base;
};

/// The dim of base `Base` with stride `Stride` (Base itself when Stride is 1).
template <class Base, int Stride>
using fold_t = typename FoldOf<Base, Stride>::type;

template <class D>
inline constexpr bool is_module_v = false;
template <class Base, int Size, int Stride>
inline constexpr bool is_module_v<ModuleDim<Base, Size, Stride>> = true;

/// The dim that exactly represents any sum of an A and a B (stride gcd of theirs).
template <class A, class B>
using common_dim_t = fold_t<typename A::base, gcd(A::stride, B::stride)>;

}  // namespace detail

/// The value and the conversions shared by every dimension type (Dim, FoldDim, ModuleDim).
///
/// Template parameters:
///   Self   the concrete dimension type (CRTP)
template <class Self>
class DimValue {
  public:
    SPIO_HOST_DEVICE constexpr DimValue() : value_(0) {}
    SPIO_HOST_DEVICE explicit constexpr DimValue(int value) : value_(value) {}

    /// The value in units of this dimension.
    SPIO_HOST_DEVICE constexpr int get() const { return value_; }

    /// Folds by Stride: the dim `Fold<Self, Stride>` holding floor(value / Stride).
    ///
    /// Example: K(37).fold<8>() == K8(4);  K8(5).fold<2>() == spio::Fold<K, 16>(2).
    /// Post: fold<S>().unfold() <= *this < fold<S>().unfold() + Self(S).
    template <int Stride>
    SPIO_HOST_DEVICE constexpr auto fold() const {
        static_assert(Stride > 0,
                      "spio dim fold<Stride>(): Stride must be positive; fold by a positive "
                      "number of this dim's units");
        using Base = typename Self::base;
        return detail::fold_t<Base, Self::stride * Stride>(detail::floor_div<Stride>(value_));
    }

    /// The remainder `(this / 1) % Size` as the dim `Module<Self, Size>`.
    ///
    /// Example: K(37).module<8>() == spio::Module<K, 8, 1>(5);  K8(5).module<4>() is (K/8)%4 == 1.
    template <int Size>
    SPIO_HOST_DEVICE constexpr auto module() const {
        static_assert(Size > 0,
                      "spio dim module<Size>(): Size must be positive; take the remainder by a "
                      "positive count");
        using Base = typename Self::base;
        return ModuleDim<Base, Size, Self::stride>(detail::floor_mod<Size>(value_));
    }

    /// The same position in base units.
    ///
    /// Example: K8(4).unfold() == K(32);  spio::Module<K, 4, 8>(3).unfold() == K(24).
    SPIO_HOST_DEVICE constexpr auto unfold() const {
        using Base = typename Self::base;
        return Base(value_ * Self::stride);
    }

    /// Converts to another dim D of the same base: floor division to a coarser D, exact to a
    /// finer one, reduced modulo D's size when D is a Module.
    ///
    /// Example: K(37).to<K8>() == K8(4);  K8(3).to<K>() == K(24).
    template <class D>
    SPIO_HOST_DEVICE constexpr D to() const {
        static_assert(same_base_v<Self, D>,
                      "spio dim to<D>(): D must have the same base dim as the value; convert "
                      "only between a dim and its folds/modules");
        int v;
        if constexpr (Self::stride % D::stride == 0) {
            v = value_ * (Self::stride / D::stride);
        } else {
            v = detail::floor_div<D::stride>(value_ * Self::stride);
        }
        if constexpr (detail::is_module_v<D>) {
            v = detail::floor_mod<D::size>(v);
        }
        return D(v);
    }

  private:
    int value_;
};

/// A base dimension; derive your dimension type from it (CRTP).
///
/// Template parameters:
///   Derived   the dimension type itself
///
/// Example: struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };  K k(37);  k.get() == 37.
template <class Derived>
class Dim : public DimValue<Derived> {
  public:
    using base = Derived;
    using dim_type = Derived;
    static constexpr int stride = 1;

    constexpr Dim() = default;
    SPIO_HOST_DEVICE explicit constexpr Dim(int value) : DimValue<Derived>(value) {}
};

// ---- arithmetic and comparison (same base only) ------------------------------------------------

/// Sum of two values of one base: the same dim if A and B are equal, else their common (finer) dim.
///
/// Example: K(3) + K(4) == K(7);  K8(3) + K(4) == K(28);  K8(1) + spio::Fold<K, 2>(1) == K2(5).
/// Adding dims of different bases builds Coordinates (coordinates.h).
template <DimLike A, DimLike B>
    requires same_base_v<A, B>
SPIO_HOST_DEVICE constexpr auto operator+(A a, B b) {
    if constexpr (detail::is_same_v<A, B>) {
        return A(a.get() + b.get());
    } else {
        using R = detail::common_dim_t<A, B>;
        return R(a.get() * (A::stride / R::stride) + b.get() * (B::stride / R::stride));
    }
}

/// Difference of two values of one base (see operator+). Different bases do not subtract.
template <DimLike A, DimLike B>
SPIO_HOST_DEVICE constexpr auto operator-(A a, B b) {
    static_assert(same_base_v<A, B>,
                  "spio dims: cannot subtract values of different dimensions; subtract values of "
                  "one dim (or its folds), or build coordinates with + and negate");
    if constexpr (detail::is_same_v<A, B>) {
        return A(a.get() - b.get());
    } else {
        using R = detail::common_dim_t<A, B>;
        return R(a.get() * (A::stride / R::stride) - b.get() * (B::stride / R::stride));
    }
}

/// Negation: D(-v).
template <DimLike A>
SPIO_HOST_DEVICE constexpr A operator-(A a) {
    return A(-a.get());
}

/// Scaling by an integer keeps the dim: K8(3) * 2 == K8(6).
template <DimLike A>
SPIO_HOST_DEVICE constexpr A operator*(A a, int s) {
    return A(a.get() * s);
}
template <DimLike A>
SPIO_HOST_DEVICE constexpr A operator*(int s, A a) {
    return A(s * a.get());
}
/// Integer (C, truncating) division of the value: K(37) / 2 == K(18). For a fold use fold<S>().
template <DimLike A>
SPIO_HOST_DEVICE constexpr A operator/(A a, int s) {
    return A(a.get() / s);
}
/// Integer remainder of the value: K(37) % 8 == K(5). For a Module dim use module<S>().
template <DimLike A>
SPIO_HOST_DEVICE constexpr A operator%(A a, int s) {
    return A(a.get() % s);
}

template <DimLike A, DimLike B>
SPIO_HOST_DEVICE constexpr A& operator+=(A& a, B b) {
    static_assert(detail::is_same_v<A, decltype(a + b)>,
                  "spio dims: a += b needs a + b to have a's type (same dim, or a finer fold "
                  "of the same base); write a = a + b with a wider type");
    a = a + b;
    return a;
}
template <DimLike A, DimLike B>
SPIO_HOST_DEVICE constexpr A& operator-=(A& a, B b) {
    static_assert(detail::is_same_v<A, decltype(a - b)>,
                  "spio dims: a -= b needs a - b to have a's type (same dim, or a finer fold "
                  "of the same base); write a = a - b with a wider type");
    a = a - b;
    return a;
}

namespace detail {
/// Compares two values of one base in the units of their common dim; Op is -1 <, 0 ==, +1 >.
template <class A, class B>
SPIO_HOST_DEVICE constexpr int compare(A a, B b) {
    using R = common_dim_t<A, B>;
    const int x = a.get() * (A::stride / R::stride);
    const int y = b.get() * (B::stride / R::stride);
    return x < y ? -1 : (x > y ? 1 : 0);
}
}  // namespace detail

#define SPIO_DIM_COMPARISON(OP, EXPR)                                                            \
    template <DimLike A, DimLike B>                                                              \
    SPIO_HOST_DEVICE constexpr bool operator OP(A a, B b) {                                      \
        static_assert(same_base_v<A, B>,                                                         \
                      "spio dims: cannot compare values of different dimensions; compare "       \
                      "values of one dim (or its folds), or compare .get() if you mean it");     \
        return detail::compare(a, b) EXPR;                                                       \
    }
SPIO_DIM_COMPARISON(==, == 0)
SPIO_DIM_COMPARISON(!=, != 0)
SPIO_DIM_COMPARISON(<, < 0)
SPIO_DIM_COMPARISON(<=, <= 0)
SPIO_DIM_COMPARISON(>, > 0)
SPIO_DIM_COMPARISON(>=, >= 0)
#undef SPIO_DIM_COMPARISON

}  // namespace spio

#include "spio/fold.h"
#include "spio/module.h"
