/// Modules: the remainder of a (folded) dimension (`K % 8` in the generators).
///
/// `Module<K, 8, 1>` holds values in [0, 8) meaning K(v); `Module<K, 4, 8>` is `(K / 8) % 4`, whose
/// value v means K(8 v). As a tensor extent a Module is always reduced modulo its size, so a
/// (K / 8, K % 8) layout accepts any logical K.
///
/// Example: using K_MOD_8 = spio::Module<K, 8, 1>;  K(37).module<8>() == K_MOD_8(5);
///          K_MOD_8(5) + K8(4) == K(37).
#pragma once

#include "spio/dim.h"

namespace spio {

/// The canonical module type: (Base / Stride) % Size. Spell it spio::Module.
///
/// Template parameters:
///   Base     the base dimension
///   Size     the modulus, > 0
///   Stride   base units per step, > 0
///
/// Arithmetic on two values of one Module type keeps the type and does not reduce (it is the
/// logical sum); reduction happens in to<Module>() and when a tensor resolves an offset.
template <class Base, int Size, int Stride>
class ModuleDim : public DimValue<ModuleDim<Base, Size, Stride>> {
    static_assert(Size > 0,
                  "spio::Module<D, Size, Stride>: Size must be positive; take the remainder by "
                  "a positive count");
    static_assert(Stride > 0,
                  "spio::Module<D, Size, Stride>: Stride must be positive; use a positive "
                  "number of D's units");
    static_assert(detail::is_same_v<typename Base::base, Base>,
                  "spio::ModuleDim<Base, Size, Stride>: Base must be a base dim; spell modules "
                  "of folds as spio::Module<K8, 4>, which normalizes to ModuleDim<K, 4, 8>");

  public:
    using base = Base;
    using dim_type = ModuleDim;
    static constexpr int stride = Stride;
    static constexpr int size = Size;

    constexpr ModuleDim() = default;
    SPIO_HOST_DEVICE explicit constexpr ModuleDim(int value) : DimValue<ModuleDim>(value) {}
};

/// (D / Stride) % Size for any dim D (a base, fold or module); a ModuleDim of D's base.
///
/// Example: spio::Module<K, 8> is K % 8;  spio::Module<K8, 4> is spio::Module<K, 4, 8>.
template <DimLike D, int Size, int Stride = 1>
using Module = ModuleDim<typename D::base, Size, D::stride * Stride>;

}  // namespace spio
