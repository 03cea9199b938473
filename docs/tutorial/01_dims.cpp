/// Lesson 1: dimensions are types.
///
/// A dimension is a type that wraps an int. Values of one dimension behave like integers; values
/// of different dimensions never mix by accident. The @spio block below declares two dimensions;
/// spio.generators turns it into `struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };` and the
/// same for J, in a header that is included before this file.
///
/// Built and run by tests/host/tutorial/test_tutorial.py (g++, and NVRTC for sm_90).

/*@spio
I = Dim()
J = Dim()
@spio*/

// Integer-like: + - * / % and comparisons keep the dimension.
static_assert(I(3) + I(4) == I(7));
static_assert(I(10) - I(4) == I(6) && I(3) * 2 == I(6) && I(7) / 2 == I(3) && I(7) % 2 == I(1));
static_assert(I(3) < I(4) && I(3).get() == 3);

// Different dimensions do not compare: `I(1) == J(1)` fails to compile with
//   "spio dims: cannot compare values of different dimensions; ..."
// and neither does `I(1) - J(1)`. Adding them is allowed and builds coordinates, a list of values
// of different dimensions (lesson 4). Addition commutes, so the order does not matter:
static_assert(I(3) + J(4) == J(4) + I(3));
static_assert((I(3) + J(4)).get<J>() == J(4));

// Typed parameters make argument order part of the type: area(J(4), I(3)) does not compile.
SPIO_HOST_DEVICE constexpr int area(I rows, J cols) { return rows.get() * cols.get(); }
static_assert(area(I(3), J(4)) == 12);

// A dimension never converts from a bare int (`I i = 3;` does not compile): the unit is explicit.

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    // range() yields typed values: i is an I, not an int.
    int sum = 0;
    for (auto i : spio::range(I(5))) {
        sum += i.get();
    }
    if (sum != 0 + 1 + 2 + 3 + 4) {
        std::printf("01_dims: range(I(5)) summed to %d\n", sum);
        return 1;
    }
    I i(7);
    i += I(1);
    if (i != I(8)) {
        std::printf("01_dims: I(7) += I(1) gave %d\n", i.get());
        return 1;
    }
    return 0;
}
#endif
