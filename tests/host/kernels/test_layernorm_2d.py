"""layernorm_2d kernel family without a GPU: params/config rules, the config space, the heuristic,
features, the fp64 references, and NVRTC compiles of every (sampled) config for sm_80 and sm_90."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.kernels import layernorm_2d as k
from spio.kernels.layernorm_2d_params import (
    DTYPES,
    LayerNorm2dConfig,
    LayerNorm2dParams,
    acc_in_smem,
    configs,
    fits,
    geometry,
    heuristic,
)
from spio.testing import sample

DEVICES = [known_device("H100"), known_device("sm_80")]
# C of ConvNeXt stages, non powers of two, the smallest and the register-resident extremes.
CS = [8, 16, 64, 96, 128, 192, 384, 768, 1024, 4096, 16384]
PARAMS = [
    LayerNorm2dParams(c=c, dtype=dt, wdtype=wdt, has_weight=hw, has_bias=hb)
    for c in CS
    for dt in DTYPES
    for wdt in ((dt,) if dt == "float32" else (dt, "float32"))
    for hw, hb in ((True, True), (False, False), (True, False))
]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"c": 12}, "multiple of 8"),
        ({"c": 0}, "multiple of 8"),
        ({"c": 16392}, "multiple of 8"),
        ({"c": 64, "m": -1}, "must be >= 0"),
        ({"c": 64, "m": 2**27}, "< 2\\*\\*32"),
        ({"c": 64, "dtype": "float64"}, "dtype must be one of"),
        ({"c": 64, "dtype": "float16", "wdtype": "bfloat16"}, "wdtype must be"),
        ({"c": 64.0}, "must be an int"),
        ({"c": 64, "has_bias": 1}, "must be a bool"),
    ],
)
def test_params_reject(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LayerNorm2dParams(**kwargs)


def test_params_defaults_and_static():
    p = LayerNorm2dParams(c=96, m=1000, dtype="bfloat16")
    assert p.wdtype == "bfloat16"
    assert p.static() == LayerNorm2dParams(c=96, m=0, dtype="bfloat16")
    assert hash(p.static()) == hash(LayerNorm2dParams(c=96, m=5, dtype="bfloat16").static())


def test_params_from_tensors():
    x = torch.empty(2, 64, 3, 5, dtype=torch.float16)
    p = LayerNorm2dParams.from_tensors(x, None, torch.empty(64))
    assert p == LayerNorm2dParams(
        c=64, m=30, dtype="float16", wdtype="float32", has_weight=False, has_bias=True
    )


@pytest.mark.parametrize(
    "args, match",
    [
        ((3, 32), "power of two"),
        ((2048, 1), "power of two <= 1024"),
        ((4, 3), "rows_per_block must be a power of two"),
        ((4, 4), "multiple of 32"),
        ((64, 32), "<= 1024"),
        ((32, 1, 4), "vec_bytes"),
    ],
)
def test_config_reject(args, match):
    with pytest.raises(ValueError, match=match):
        LayerNorm2dConfig(*args)


@pytest.mark.parametrize("dev", DEVICES, ids=lambda d: d.arch)
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("p", PARAMS, ids=str)
def test_configs_valid(p, backward, dev):
    cfgs = configs(p, dev, backward)
    assert cfgs, f"no config for {p}"
    assert len(set(cfgs)) == len(cfgs)
    for cfg in cfgs:
        g = geometry(p, cfg)
        assert g.vecs_per_thread * cfg.threads_per_row >= g.row_vecs
        assert g.vec * g.row_vecs == p.c
        assert cfg.block_threads <= dev.max_threads_per_sm
        assert fits(p, cfg, backward)
        if backward and cfg.rows_per_block > 1 and (p.has_weight or p.has_bias):
            # several row slots accumulate dweight/dbias in shared memory (static, < 48 KiB)
            assert acc_in_smem(p, cfg)
            assert (p.has_weight + p.has_bias) * cfg.rows_per_block * p.c * 4 <= 47 * 1024
    best = heuristic(p, dev, backward)
    assert best in cfgs


def test_heuristic_ignores_m():
    dev = DEVICES[0]
    for c in CS:
        small, big = LayerNorm2dParams(c=c, m=1), LayerNorm2dParams(c=c, m=2**17)
        assert heuristic(small, dev) == heuristic(big, dev)
        assert heuristic(small, dev, True) == heuristic(big, dev, True)


def test_heuristic_examples():
    dev = DEVICES[0]
    # C = 96 fp16: 12 vectors -> 4 threads x 3 vectors, no idle thread.
    cfg = heuristic(LayerNorm2dParams(c=96), dev)
    assert (cfg.threads_per_row, cfg.vec_bytes, cfg.block_threads) == (4, 16, 256)
    # C = 4096 fp16: 512 vectors -> 256 threads (several warps) x 2 vectors.
    cfg = heuristic(LayerNorm2dParams(c=4096), dev)
    assert (cfg.threads_per_row, cfg.rows_per_block) == (256, 1)


def test_features_and_stats():
    dev = DEVICES[0]
    p = LayerNorm2dParams(c=768, m=128 * 7 * 7)
    for kdef in (k.FWD, k.BWD):
        cfg = kdef.heuristic(p, dev)
        f = kdef.features(p, cfg, dev)
        assert list(f) == list(kdef.features(p, kdef.configs(p, dev)[0], dev))
        assert all(isinstance(v, float) and math.isfinite(v) for v in f.values())
        assert f["c"] == 768 and f["m"] == p.m
    fwd = k.FWD.stats(p)
    assert fwd.bytes_moved == 2 * p.m * p.c * 2 + 2 * p.c * 2 + 8 * p.m
    assert k.BWD.stats(p).bytes_moved > fwd.bytes_moved
    rf = k.BWD_REDUCE.features(p, k.ReduceConfig(8, 256), dev)
    assert all(isinstance(v, float) for v in rf.values())


def test_registered():
    assert KERNELS["layernorm_2d_fwd"] is k.FWD
    assert KERNELS["layernorm_2d_bwd"] is k.BWD
    assert KERNELS["layernorm_2d_bwd_reduce"] is k.BWD_REDUCE
    for kdef in (k.FWD, k.BWD, k.BWD_REDUCE):
        assert kdef.examples()


def test_sample_params_have_configs():
    import random

    rng = random.Random(0)
    for _ in range(200):
        p = k.FWD.sample_params(rng)
        assert p.m * p.c <= 1 << 28
        for dev in DEVICES:
            assert k.FWD.configs(p, dev) and k.BWD.configs(p, dev), p
    assert k.FWD.make_runner is not None and k.BWD.make_runner is not None


def test_reduce_never_without_weight_or_bias():
    """`spio tune collect --kernel all` and the op only ever build the reduce with something to
    reduce: its sample_params always have a weight or a bias, and params without both have no
    reduce config, no heuristic, no spec, and launch_backward wants no reduce kernel for them."""
    import random

    rng = random.Random(0)
    for _ in range(300):
        p = k.BWD_REDUCE.sample_params(rng)
        assert p.has_weight or p.has_bias, p
        for dev in DEVICES:
            assert k.BWD_REDUCE.configs(p, dev)
    assert k.BWD_REDUCE.make_runner is not None
    bare = LayerNorm2dParams(c=64, m=10, has_weight=False, has_bias=False)
    dev = DEVICES[0]
    assert not k.needs_reduce(bare) and k.BWD_REDUCE.configs(bare, dev) == []
    with pytest.raises(ValueError, match="neither weight nor bias"):
        k.BWD_REDUCE.heuristic(bare, dev)
    with pytest.raises(ValueError, match="neither weight nor bias"):
        k.BWD_REDUCE.spec(bare, k.ReduceConfig(), dev)
    cfg = k.BWD.heuristic(bare, dev)
    with pytest.raises(ValueError, match="reduce_loaded must be"):
        k.launch_backward(None, object(), bare, cfg, dev, x=None, dy=None, mean=None, rstd=None,
                          weight=None, dx=None, dweight=None, dbias=None, dweight_part=None,
                          dbias_part=None)  # fmt: skip
    affine = LayerNorm2dParams(c=64, m=10, has_bias=False)
    with pytest.raises(ValueError, match="reduce_loaded must be"):
        k.launch_backward(None, None, affine, cfg, dev, x=None, dy=None, mean=None, rstd=None,
                          weight=None, dx=None, dweight=None, dbias=None, dweight_part=None,
                          dbias_part=None)  # fmt: skip


def test_reduce_config_rules():
    """The reduce config is a pure function of (C, outputs, parts, SM count): in the config
    space, independent of M, at most DEPTH partial rows per thread whenever 1024 threads allow;
    for the H100's usual 264 parts at C = 256 it spreads over at least 64 CTAs."""
    from dataclasses import replace

    from spio.kernels.layernorm_2d_reduce import DEPTH, reduce_grid

    for dev in DEVICES:
        for c in CS:
            for hw, hb in ((True, True), (True, False), (False, True)):
                p = LayerNorm2dParams(c=c, m=1000, has_weight=hw, has_bias=hb)
                space = k.reduce_configs(p, dev)
                assert len(space) == len(set(space)) == 12
                assert k.reduce_heuristic(p, dev) in space
                for parts in (1, 7, 132, 264, 1056, 5000):
                    cfg = k.reduce_config(p, parts, dev)
                    assert cfg in space and cfg == k.reduce_config(replace(p, m=3), parts, dev)
                    assert -(-parts // cfg.splits) <= DEPTH or cfg.threads == 1024, (p, cfg)
    p = LayerNorm2dParams(c=256, m=128 * 14 * 14, dtype="float16")
    cfg = k.reduce_config(p, 264, DEVICES[0])
    grid = reduce_grid(p, cfg)
    assert grid[0] * grid[1] >= 64 and cfg.threads <= 256, (cfg, grid)
    with pytest.raises(ValueError, match="parts must be >= 1"):
        k.reduce_config(p, 0, DEVICES[0])
    with pytest.raises(ValueError, match="cols must be one of"):
        k.ReduceConfig(12, 256)
    with pytest.raises(ValueError, match="threads must be one of"):
        k.ReduceConfig(8, 100)


def test_launch_backward_derives_reduce_from_parts(monkeypatch):
    """launch_backward reduces with reduce_config of its real grid (parts), whatever reduce
    variant the caller passed, and uses the caller's variant when it is that one."""
    from types import SimpleNamespace

    dev = DEVICES[0]
    p = LayerNorm2dParams(c=256, m=128 * 14 * 14, dtype="float16")
    cfg = k.BWD.heuristic(p, dev)
    launches = []

    class Fake:
        def __init__(self, spec, per_sm=1):
            self.spec = spec
            self.function = SimpleNamespace(max_active_blocks=lambda t, s: per_sm, num_regs=32)

        def launch(self, grid, args, stream=0):
            launches.append((self, grid, args[-1]))

    fetched = []

    def fake_reduce_kernel(p_, parts, dev_):
        rcfg = k.reduce_config(p_, parts, dev_)
        fetched.append(parts)
        return rcfg, Fake(k.reduce_spec(p_, rcfg, dev_))

    monkeypatch.setattr(k, "reduce_kernel", fake_reduce_kernel)
    monkeypatch.setattr(k, "_resident_cache", {})
    stale = Fake(k.reduce_spec(p, k.ReduceConfig(32, 1024), dev))  # e.g. a selector's choice
    args = dict(x=0, dy=0, mean=0, rstd=0, weight=0, dx=0, dweight=0, dbias=0, dweight_part=0,
                dbias_part=0)  # fmt: skip
    for per_sm in (2, 8):
        monkeypatch.setattr(k, "_resident_cache", {})
        launches.clear()
        k.launch_backward(Fake(k.backward_spec(p, cfg, dev), per_sm), stale, p, cfg, dev, **args)
        parts = per_sm * dev.sm_count
        want = k.reduce_config(p, parts, dev)
        (_, bwd_grid, _), (red, red_grid, red_parts) = launches
        assert bwd_grid == (parts, 1, 1) and red_parts == parts and fetched[-1] == parts
        assert red is not stale and red.spec.title == k.reduce_spec(p, want, dev).title
        assert red_grid == k.reduce_grid(p, want)
    # The caller's variant is used when it is the derived one (no cache lookup).
    monkeypatch.setattr(k, "_resident_cache", {})
    launches.clear()
    right = Fake(k.reduce_spec(p, k.reduce_config(p, 2 * dev.sm_count, dev), dev))
    k.launch_backward(Fake(k.backward_spec(p, cfg, dev), 2), right, p, cfg, dev, **args)
    assert launches[1][0] is right and len(fetched) == 2


def test_backward_accumulators_and_prefetch():
    """Backward keeps dweight/dbias in shared memory whenever it fits (registers only for one
    row per CTA and a large C) and the heuristic prefetches single-warp rows without idle slots."""
    dev = DEVICES[0]
    for c, pf in ((64, True), (128, True), (256, True), (512, True), (96, False), (768, False)):
        p = LayerNorm2dParams(c=c, m=128 * 49)
        cfg = heuristic(p, dev, True)
        assert cfg.prefetch is pf, (c, cfg)
        assert acc_in_smem(p, cfg), (c, cfg)
        assert k.backward_spec(p, cfg, dev).specs["ACC_SMEM"].value is True
    big = LayerNorm2dParams(c=8192, m=10)
    cfg = heuristic(big, dev, True)
    assert cfg.rows_per_block == 1 and not acc_in_smem(big, cfg)
    bare = LayerNorm2dParams(c=64, m=10, has_weight=False, has_bias=False)
    assert not acc_in_smem(bare, heuristic(bare, dev, True))


def test_grid_rows():
    p = LayerNorm2dParams(c=64, m=1000)
    cfg = LayerNorm2dConfig(8, 32)
    assert k.grid_rows(p, cfg, 10_000) == 32  # ceil(1000 / 32) row groups
    assert k.grid_rows(p, cfg, 8) == 8  # capped at the resident CTAs: the kernel strides
    assert k.grid_rows(LayerNorm2dParams(c=64, m=0), cfg, 8) == 1


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


# ---- NVRTC: every config compiles ---------------------------------------------------------

COMPILE_PARAMS = [
    LayerNorm2dParams(c=8, dtype="float16"),
    LayerNorm2dParams(c=96, dtype="bfloat16", wdtype="float32"),
    LayerNorm2dParams(c=768, dtype="float16", has_bias=False),
    LayerNorm2dParams(c=4096, dtype="float32", has_weight=False, has_bias=False),
    LayerNorm2dParams(c=16384, dtype="bfloat16"),
]


def _variants(params, limit):
    """(kernel def, params, config, arch): the heuristic config and a sample of the others, of
    each kernel, for an H100 (sm_90) and an A100 (sm_80)."""
    out = []
    for dev in DEVICES:
        for p in params:
            for kdef in (k.FWD, k.BWD, k.BWD_REDUCE):
                if kdef is k.BWD_REDUCE and not (p.has_weight or p.has_bias):
                    continue
                cfgs = sample(kdef.configs(p, dev), limit=limit)
                for cfg in dict.fromkeys([kdef.heuristic(p, dev), *cfgs]):
                    out.append((kdef, p, cfg, dev))
    return out


def _check_compiles(kdef, p, cfg, dev):
    from spio.compiler import kernel_resources
    from spio.kernels.loader import compile_spec

    spec = kdef.spec(p, cfg, dev)
    image = compile_spec(spec, dev.arch)
    res = kernel_resources(image)[spec.entry]
    # The heuristic's configs keep everything in registers (no spills to local memory), except
    # 1024-thread rows (C = 16384), which get at most 64 registers per thread.
    if cfg == kdef.heuristic(p, dev) and spec.block[0] <= 512:
        assert res.local_bytes == 0, f"{kdef.name} {p} {cfg}: {res}"
    assert res.registers * spec.block[0] <= dev.regs_per_block, f"{kdef.name} {cfg}: {res}"


@pytest.mark.parametrize(
    "kdef, p, cfg, dev",
    _variants(COMPILE_PARAMS, limit=2),
    ids=lambda v: getattr(v, "name", None) or getattr(v, "arch", None) or str(v),
)
def test_configs_compile(kdef, p, cfg, dev):
    _check_compiles(kdef, p, cfg, dev)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kdef, p, cfg, dev",
    _variants(
        [p for p in PARAMS if p.c in (8, 96, 768, 4096) and p.has_weight and p.has_bias],
        limit=10**9,
    ),
    ids=lambda v: getattr(v, "name", None) or getattr(v, "arch", None) or str(v),
)
def test_configs_compile_exhaustive(kdef, p, cfg, dev):
    _check_compiles(kdef, p, cfg, dev)


# ---- the kernels' logic, run on the host (one std::thread per CUDA thread) --------------------

CXX = shutil.which("g++") or shutil.which("clang++")
HOST_DIR = Path(__file__).resolve().parents[2] / "host" / "cpp"  # cuda_emulation.h
SRC = Path(k.__file__).resolve().parents[1] / "src" / "layernorm_2d.cu"

# Just enough of the CUDA device API for layernorm_2d.cu on fp32 and fp16 data (__half is the
# compiler's _Float16, rounding to nearest even like __float2half_rn): shuffles go through a
# block-wide slot array between two barriers (every thread of the kernel calls them uniformly).
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
inline float2 __half22float2(__half2 h) { return {static_cast<float>(h.x), static_cast<float>(h.y)}; }
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
#if !SPIO_LAYERNORM_2D_BACKWARD
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
    (tmp_path / "kernel.cu").write_text(SRC.read_text())
    (tmp_path / "main.cpp").write_text(EMULATION)
    for name, t in arrays.items():
        t.float().contiguous().numpy().tofile(tmp_path / f"{name}.bin")
    exe = tmp_path / "emulated"
    cmd = [CXX, "-std=c++20", "-O1", "-pthread", "-I", str(HOST_DIR), "-I", str(tmp_path),
           "-I", str(SRC.parents[1] / "include"), str(tmp_path / "main.cpp"), "-o", str(exe)]  # fmt: skip
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
    """Forward and backward of layernorm_2d.cu (fp32) run on the host: every row's y, mean, rstd,
    dx and the per-CTA dweight/dbias partials against fp64, NaN-poisoned outputs."""
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


REDUCE_SRC = SRC.with_name("layernorm_2d_bwd_reduce.cu")
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
@pytest.mark.parametrize("c, cols, threads, parts, hw, hb", [(96, 8, 256, 37, True, True),
                                                            (40, 16, 128, 3, False, True),
                                                            (64, 32, 128, 100, True, False),
                                                            (24, 8, 1024, 700, True, True)])  # fmt: skip
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
    cmd = [CXX, "-std=c++20", "-O1", "-pthread", "-I", str(HOST_DIR), "-I", str(tmp_path),
           "-I", str(SRC.parents[1] / "include"), str(tmp_path / "main.cpp"), "-o", str(exe)]  # fmt: skip
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
