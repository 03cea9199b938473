"""Zero overhead, shown: typed-dim kernels compile to the same SASS as hand-indexed ones.

Each case is one CUDA source holding two kernels that do the same work, one written with spio's
typed dims (tensors, folds, a swizzle, CompoundIndex, range) and one with hand-written index
arithmetic. Both are compiled by NVRTC for sm_90 in the same translation unit, disassembled with
cuobjdump, and their instruction counts (NOP padding excluded) must agree within 2%.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOLERANCE = 0.02

PRELUDE = r"""
#include "spio/spio.h"
struct R : spio::Dim<R> { using spio::Dim<R>::Dim; };
struct C : spio::Dim<C> { using spio::Dim<C>::Dim; };
struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };
struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };
"""

# A 32x32-tiled transpose through a shared-memory tile swizzled by XOR (conflict-free both ways).
TRANSPOSE = r"""
constexpr int ROWS = 1024;
constexpr int COLS = 512;
using R32 = spio::Fold<R, 32>;
using C32 = spio::Fold<C, 32>;
using X = spio::Tensor<float, spio::Extent<R, ROWS>, spio::Extent<C, COLS>>;
using Y = spio::Tensor<float, spio::Extent<C, COLS>, spio::Extent<R, ROWS>>;
using Tile = spio::Tensor<float, spio::Extent<R, 32>, spio::Extent<C, 32>, spio::Xor<R, C, 5>>;
using Block = spio::CompoundIndex<spio::Extent<R32, ROWS / 32>, spio::Extent<C32, COLS / 32>>;

extern "C" __global__ void typed(float* __restrict__ y_ptr, const float* __restrict__ x_ptr) {
    __shared__ float smem[Tile::storage_size()];
    const auto origin = Block(blockIdx.x).coordinates();
    const auto x = X::const_tensor(x_ptr)[origin];
    const auto y = Y(y_ptr)[origin];
    const auto tile = Tile(smem);
    for (int j = threadIdx.y; j < 32; j += 8) {
        *tile[R(j)][C(threadIdx.x)] = *x[R(j)][C(threadIdx.x)];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
        *y[C(j)][R(threadIdx.x)] = *tile[R(threadIdx.x)][C(j)];
    }
}

extern "C" __global__ void hand(float* __restrict__ y_ptr, const float* __restrict__ x_ptr) {
    __shared__ float smem[32 * 32];
    const int r0 = blockIdx.x / (COLS / 32) * 32;
    const int c0 = blockIdx.x % (COLS / 32) * 32;
    const int tx = threadIdx.x;
    for (int j = threadIdx.y; j < 32; j += 8) {
        smem[j * 32 + (tx ^ (j & 31))] = x_ptr[(r0 + j) * COLS + c0 + tx];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
        y_ptr[(c0 + j) * ROWS + r0 + tx] = smem[tx * 32 + (j ^ (tx & 31))];
    }
}
"""

# A gather from a folded (K / 8, I, K % 8) layout into a row-major (I, K) one, K logical.
FOLDED = r"""
using K8 = spio::Fold<K, 8>;
using K_MOD_8 = spio::Module<K, 8, 1>;
using A = spio::Tensor<float, spio::Extent<K8, 8, 128>, spio::Extent<I, 16, 8>,
                       spio::Extent<K_MOD_8, 8, 1>>;
using B = spio::Tensor<float, spio::Extent<I, 16>, spio::Extent<K, 64>>;
using Thread = spio::CompoundIndex<spio::Extent<I, 16>, spio::Extent<K, 64>>;

extern "C" __global__ void typed(float* __restrict__ b_ptr, const float* __restrict__ a_ptr) {
    const Thread idx(blockIdx.x * blockDim.x + threadIdx.x);
    const auto world = idx.coordinates();
    const auto a = A::const_tensor(a_ptr);
    const auto b = B(b_ptr);
    float acc = 0.0f;
    for (auto k : spio::range(K(4))) {
        acc += *a[world][k];
    }
    *b[world] = acc;
}

extern "C" __global__ void hand(float* __restrict__ b_ptr, const float* __restrict__ a_ptr) {
    const unsigned n = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = n / 64;
    const int k = n % 64;
    float acc = 0.0f;
    for (int d = 0; d < 4; ++d) {
        const int kk = k + d;
        acc += a_ptr[i * 8 + (kk >> 3) * 128 + (kk & 7)];
    }
    b_ptr[i * 64 + k] = acc;
}
"""

# Per-pixel bias add over channels-last activations: a cursor stepped along C, a projected bias.
BIAS = r"""
struct N : spio::Dim<N> { using spio::Dim<N>::Dim; };
struct H : spio::Dim<H> { using spio::Dim<H>::Dim; };
struct W : spio::Dim<W> { using spio::Dim<W>::Dim; };
using X = spio::Tensor<float, spio::Extent<N, 2>, spio::Extent<H, 16>, spio::Extent<W, 16>,
                       spio::Extent<C, 32>>;
using Bias = spio::Tensor<float, spio::Extent<C, 32>>;
using Pixel = spio::CompoundIndex<spio::Extent<N, 2>, spio::Extent<H, 16>, spio::Extent<W, 16>>;

extern "C" __global__ void typed(float* __restrict__ x_ptr, const float* __restrict__ b_ptr) {
    const auto pixel = Pixel(blockIdx.x * blockDim.x + threadIdx.x).coordinates();
    const auto bias = Bias::const_tensor(b_ptr);
    auto x = X(x_ptr)[pixel];
    for (auto c : spio::range(C(32))) {
        *x += *bias[pixel + c];
        x.step(C(1));
    }
}

extern "C" __global__ void hand(float* __restrict__ x_ptr, const float* __restrict__ b_ptr) {
    const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = p / 256;
    const int h = (p / 16) % 16;
    const int w = p % 16;
    const int base = n * 8192 + h * 512 + w * 32;
    for (int c = 0; c < 32; ++c) {
        x_ptr[base + c] += b_ptr[c];
    }
}
"""

CASES = {"swizzled_transpose": TRANSPOSE, "folded_gather": FOLDED, "channels_last_bias": BIAS}


def _cuobjdump() -> Path | None:
    """cuobjdump from spio's tool lookup, else from NVIDIA's pip wheels (nvidia/*/bin)."""
    from spio.compiler.locate import find_tool

    tool = find_tool("cuobjdump") or shutil.which("cuobjdump")
    if tool:
        return Path(tool)
    for root in map(Path, sys.path):
        for candidate in sorted(root.glob("nvidia/*/bin/cuobjdump")):
            if candidate.is_file():
                return candidate
    return None


def _instruction_counts(sass: str) -> dict[str, int]:
    """Instructions per function in cuobjdump -sass text, NOP padding excluded."""
    counts: dict[str, int] = {}
    current = None
    for line in sass.splitlines():
        head = re.search(r"Function : (\S+)", line)
        if head:
            current = head.group(1)
            counts[current] = 0
            continue
        op = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if current and op and op.group(1) != "NOP":
            counts[current] += 1
    return counts


@pytest.mark.parametrize("case", sorted(CASES))
def test_typed_matches_hand_indexed_sass(case, tmp_path):
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("needs cuobjdump (CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    from spio.compiler import compile

    cubin = tmp_path / f"{case}.cubin"
    cubin.write_bytes(compile(PRELUDE + CASES[case], "sm_90", name=f"{case}.cu", cache=None))
    run = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    counts = _instruction_counts(run.stdout)
    assert set(counts) == {"typed", "hand"}, f"unexpected functions in SASS: {counts}"
    typed, hand = counts["typed"], counts["hand"]
    assert hand > 10, f"hand-indexed kernel has only {hand} instructions; the parse is broken"
    assert abs(typed - hand) <= TOLERANCE * hand, (
        f"{case}: typed kernel has {typed} SASS instructions, hand-indexed {hand} "
        f"(more than {TOLERANCE:.0%} apart); set SPIO_DISASM=1 or run cuobjdump -sass to compare"
    )
