"""layernorm_2d without a GPU, numerics: the fp64 references against PyTorch and the formulas,
and the kernels' logic (forward, backward, reduce; fp32 and fp16) run on the host with one
std::thread per CUDA thread (tests/host/cpp/cuda_emulation.h) against those references, the
reduce also bitwise against its documented order (ordered_sum)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from spio.kernels import layernorm_2d as k
from spio.kernels.layernorm_2d_params import LayerNorm2dConfig, LayerNorm2dParams


def test_reference_matches_torch(seed):
    g = torch.Generator().manual_seed(seed)
    x = 3 + torch.randn(2, 96, 5, 7, generator=g, dtype=torch.float64)
    w, b = torch.randn(96, generator=g, dtype=torch.float64), torch.randn(96, dtype=torch.float64)
    y, mean, rstd = k.reference(x, w, b, 1e-6)
    want = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (96,), w, b, 1e-6)
    torch.testing.assert_close(y, want.permute(0, 3, 1, 2), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mean, x.mean(1))
    torch.testing.assert_close(rstd, (x.var(1, unbiased=False) + 1e-6).rsqrt())


def test_reference_backward_matches_formula(seed):
    g = torch.Generator().manual_seed(seed)
    x = 3 + torch.randn(2, 64, 3, 5, generator=g, dtype=torch.float64)
    dy = torch.randn(x.shape, generator=g, dtype=torch.float64)
    w = torch.randn(64, generator=g, dtype=torch.float64)
    dx, dw, db = k.reference_backward(x, dy, w, 1e-6)
    _, mean, rstd = k.reference(x, None, None, 1e-6)
    xhat = (x - mean[:, None]) * rstd[:, None]
    gw = dy * w[None, :, None, None]
    want = rstd[:, None] * (
        gw - gw.mean(1, keepdim=True) - xhat * (gw * xhat).mean(1, keepdim=True)
    )
    torch.testing.assert_close(dx, want)
    torch.testing.assert_close(dw, (dy * xhat).sum((0, 2, 3)))
    torch.testing.assert_close(db, dy.sum((0, 2, 3)))


# ---- the kernels' logic, run on the host (one std::thread per CUDA thread) --------------------

CXX = shutil.which("g++") or shutil.which("clang++")
HOST_DIR = Path(__file__).resolve().parents[2] / "host" / "cpp"  # cuda_emulation.h
SRC_DIR = Path(k.__file__).resolve().parents[1] / "src"  # the .cu files and their header

# Just enough of the CUDA device API for layernorm_2d.cu / layernorm_2d_bwd.cu on fp32 and fp16
# data (__half is the compiler's _Float16, rounding to nearest even like __float2half_rn):
# shuffles go through a block-wide slot array between two barriers (every thread of the kernel
# calls them uniformly).
EMULATION = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>
#include "cuda_emulation.h"
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
inline EmulatedDim3 gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
struct __half { _Float16 v; };
struct __half2 { _Float16 x, y; };  // x in the low 16 bits, as on the GPU
inline float __half2float(__half h) { return static_cast<float>(h.v); }
inline float2 __half22float2(__half2 h) {
    return {static_cast<float>(h.x), static_cast<float>(h.y)};
}
inline __half2 __floats2half2_rn(float a, float b) {
    return {static_cast<_Float16>(a), static_cast<_Float16>(b)};
}
struct __nv_bfloat16 {};
struct __nv_bfloat162 {};
float __bfloat162float(__nv_bfloat16);
float2 __bfloat1622float2(__nv_bfloat162);
__nv_bfloat162 __floats2bfloat162_rn(float, float);
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
template <class T> T __ldg(const T* p) { return *p; }
inline float __shfl_xor_sync(unsigned, float v, int offset) {
    static float slots[1024];
    const int t = static_cast<int>(threadIdx.x);
    slots[t] = v;
    __syncthreads();
    const float r = slots[t ^ offset];
    __syncthreads();
    return r;
}
namespace spio {
inline constexpr int warp_size = 32;
inline constexpr unsigned full_warp_mask = 0xffffffffu;
inline int lane_id() { return static_cast<int>(threadIdx.x) & 31; }
inline int warp_id() { return static_cast<int>(threadIdx.x) / 32; }
}  // namespace spio
#include "types.h"
#include "kernel.cu"

static std::vector<float> read(const char* path, size_t n) {
    std::vector<float> v(n);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), 4, n, f) != n) std::abort();
    std::fclose(f);
    return v;
}
template <class T>
static std::vector<T> cast(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        if constexpr (std::is_same_v<T, float>) out[i] = v[i];
        else out[i] = T{static_cast<_Float16>(v[i])};
    }
    return out;
}
template <class T>
static void write(const char* path, const std::vector<T>& v) {
    std::vector<float> f32(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        if constexpr (std::is_same_v<T, float>) f32[i] = v[i];
        else f32[i] = static_cast<float>(v[i].v);
    }
    FILE* f = std::fopen(path, "wb");
    std::fwrite(f32.data(), 4, f32.size(), f);
    std::fclose(f);
}

int main(int argc, char** argv) {
    const int m = std::atoi(argv[1]), grid = std::atoi(argv[2]);
    gridDim = {static_cast<unsigned>(grid), 1, 1};
    auto x = cast<DATA>(read("x.bin", size_t(m) * CHANNELS));
    auto w = cast<WEIGHT>(read("w.bin", CHANNELS));
    auto b = cast<WEIGHT>(read("b.bin", CHANNELS));
    auto y = cast<DATA>(std::vector<float>(size_t(m) * CHANNELS, NAN));
    auto dx = y;
    std::vector<float> mean(m, NAN), rstd(m, NAN);
    std::vector<float> dwp(size_t(grid) * CHANNELS, NAN), dbp(dwp.size(), NAN);
    auto raw = [](std::vector<DATA>& v) { return reinterpret_cast<X::data_type*>(v.data()); };
#if !EMULATE_BACKWARD
    emulate_launch(grid, {BLOCK_THREADS, 1, 0}, [&] {
        layernorm_2d_fwd(raw(x), HAS_WEIGHT ? w.data() : nullptr, HAS_BIAS ? b.data() : nullptr,
                         raw(y), mean.data(), rstd.data(), m, 1e-6f);
    });
    write("y.bin", y); write("mean.bin", mean); write("rstd.bin", rstd);
#else
    auto dy = cast<DATA>(read("dy.bin", size_t(m) * CHANNELS));
    mean = read("mean_in.bin", m);
    rstd = read("rstd_in.bin", m);
    emulate_launch(grid, {BLOCK_THREADS, 1, 0}, [&] {
        layernorm_2d_bwd(raw(x), raw(dy), mean.data(), rstd.data(),
                         HAS_WEIGHT ? w.data() : nullptr, raw(dx), dwp.data(), dbp.data(), m);
    });
    write("dx.bin", dx); write("dwp.bin", dwp); write("dbp.bin", dbp);
#endif
    return 0;
}
"""

EMULATED = [
    # (C, threads_per_row, rows_per_block, vec_bytes, has_weight, has_bias, M, grid, dtype, wdtype,
    #  prefetch, backward accumulators: "smem" or "regs")
    (8, 1, 128, 16, True, True, 300, 2, "float32", "float32", False, "smem"),  # ragged M
    (96, 16, 8, 16, True, False, 37, 3, "float32", "float32", False, "smem"),  # idle threads
    (64, 32, 4, 8, False, True, 9, 2, "float32", "float32", False, "smem"),  # 8-byte vectors
    (256, 64, 2, 16, True, True, 5, 2, "float32", "float32", False, "smem"),  # two warps per row
    (96, 4, 32, 16, True, True, 70, 2, "float16", "float16", False, "smem"),  # 3 half8 vectors
    (64, 16, 8, 8, True, True, 21, 3, "float16", "float32", False, "smem"),  # fp32 weights
    (768, 64, 2, 16, True, True, 6, 2, "float16", "float16", False, "smem"),  # 96 vecs, 64 thr
    # prefetch (the next group's x, dy, mean, rstd): several groups per CTA, ragged last group
    (8, 1, 32, 16, True, True, 300, 3, "float16", "float16", True, "smem"),
    (96, 16, 4, 16, False, True, 37, 2, "float32", "float32", True, "smem"),  # idle vectors
    (128, 64, 1, 8, True, True, 7, 2, "float32", "float32", True, "smem"),  # multi-warp row
    # register accumulators (one row per CTA; on the GPU for C > 6016), with and without prefetch
    (128, 32, 1, 16, True, True, 11, 3, "float32", "float32", False, "regs"),
    (96, 32, 1, 8, True, False, 9, 2, "float16", "float32", True, "regs"),
]


def _emulate(tmp_path, p, cfg, backward, m, grid, arrays, acc="smem"):
    from spio.generators import Constant, generate

    spec = (k.backward_spec if backward else k.forward_spec)(p, cfg, None)
    specs = dict(spec.specs)
    if backward:  # the accumulator path under test (the GPU takes registers only for C > 6016)
        assert acc == "regs" or specs["ACC_SMEM"].value, f"{p} {cfg}: expected ACC_SMEM"
        specs["ACC_SMEM"] = Constant(acc == "smem")
    (tmp_path / "types.h").write_text(generate(specs, title="emulated"))
    (tmp_path / "kernel.cu").write_text((SRC_DIR / spec.source).read_text())
    (tmp_path / "main.cpp").write_text(EMULATION)
    for name, t in arrays.items():
        t.float().contiguous().numpy().tofile(tmp_path / f"{name}.bin")
    exe = tmp_path / "emulated"
    cmd = [CXX, "-std=c++20", "-O1", "-pthread", f"-DEMULATE_BACKWARD={int(backward)}"]
    cmd += ["-I", str(HOST_DIR), "-I", str(tmp_path), "-I", str(SRC_DIR)]  # layernorm_2d_common.h
    cmd += ["-I", str(SRC_DIR.parent / "include"), str(tmp_path / "main.cpp"), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe), str(m), str(grid)], cwd=tmp_path, capture_output=True)
    assert run.returncode == 0, run.stderr

    def out(name, *shape):
        return torch.from_numpy(
            __import__("numpy").fromfile(tmp_path / f"{name}.bin", dtype="float32")
        ).reshape(shape)

    return out


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize("case", EMULATED, ids=str)
def test_kernel_logic_emulated(case, tmp_path, seed):
    """Forward and backward (layernorm_2d.cu, layernorm_2d_bwd.cu; fp32) run on the host: every
    row's y, mean, rstd, dx and the per-CTA dweight/dbias partials against fp64, NaN-poisoned
    outputs."""
    from spio.testing import assert_close, tolerance

    c, t, r, vb, hw, hb, m, grid, dtype, wdtype, pf, acc = case
    p = LayerNorm2dParams(c=c, m=m, dtype=dtype, wdtype=wdtype, has_weight=hw, has_bias=hb)
    cfg = LayerNorm2dConfig(t, r, vb, pf)
    g = torch.Generator().manual_seed(seed)
    dt, wdt = getattr(torch, dtype), getattr(torch, wdtype)
    # Quantize first: the references see exactly the values the kernel reads.
    x = (3 + torch.randn(m, c, generator=g, dtype=torch.float64)).to(dt).float()
    dy = torch.randn(m, c, generator=g).to(dt).float()
    w, b = (torch.randn(c, generator=g).to(wdt).float() for _ in range(2))
    nchw = lambda t: t.reshape(m, c, 1, 1)  # noqa: E731
    ref_y, ref_mean, ref_rstd = k.reference(nchw(x), w if hw else None, b if hb else None, 1e-6)
    out = _emulate(tmp_path, p, cfg, False, m, grid, {"x": x, "w": w, "b": b})
    tol = tolerance(torch.float32, c)
    assert_close(out("y", m, c), ref_y.reshape(m, c), tolerance(dt, c), f"emulated y {p} {cfg}")
    assert_close(out("mean", m), ref_mean.flatten(), tol, "emulated mean")
    assert_close(out("rstd", m), ref_rstd.flatten(), tol, "emulated rstd")

    mean, rstd = ref_mean.flatten().float(), ref_rstd.flatten().float()
    arrays = {"x": x, "w": w, "b": b, "dy": dy, "mean_in": mean, "rstd_in": rstd}
    out = _emulate(tmp_path, p, cfg, True, m, grid, arrays, acc)
    ref_dx, ref_dw, ref_db = k.reference_backward(nchw(x), nchw(dy), w if hw else None, 1e-6)
    assert_close(out("dx", m, c), ref_dx.reshape(m, c), tolerance(dt, c, c=8.0), "dx")
    if hw:
        assert_close(out("dwp", grid, c).sum(0), ref_dw, tolerance(torch.float32, m), "dweight")
    if hb:
        assert_close(out("dbp", grid, c).sum(0), ref_db, tolerance(torch.float32, m), "dbias")


REDUCE_SRC = SRC_DIR / "layernorm_2d_bwd_reduce.cu"
REDUCE_MAIN = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "cuda_emulation.h"
#define __launch_bounds__(n)
struct uint4 { unsigned x, y, z, w; };
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }  // the reduce reads partials through L2
inline float __shfl_xor_sync(unsigned, float v, int offset) {  // all threads call it uniformly
    static float slots[1024];
    const int t = static_cast<int>(threadIdx.x);
    slots[t] = v;
    __syncthreads();
    const float r = slots[t ^ offset];
    __syncthreads();
    return r;
}
#include "types.h"
#include "kernel.cu"

int main(int argc, char** argv) {
    const int parts = std::atoi(argv[1]);
    std::vector<float> dwp(size_t(parts) * CHANNELS), dbp(dwp.size());
    FILE* f = std::fopen("parts.bin", "rb");
    if (!f || std::fread(dwp.data(), 4, dwp.size(), f) != dwp.size() ||
        std::fread(dbp.data(), 4, dbp.size(), f) != dbp.size()) std::abort();
    std::fclose(f);
    std::vector<float> dw(CHANNELS, NAN), db(CHANNELS, NAN);
    const int outputs = int(HAS_WEIGHT) + int(HAS_BIAS);
    for (int y = 0; y < outputs; ++y) {  // blockIdx.y: dweight, then dbias
        for (unsigned x = 0; x < (CHANNELS + COLS - 1) / COLS; ++x) {
            emulate_launch(1, {THREADS, 1, 0}, [&] {
                blockIdx = {x, static_cast<unsigned>(y), 0};
                layernorm_2d_bwd_reduce(dwp.data(), dbp.data(), dw.data(), db.data(), parts);
            });
        }
    }
    f = std::fopen("out.bin", "wb");
    std::fwrite(dw.data(), 4, dw.size(), f);
    std::fwrite(db.data(), 4, db.size(), f);
    std::fclose(f);
    return 0;
}
"""


@pytest.mark.skipif(CXX is None, reason="needs a host C++20 compiler (g++ or clang++)")
@pytest.mark.parametrize(
    "c, cols, threads, parts, hw, hb",
    [
        (96, 8, 256, 37, True, True),
        (40, 16, 128, 3, False, True),
        (64, 32, 128, 100, True, False),
        (24, 8, 1024, 700, True, True),
    ],
)
def test_reduce_logic_emulated(c, cols, threads, parts, hw, hb, tmp_path, seed):
    """layernorm_2d_bwd_reduce.cu (fp32) on the host: column sums of the partials against fp64
    and bitwise against the documented fixed order; C not a multiple of the column, fewer
    partial rows than threads, more rows than DEPTH rounds, weight-only and bias-only; NaN
    poisoned outputs (an absent output stays NaN)."""
    from spio.generators import generate
    from spio.testing import assert_close, tolerance

    p = LayerNorm2dParams(c=c, dtype="float32", has_weight=hw, has_bias=hb)
    cfg = k.ReduceConfig(cols, threads)
    spec = k.reduce_spec(p, cfg, None)
    (tmp_path / "types.h").write_text(generate(spec.specs, title="emulated"))
    (tmp_path / "kernel.cu").write_text(REDUCE_SRC.read_text())
    (tmp_path / "main.cpp").write_text(REDUCE_MAIN)
    g = torch.Generator().manual_seed(seed)
    dwp, dbp = torch.randn(parts, c, generator=g), torch.randn(parts, c, generator=g)
    torch.cat([dwp.flatten(), dbp.flatten()]).numpy().tofile(tmp_path / "parts.bin")
    exe = tmp_path / "emulated"
    cmd = [CXX, "-std=c++20", "-O1", "-pthread", "-I", str(HOST_DIR), "-I", str(tmp_path)]
    cmd += ["-I", str(SRC_DIR.parent / "include"), str(tmp_path / "main.cpp"), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe), str(parts)], cwd=tmp_path, capture_output=True)
    assert run.returncode == 0, run.stderr
    import numpy as np

    out = torch.from_numpy(np.fromfile(tmp_path / "out.bin", dtype="float32")).reshape(2, c)
    for flag, got, part, name in ((hw, out[0], dwp, "dweight"), (hb, out[1], dbp, "dbias")):
        if not flag:
            assert torch.isnan(got).all(), f"{name} written without its parameter"
            continue
        assert_close(got, part.double().sum(0), tolerance(torch.float32, parts), name)
        ordered = torch.from_numpy(k.ordered_sum(part.numpy(), cfg))
        assert torch.equal(got, ordered), f"{name}: not the documented fixed order ({cfg})"
