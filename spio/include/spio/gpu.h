/// spio's device-side umbrella: the typed-dimension library (spio.h) and every GPU building block.
///
/// Device-only parts compile to nothing under a host compiler (see device.h).
#pragma once

#if __has_include("spio/spio.h")
#include "spio/spio.h"
#endif

#include "spio/async_copy.h"
#include "spio/cta.h"
#include "spio/device.h"
#include "spio/fragment.h"
#include "spio/ldmatrix.h"
#include "spio/mbarrier.h"
#include "spio/mma.h"
#include "spio/pipeline.h"
#include "spio/reduce.h"
#include "spio/smem.h"
#include "spio/vector.h"
#include "spio/wgmma.h"
