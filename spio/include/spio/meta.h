/// Small compile-time utilities: type lists, type traits and integer helpers.
///
/// NVRTC ships no C++ standard library headers, so spio writes the few traits it needs here
/// instead of including <type_traits>. Everything lives in spio::detail except the concepts
/// re-used across headers (SameAs).
#pragma once

#include "spio/macros.h"

namespace spio {
namespace detail {

/// A list of types, manipulated only at compile time.
template <class... Ts>
struct TypeList {
    static constexpr int size = sizeof...(Ts);
};

template <class A, class B>
inline constexpr bool is_same_v = false;
template <class A>
inline constexpr bool is_same_v<A, A> = true;

/// A value that is false for every T: lets a static_assert fire only when a template is used.
template <class... T>
inline constexpr bool always_false_v = false;

template <bool C, class A, class B>
struct Conditional {
    using type = A;
};
template <class A, class B>
struct Conditional<false, A, B> {
    using type = B;
};
template <bool C, class A, class B>
using conditional_t = typename Conditional<C, A, B>::type;

template <class T>
struct RemoveCvref {
    using type = T;
};
template <class T>
struct RemoveCvref<const T> {
    using type = T;
};
template <class T>
struct RemoveCvref<volatile T> {
    using type = T;
};
template <class T>
struct RemoveCvref<const volatile T> {
    using type = T;
};
template <class T>
struct RemoveCvref<T&> : RemoveCvref<T> {};
template <class T>
struct RemoveCvref<T&&> : RemoveCvref<T> {};
template <class T>
using remove_cvref_t = typename RemoveCvref<T>::type;

template <class T, class... Ts>
SPIO_HOST_DEVICE constexpr int index_of_impl() {
    int i = 0;
    bool found = false;
    ((found = found || is_same_v<T, Ts>, i += found ? 0 : 1), ...);
    return found ? i : -1;
}

/// Index of T in Ts... (the first occurrence), or -1 when absent.
template <class T, class... Ts>
inline constexpr int index_of_v = index_of_impl<T, Ts...>();

/// The I-th type of Ts...
template <int I, class... Ts>
struct TypeAt;
template <class T, class... Ts>
struct TypeAt<0, T, Ts...> {
    using type = T;
};
template <int I, class T, class... Ts>
struct TypeAt<I, T, Ts...> {
    using type = typename TypeAt<I - 1, Ts...>::type;
};
template <int I, class... Ts>
using type_at_t = typename TypeAt<I, Ts...>::type;

/// Appends T to a TypeList.
template <class List, class T>
struct Append;
template <class... Ts, class T>
struct Append<TypeList<Ts...>, T> {
    using type = TypeList<Ts..., T>;
};

/// The types of Ts... for which Pred<T>::value holds, in order, as a TypeList.
template <template <class> class Pred, class Acc, class... Ts>
struct FilterImpl {
    using type = Acc;
};
template <template <class> class Pred, class Acc, class T, class... Ts>
struct FilterImpl<Pred, Acc, T, Ts...> {
    using next = conditional_t<Pred<T>::value, typename Append<Acc, T>::type, Acc>;
    using type = typename FilterImpl<Pred, next, Ts...>::type;
};
template <template <class> class Pred, class... Ts>
using filter_t = typename FilterImpl<Pred, TypeList<>, Ts...>::type;

/// Ts... with duplicates removed (first occurrence kept), as a TypeList.
template <class Acc, class... Ts>
struct UniqueImpl {
    using type = Acc;
};
template <class... As, class T, class... Ts>
struct UniqueImpl<TypeList<As...>, T, Ts...> {
    using next =
        conditional_t<(is_same_v<T, As> || ...), TypeList<As...>, TypeList<As..., T>>;
    using type = typename UniqueImpl<next, Ts...>::type;
};
template <class... Ts>
using unique_t = typename UniqueImpl<TypeList<>, Ts...>::type;

/// True when all Ts... are distinct types.
template <class... Ts>
inline constexpr bool all_distinct_v = unique_t<Ts...>::size == sizeof...(Ts);

/// Greatest common divisor of two positive integers.
SPIO_HOST_DEVICE constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }

/// True when n is a positive power of two.
SPIO_HOST_DEVICE constexpr bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/// log2 of a positive power of two.
SPIO_HOST_DEVICE constexpr int log2(int n) { return n <= 1 ? 0 : 1 + log2(n / 2); }

/// The largest of the arguments.
template <class... Ints>
SPIO_HOST_DEVICE constexpr int max_of(int first, Ints... rest) {
    int m = first;
    ((m = rest > m ? rest : m), ...);
    return m;
}

/// The smallest of the arguments.
template <class... Ints>
SPIO_HOST_DEVICE constexpr int min_of(int first, Ints... rest) {
    int m = first;
    ((m = rest < m ? rest : m), ...);
    return m;
}

/// Floor division by a positive compile-time divisor (rounds toward negative infinity).
///
/// Example: floor_div<8>(-1) == -1;  floor_div<8>(15) == 1.
/// For a power of two this is an arithmetic shift, as cheap as hand-written `x >> 3`.
template <int Divisor>
SPIO_HOST_DEVICE constexpr int floor_div(int x) {
    static_assert(Divisor > 0, "spio::detail::floor_div: Divisor must be positive; fix the stride");
    if constexpr (Divisor == 1) {
        return x;
    } else if constexpr (is_pow2(Divisor)) {
        return x >> log2(Divisor);
    } else {
        return x >= 0 ? x / Divisor : -((-x + Divisor - 1) / Divisor);
    }
}

/// Non-negative remainder by a positive compile-time divisor: x - Divisor * floor_div(x).
///
/// Example: floor_mod<8>(-1) == 7;  floor_mod<8>(15) == 7.
template <int Divisor>
SPIO_HOST_DEVICE constexpr int floor_mod(int x) {
    static_assert(Divisor > 0, "spio::detail::floor_mod: Divisor must be positive; fix the size");
    if constexpr (Divisor == 1) {
        return 0;
    } else if constexpr (is_pow2(Divisor)) {
        return x & (Divisor - 1);
    } else {
        const int r = x % Divisor;
        return r < 0 ? r + Divisor : r;
    }
}

}  // namespace detail

/// Satisfied when A and B are the same type (NVRTC has no <concepts>).
template <class A, class B>
concept SameAs = detail::is_same_v<A, B> && detail::is_same_v<B, A>;

}  // namespace spio
