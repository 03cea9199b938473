/// Coordinates: a list of values of different dimensions, built by adding them.
///
/// `I(3) + J(4) + K(5)` is `make_coordinates(I(3), J(4), K(5))`, a Coordinates<I, J, K>. Each base
/// dim appears at most once; adding a value of a base already present adds to that entry (in the
/// finer of the two strides), any other value appends an entry. Ordering comparisons test every
/// pair of entries with the same base (so `world < X::extents()` is a bounds check that ignores
/// dims the tensor lacks); equality needs the same set of bases.
///
/// Example: auto c = I(3) + J(4);  c.get<J>() == J(4);  (c + J(1)).get<J>() == J(5);
///          (c + K(2)).get<K>() == K(2);  c < I(4) + J(5) + L(0).
#pragma once

#include "spio/dim.h"
#include "spio/macros.h"
#include "spio/meta.h"

namespace spio {

namespace detail {

template <class D>
struct CoordLeaf {
    D value;
};

/// The first of Ds... whose base is Base, or void.
template <class Base, class... Ds>
struct EntryForBase {
    using type = void;
};
template <class Base, class D, class... Ds>
struct EntryForBase<Base, D, Ds...> {
    using type = conditional_t<is_same_v<typename D::base, Base>, D,
                               typename EntryForBase<Base, Ds...>::type>;
};
template <class Base, class... Ds>
using entry_for_base_t = typename EntryForBase<Base, Ds...>::type;

template <class Base, class... Ds>
inline constexpr bool has_base_v = (is_same_v<typename Ds::base, Base> || ...);

/// The type an entry E takes after adding a D: unchanged unless they share a base.
template <class E, class D>
using add_entry_t = conditional_t<same_base_v<E, D>, common_dim_t<E, D>, E>;

/// e + d when they share a base, else e.
template <class E, class D>
SPIO_HOST_DEVICE constexpr add_entry_t<E, D> add_if_same_base(E e, D d) {
    if constexpr (same_base_v<E, D>) {
        return e + d;
    } else {
        return e;
    }
}

}  // namespace detail

/// Values of several dimensions with distinct bases, in insertion order.
///
/// Template parameters:
///   Ds   the entry dims (bases, folds or modules), one per base
template <DimLike... Ds>
class Coordinates : private detail::CoordLeaf<Ds>... {
    static_assert(detail::all_distinct_v<typename Ds::base...>,
                  "spio::Coordinates<Ds...>: each base dim may appear only once; build "
                  "coordinates with + or make_coordinates, which merge values of one base");

  public:
    /// Number of entries.
    static constexpr int size = sizeof...(Ds);
    using dims = detail::TypeList<Ds...>;

    constexpr Coordinates() = default;
    SPIO_HOST_DEVICE explicit constexpr Coordinates(Ds... ds)
        requires(sizeof...(Ds) > 0)
        : detail::CoordLeaf<Ds>{ds}... {}

    /// True when an entry has the base of D.
    template <DimLike D>
    SPIO_HOST_DEVICE static constexpr bool has() {
        return detail::has_base_v<typename D::base, Ds...>;
    }

    /// The entry whose type is exactly E.
    template <class E>
    SPIO_HOST_DEVICE constexpr E entry() const {
        static_assert(detail::index_of_v<E, Ds...> >= 0,
                      "spio::Coordinates::entry<E>(): E must be one of the entry types; use "
                      "get<D>() to read any dim of a present base");
        return static_cast<const detail::CoordLeaf<E>&>(*this).value;
    }

    /// The entry with D's base, converted to D (see DimValue::to).
    ///
    /// Example: (I(3) + K(37)).get<K>() == K(37);  (I(3) + K(37)).get<K8>() == K8(4).
    template <DimLike D>
    SPIO_HOST_DEVICE constexpr D get() const {
        static_assert(has<D>(),
                      "spio::Coordinates::get<D>(): no entry has D's base dim; add a D value to "
                      "the coordinates, or check has<D>() with if constexpr");
        using E = detail::entry_for_base_t<typename D::base, Ds...>;
        return entry<E>().template to<D>();
    }

    /// Calls f(entry) for every entry, in order.
    template <class F>
    SPIO_HOST_DEVICE constexpr void for_each(F&& f) const {
        (f(entry<Ds>()), ...);
    }
};

namespace detail {
template <class T>
inline constexpr bool is_coordinates_v = false;
template <class... Ds>
inline constexpr bool is_coordinates_v<Coordinates<Ds...>> = true;
}  // namespace detail

/// A spio::Coordinates list.
template <class T>
concept CoordinatesLike = detail::is_coordinates_v<T>;

/// Coordinates holding the given values; values of one base are summed.
///
/// Example: make_coordinates(I(3), J(4), K(5)) == I(3) + J(4) + K(5).
template <DimLike... Ds>
SPIO_HOST_DEVICE constexpr auto make_coordinates(Ds... ds) {
    return (Coordinates<>() + ... + ds);
}

/// Adds d to the entry of its base, or appends it.
template <DimLike... Ds, DimLike D>
SPIO_HOST_DEVICE constexpr auto operator+(const Coordinates<Ds...>& c, D d) {
    if constexpr (detail::has_base_v<typename D::base, Ds...>) {
        return Coordinates<detail::add_entry_t<Ds, D>...>(
            detail::add_if_same_base(c.template entry<Ds>(), d)...);
    } else {
        return Coordinates<Ds..., D>(c.template entry<Ds>()..., d);
    }
}

/// A value plus coordinates: the value's entry comes first when it is new.
template <DimLike D, DimLike... Ds>
SPIO_HOST_DEVICE constexpr auto operator+(D d, const Coordinates<Ds...>& c) {
    return Coordinates<D>(d) + c;
}

/// Entry-wise sum: every entry of b is added to a (see operator+(Coordinates, D)).
template <DimLike... Ds, DimLike... Es>
SPIO_HOST_DEVICE constexpr auto operator+(const Coordinates<Ds...>& a,
                                          const Coordinates<Es...>& b) {
    return (a + ... + b.template entry<Es>());
}

/// Values of different dims add into coordinates: I(3) + J(4) == make_coordinates(I(3), J(4)).
template <DimLike A, DimLike B>
    requires(!same_base_v<A, B>)
SPIO_HOST_DEVICE constexpr auto operator+(A a, B b) {
    return Coordinates<A, B>(a, b);
}

/// Negates every entry.
template <DimLike... Ds>
SPIO_HOST_DEVICE constexpr auto operator-(const Coordinates<Ds...>& c) {
    return Coordinates<Ds...>(-c.template entry<Ds>()...);
}

template <DimLike... Ds, DimLike D>
SPIO_HOST_DEVICE constexpr auto operator-(const Coordinates<Ds...>& c, D d) {
    return c + (-d);
}

template <DimLike... Ds, DimLike... Es>
SPIO_HOST_DEVICE constexpr auto operator-(const Coordinates<Ds...>& a,
                                          const Coordinates<Es...>& b) {
    return a + (-b);
}

namespace detail {
/// pred(e, b's entry of e's base), or true when b has no entry of that base.
template <class E, class... Es, class Pred>
SPIO_HOST_DEVICE constexpr bool match_one(E e, const Coordinates<Es...>& b, Pred pred) {
    if constexpr (has_base_v<typename E::base, Es...>) {
        return pred(e, b.template entry<entry_for_base_t<typename E::base, Es...>>());
    } else {
        return true;
    }
}

/// True when pred(a_entry, b_entry) holds for every pair of entries with the same base.
template <class... Ds, class... Es, class Pred>
SPIO_HOST_DEVICE constexpr bool all_matching(const Coordinates<Ds...>& a,
                                             const Coordinates<Es...>& b, Pred pred) {
    return (true && ... && match_one(a.template entry<Ds>(), b, pred));
}

#define SPIO_COMPARE_FUNCTOR(NAME, OP)                                                           \
    struct NAME {                                                                                \
        template <class A, class B>                                                              \
        SPIO_HOST_DEVICE constexpr bool operator()(A a, B b) const {                             \
            return a OP b;                                                                       \
        }                                                                                        \
    };
SPIO_COMPARE_FUNCTOR(EqualTo, ==)
SPIO_COMPARE_FUNCTOR(Less, <)
SPIO_COMPARE_FUNCTOR(LessEqual, <=)
SPIO_COMPARE_FUNCTOR(Greater, >)
SPIO_COMPARE_FUNCTOR(GreaterEqual, >=)
#undef SPIO_COMPARE_FUNCTOR
}  // namespace detail

/// Equal when both have the same set of bases and every pair of entries is equal.
template <DimLike... Ds, DimLike... Es>
SPIO_HOST_DEVICE constexpr bool operator==(const Coordinates<Ds...>& a,
                                           const Coordinates<Es...>& b) {
    static_assert(sizeof...(Ds) == sizeof...(Es) &&
                      (detail::has_base_v<typename Ds::base, Es...> && ...),
                  "spio::Coordinates ==: both sides must have the same set of base dims; "
                  "compare get<D>() values, or use < / <= for a check over the shared dims");
    return detail::all_matching(a, b, detail::EqualTo{});
}
template <DimLike... Ds, DimLike... Es>
SPIO_HOST_DEVICE constexpr bool operator!=(const Coordinates<Ds...>& a,
                                           const Coordinates<Es...>& b) {
    return !(a == b);
}

/// Coordinates never equal a single value; this overload exists to say so.
template <DimLike... Ds, DimLike D>
SPIO_HOST_DEVICE constexpr bool operator==(const Coordinates<Ds...>&, D) {
    static_assert(detail::always_false_v<D>,
                  "spio::Coordinates == dim: coordinates and a single dim value do not compare; "
                  "compare c.get<D>() == d, or compare with coordinates of the same dims");
    return false;
}
template <DimLike... Ds, DimLike D>
SPIO_HOST_DEVICE constexpr bool operator==(D, const Coordinates<Ds...>&) {
    static_assert(detail::always_false_v<D>,
                  "spio::Coordinates == dim: a single dim value and coordinates do not compare; "
                  "compare d == c.get<D>(), or compare with coordinates of the same dims");
    return false;
}

#define SPIO_COORD_ORDERING(OP, FUNCTOR)                                                         \
    template <DimLike... Ds, DimLike... Es>                                                      \
    SPIO_HOST_DEVICE constexpr bool operator OP(const Coordinates<Ds...>& a,                     \
                                                const Coordinates<Es...>& b) {                   \
        return detail::all_matching(a, b, detail::FUNCTOR{});                                    \
    }                                                                                            \
    template <DimLike... Ds, DimLike D>                                                          \
    SPIO_HOST_DEVICE constexpr bool operator OP(const Coordinates<Ds...>& a, D b) {              \
        return a OP Coordinates<D>(b);                                                           \
    }                                                                                            \
    template <DimLike D, DimLike... Es>                                                          \
    SPIO_HOST_DEVICE constexpr bool operator OP(D a, const Coordinates<Es...>& b) {              \
        return Coordinates<D>(a) OP b;                                                           \
    }

/// Ordering: true when every pair of entries with the same base satisfies it (true if none match).
SPIO_COORD_ORDERING(<, Less)
SPIO_COORD_ORDERING(<=, LessEqual)
SPIO_COORD_ORDERING(>, Greater)
SPIO_COORD_ORDERING(>=, GreaterEqual)
#undef SPIO_COORD_ORDERING

}  // namespace spio
