/// Dimensions shared by the property tests (what spio.generators emits for `I = Dim()` ...).
#pragma once

#include "spio/spio.h"

struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };
struct J : spio::Dim<J> { using spio::Dim<J>::Dim; };
struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };
struct L : spio::Dim<L> { using spio::Dim<L>::Dim; };

using K2 = spio::Fold<K, 2>;
using K4 = spio::Fold<K, 4>;
using K8 = spio::Fold<K, 8>;
using K16 = spio::Fold<K, 16>;
using K_MOD_8 = spio::Module<K, 8, 1>;
