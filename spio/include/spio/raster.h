/// CTA-to-tile rasterization for 2-D tiled outputs (matmul-like grids of one dimension).
///
/// Example: int tm, tn; spio::grouped_tile(blockIdx.x, tiles_m, tiles_n, 8, tm, tn);
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Row-major CTA tile index of CTA `cta` with grouped rasterization: `raster` consecutive
/// M-tiles form a group swept N-tile by N-tile (column-major inside the group), so a group
/// touches raster tiles of A's rows and each column strip of B once (L2 reuse).
SPIO_DEVICE void grouped_tile(int cta, int tiles_m, int tiles_n, int raster, int& tile_m,
                              int& tile_n) {
    const int per_group = raster * tiles_n;
    const int group = cta / per_group;
    const int first_m = group * raster;
    const int rows = min(tiles_m - first_m, raster);
    const int in_group = cta - group * per_group;
    tile_m = first_m + in_group % rows;
    tile_n = in_group / rows;
}

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
