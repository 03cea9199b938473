/// Lesson 6: swizzled layouts.
///
/// Shared memory serves 32 banks of 4 bytes: 8 slots of 16 bytes per 128-byte line. When 8 rows
/// of 128 bytes are read at one logical 16-byte column (as ldmatrix does), all 8 chunks sit in
/// the same slot, an 8-way bank conflict. XOR-ing the column index with the row index (mod 8)
/// puts them in 8 different slots. The swizzle is part of the tensor type, so kernels subscript
/// the tile like any other tensor.
///
/// On Hopper this is also the layout the tensor memory accelerator writes with its 128-byte
/// swizzle and the one wgmma reads through Swizzle::B128 descriptors: spio/src/matmul_sm90.cu
/// types its shared-memory rings exactly like Tile (16-byte chunks, Xor(M, K8, 3)), takes the
/// TMA destinations and the descriptors' start addresses as subscripts of them, and a host test
/// (tests/host/kernels/test_matmul_sm90.py) checks every point against the TMA formula.

/*@spio
M = Dim()
K = Dim()
K8 = K / 8
Tile = Tensor((M(16), K8(8)), dtype.float, swizzle=Xor(M, K8, 3))   # floats stand in for 16 B
@spio*/

// Physical column = column ^ (row % 8).
static_assert(spio::Xor<M, K8, 3>::apply(2, 5) == 7);
static_assert(Tile::storage_size() == 16 * 8);   // a permutation: no padding needed

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    float buf[Tile::storage_size()];
    auto tile = Tile(buf);
    for (auto k8 : spio::range(K8(8))) {
        unsigned slots = 0;
        for (auto m : spio::range(M(8))) {
            const long offset = tile[m][k8].get() - buf;
            if (offset != m.get() * 8 + (k8.get() ^ m.get())) {
                std::printf("06: offset of (%d, %d) is %ld\n", m.get(), k8.get(), offset);
                return 1;
            }
            slots |= 1u << (offset % 8);
        }
        if (slots != 0xffu) {   // 8 rows, one logical column: 8 distinct 16-byte slots
            std::printf("06: column %d hits slots %x\n", k8.get(), slots);
            return 1;
        }
    }
    return 0;
}
#endif
