/// Tiled transpose through a swizzled shared-memory tile, written with typed dims.
///   y[c, r] = x[r, c] for an (R, C) float matrix x (row-major) and its (C, R) transpose y.
///
/// Tiling: one CTA per 32 x 32 tile of x (BlockIdx splits blockIdx.x into tile rows and columns);
///   32 x 8 threads, each moving 4 elements in and 4 out.
/// Traffic per CTA: reads and writes 32 * 32 * 4 B; bound: memory.
/// Pipeline: load tile (coalesced along C) -> __syncthreads -> store tile (coalesced along R).
/// Shared memory: Tile is (R 32, C 32) with spio::Xor<R, C, 5>: the element of row r, column c
///   sits at column c ^ r, so the load (one row, 32 columns) and the store (one column, 32 rows)
///   both touch 32 distinct banks. No padding.
/// Assumes: ROWS and COLS come from the compile scope; any sizes (ragged tiles are bounds-checked).

/*@spio
R = Dim()
C = Dim()
X = Tensor((R(ROWS), C(COLS)), dtype.float)
Y = Tensor((C(COLS), R(ROWS)), dtype.float)
Tile = Tensor((R(32), C(32)), dtype.float, swizzle=Xor(R, C, 5))
BlockIdx = CompoundIndex((R / 32)(-(-ROWS // 32)), (C / 32)(-(-COLS // 32)))
@spio*/

constexpr int TILE = 32;
constexpr int WARPS = 8;

extern "C" __global__ void typed_transpose(float* __restrict__ y_ptr,
                                           const float* __restrict__ x_ptr) {
    // Preconditions
    static_assert(Tile::size<R>() == R(TILE) && Tile::size<C>() == C(TILE),
                  "typed_transpose: the tile is TILE x TILE");

    __shared__ float smem_tile_storage[Tile::storage_size()];
    const auto smem_tile = Tile(smem_tile_storage);
    const auto x = X::const_tensor(x_ptr);
    const auto y = Y(y_ptr);
    const auto origin = BlockIdx(blockIdx.x).coordinates();   // (R / 32, C / 32) of this tile

    // ---- load: warp w reads tile rows w, w + 8, ...; lanes run along C (coalesced) ----
    for (int j = threadIdx.y; j < TILE; j += WARPS) {
        const auto local = R(j) + C(threadIdx.x);
        const auto world = origin + local;
        if (world < X::extents()) {
            *smem_tile[local] = *x[world];
        }
    }
    __syncthreads();

    // ---- store: warp w writes y rows (C) w, w + 8, ...; lanes run along R (coalesced) ----
    for (int j = threadIdx.y; j < TILE; j += WARPS) {
        const auto local = C(j) + R(threadIdx.x);
        const auto world = origin + local;
        if (world < Y::extents()) {
            *y[world] = *smem_tile[local];
        }
    }
}
