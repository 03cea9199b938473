/// spio's typed-dimension library, host and device: dims, folds, modules, coordinates, extents,
/// tensors, cursors, swizzles, range() and CompoundIndex. Device-only building blocks: spio/gpu.h.
#pragma once

#include "spio/macros.h"
#include "spio/meta.h"
#include "spio/dim.h"
#include "spio/fold.h"
#include "spio/module.h"
#include "spio/coordinates.h"
#include "spio/extent.h"
#include "spio/swizzle.h"
#include "spio/layout.h"
#include "spio/cursor.h"
#include "spio/tensor.h"
#include "spio/range.h"
#include "spio/compound_index.h"
