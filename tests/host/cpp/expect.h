/// A tiny test harness for spio's host C++ property tests: EXPECT_* macros and a report.
///
/// Every EXPECT counts as a check; a failure prints file:line, the expression and (for EXPECT_EQ
/// on ints or dims) both values, capped at 20 printed failures. `return spio_test::report();`
/// at the end of main() exits non-zero when any check failed or when no check ran at all (a test
/// that checks nothing cannot pass).
#pragma once

#include <cstdio>

namespace spio_test {

inline int checks = 0;
inline int failures = 0;

inline long long value_of(long long v) { return v; }
template <class D>
    requires requires(const D& d) { d.get(); }
long long value_of(const D& d) {
    return static_cast<long long>(d.get());
}
template <class T>
long long value_of(T* p) {
    return reinterpret_cast<long long>(p);
}

inline void fail(const char* file, int line, const char* what) {
    ++failures;
    if (failures <= 20) {
        std::printf("%s:%d: FAILED %s\n", file, line, what);
    }
}

inline int report() {
    std::printf("%d checks, %d failures\n", checks, failures);
    if (checks == 0) {
        std::printf("no checks ran: the test is broken\n");
        return 2;
    }
    return failures == 0 ? 0 : 1;
}

}  // namespace spio_test

#define EXPECT_TRUE(cond)                                                                        \
    do {                                                                                         \
        ++spio_test::checks;                                                                     \
        if (!(cond)) spio_test::fail(__FILE__, __LINE__, "EXPECT_TRUE(" #cond ")");              \
    } while (0)

#define EXPECT_EQ(a, b)                                                                          \
    do {                                                                                         \
        ++spio_test::checks;                                                                     \
        const auto spio_a_ = (a);                                                                \
        const auto spio_b_ = (b);                                                                \
        if (!(spio_a_ == spio_b_)) {                                                             \
            spio_test::fail(__FILE__, __LINE__, "EXPECT_EQ(" #a ", " #b ")");                    \
            if (spio_test::failures <= 20)                                                       \
                std::printf("    %lld vs %lld\n", spio_test::value_of(spio_a_),                  \
                            spio_test::value_of(spio_b_));                                       \
        }                                                                                        \
    } while (0)
