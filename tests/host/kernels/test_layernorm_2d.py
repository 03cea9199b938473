"""layernorm_2d kernel family without a GPU: params/config rules, the config space, the heuristic,
features, the fp64 references, and NVRTC compiles of every (sampled) config for sm_80 and sm_90."""

from __future__ import annotations

import math

import pytest
import torch

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.kernels import layernorm_2d as k
from spio.kernels.layernorm_2d_params import (
    DTYPES,
    LayerNorm2dConfig,
    LayerNorm2dParams,
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
        if backward:
            assert not cfg.prefetch
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
    rf = k.BWD_REDUCE.features(p, k.ReduceConfig(8), dev)
    assert all(isinstance(v, float) for v in rf.values())


def test_registered():
    assert KERNELS["layernorm_2d_fwd"] is k.FWD
    assert KERNELS["layernorm_2d_bwd"] is k.BWD
    assert KERNELS["layernorm_2d_bwd_reduce"] is k.BWD_REDUCE
    for kdef in (k.FWD, k.BWD, k.BWD_REDUCE):
        assert kdef.examples()


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
    _variants([p for p in PARAMS if p.c in (8, 96, 768, 4096)], limit=10**9),
    ids=lambda v: getattr(v, "name", None) or getattr(v, "arch", None) or str(v),
)
def test_configs_compile_exhaustive(kdef, p, cfg, dev):
    _check_compiles(kdef, p, cfg, dev)
