/// Folds: a dimension divided by a stride (`K / 8` in the generators).
///
/// `Fold<K, 8>` is the dim whose value v means K(8 v). Folds of folds multiply their strides, so
/// `Fold<Fold<K, 8>, 2>` is the same type as `Fold<K, 16>`, and `Fold<K, 1>` is K itself.
///
/// Example: using K8 = spio::Fold<K, 8>;  K8(3) == K(24);  K8(3) + K(4) == K(28);
///          K(37).fold<8>() == K8(4);  K8(4).unfold() == K(32).
#pragma once

#include "spio/dim.h"

namespace spio {

/// The canonical fold type: base dim Base with Stride base units per step. Spell it spio::Fold.
///
/// Template parameters:
///   Base     the base dimension (a type derived from spio::Dim)
///   Stride   base units per step, > 1 (Fold<K, 1> is K)
template <class Base, int Stride>
class FoldDim : public DimValue<FoldDim<Base, Stride>> {
    static_assert(Stride > 0,
                  "spio::Fold<D, Stride>: Stride must be positive; fold by a positive number of "
                  "D's units");
    static_assert(detail::is_same_v<typename Base::base, Base>,
                  "spio::FoldDim<Base, Stride>: Base must be a base dim; spell folds of folds "
                  "as spio::Fold<K8, 2>, which normalizes to FoldDim<K, 16>");

  public:
    using base = Base;
    using dim_type = FoldDim;
    static constexpr int stride = Stride;

    constexpr FoldDim() = default;
    SPIO_HOST_DEVICE explicit constexpr FoldDim(int value) : DimValue<FoldDim>(value) {}
};

/// D folded by Stride (D may itself be a fold or a module; the result is a fold of D's base).
///
/// Example: spio::Fold<K, 8> is K / 8;  spio::Fold<spio::Fold<K, 8>, 2> is spio::Fold<K, 16>.
template <DimLike D, int Stride>
using Fold = detail::fold_t<typename D::base, D::stride * Stride>;

}  // namespace spio
