/// Lesson 5: CompoundIndex.
///
/// Kernels get linear ids (blockIdx.x, threadIdx.x, the lane). A CompoundIndex splits one into
/// typed dims, row-major (the last dim varies fastest), replacing hand-written `/` and `%`.

/*@spio
P = Dim()
Q = Dim()
C = Dim()
P16 = P / 16
Q16 = Q / 16
BlockIdx = CompoundIndex(P16(4), Q16(3))      # 12 blocks: 4 tiles of P by 3 tiles of Q
ThreadIdx = CompoundIndex(Q(16), (C / 8)(4))  # 64 threads: 16 columns by 4 channel vectors
@spio*/

static_assert(BlockIdx::size() == 12 && ThreadIdx::size() == 64);
static_assert(BlockIdx(7).get<P16>() == P16(2) && BlockIdx(7).get<Q16>() == Q16(1));

#if defined(__CUDACC__)
extern "C" __global__ void origin(int* p_out, int* q_out) {
    // The block's tile origin in P and Q, plus the thread's column: coordinates of P and Q.
    const auto world = BlockIdx(blockIdx.x).coordinates() + ThreadIdx(threadIdx.x).coordinates();
    p_out[blockIdx.x * 64 + threadIdx.x] = world.get<P>().get();
    q_out[blockIdx.x * 64 + threadIdx.x] = world.get<Q>().get();
}
#endif

#if !defined(__CUDACC_RTC__)
#include <cstdio>

int main() {
    for (int block = 0; block < BlockIdx::size(); ++block) {
        for (int thread = 0; thread < ThreadIdx::size(); ++thread) {
            const auto world = BlockIdx(block).coordinates() + ThreadIdx(thread).coordinates();
            // The same thing by hand: tile origin * 16, plus the thread's column.
            const int p = (block / 3) * 16;
            const int q = (block % 3) * 16 + thread / 4;
            const int c8 = thread % 4;
            if (world.get<P>() != P(p) || world.get<Q>() != Q(q) ||
                world.get<spio::Fold<C, 8>>().get() != c8) {
                std::printf("05: block %d thread %d disagrees with manual arithmetic\n", block,
                            thread);
                return 1;
            }
        }
    }
    return 0;
}
#endif
