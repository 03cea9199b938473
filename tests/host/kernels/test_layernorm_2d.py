"""layernorm_2d kernel family without a GPU, the host-side rules: params and config validation,
the config spaces, the heuristics, features and stats, the registry, and the reduce's config
derived from the real partial-row count (reduce_config, launch_backward).

The NVRTC compiles live in test_layernorm_2d_compile.py, the fp64 references and the kernels'
logic run on the host in test_layernorm_2d_emulation.py."""

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
    acc_in_smem,
    configs,
    fits,
    geometry,
    heuristic,
)

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
    assert k.BWD_REDUCE.features is None  # not tuned: no model, no features of its own


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
    """The op only ever builds the reduce with something to reduce: params with a weight or a bias
    always have reduce configs; params without both have no reduce config, no heuristic, no spec,
    and launch_backward wants no reduce kernel for them. The family is not tuned on its own."""
    import random

    rng = random.Random(0)
    for _ in range(300):
        p = k.BWD.sample_params(rng)
        if k.needs_reduce(p):
            for dev in DEVICES:
                assert k.BWD_REDUCE.configs(p, dev)
    assert k.BWD_REDUCE.make_runner is None and k.BWD_REDUCE.sample_params is None
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


def test_launch_backward_derives_reduce_from_the_most_parts(monkeypatch):
    """launch_backward reduces with the reduce config of the most parts its variant writes (its
    resident CTAs), whatever M is, so a new batch size loads no new reduce variant; fetched by
    reduce_kernel, with no spec built while launching (that cost 50-230 us of Python between
    the two launches, inside `spio tune`'s timings)."""
    from types import SimpleNamespace

    dev = DEVICES[0]
    launches, dependents = [], []

    class Fake:
        def __init__(self, spec, per_sm=1):
            self.spec = spec
            self.function = SimpleNamespace(max_active_blocks=lambda t, s: per_sm, num_regs=32)

        def launch(self, grid, args, stream=0, dependent=False):
            launches.append((self, grid, args[-1]))
            dependents.append(dependent)

    fetched = []
    base = LayerNorm2dParams(c=256, m=1, dtype="float16")
    cfg = k.BWD.heuristic(base, dev)
    fakes = {}
    for per_sm in (2, 8):  # the reduce variants, built before specs are forbidden below
        rcfg = k.reduce_config(base, per_sm * dev.sm_count, dev)
        fakes[rcfg] = Fake(k.reduce_spec(base, rcfg, dev))

    def fake_reduce_kernel(p_, rcfg, dev_):
        fetched.append(rcfg)
        return fakes[rcfg]

    def no_spec(*a, **kw):
        raise AssertionError("launch_backward built a spec while launching")

    monkeypatch.setattr(k, "reduce_kernel", fake_reduce_kernel)
    monkeypatch.setattr(k, "reduce_spec", no_spec)
    bwd_spec = {n: k.backward_spec(base, cfg, dev) for n in (2, 8)}
    monkeypatch.setattr(k, "backward_spec", no_spec)
    args = dict(x=0, dy=0, mean=0, rstd=0, weight=0, dx=0, dweight=0, dbias=0, dweight_part=0,
                dbias_part=0)  # fmt: skip
    for per_sm in (2, 8):
        most = per_sm * dev.sm_count
        want = k.reduce_config(base, most, dev)
        for m in (128 * 14 * 14, 3 * cfg.rows_per_block, 1):  # grid: all resident, 3 CTAs, 1
            monkeypatch.setattr(k, "_resident_cache", {})
            launches.clear()
            dependents.clear()
            p = LayerNorm2dParams(c=256, m=m, dtype="float16")
            k.launch_backward(Fake(bwd_spec[per_sm], per_sm), True, p, cfg, dev, **args)
            assert dependents == [False, True]  # the reduce is the PDL-capable dependent launch
            parts = min(most, -(-m // cfg.rows_per_block))
            (_, bwd_grid, _), (red, red_grid, red_parts) = launches
            assert bwd_grid == (parts, 1, 1) and red_parts == parts and fetched[-1] == want
            assert red is fakes[want] and red_grid == k.reduce_grid(p, want)


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


def test_launch_reduce_rejects_unaligned_partials():
    import torch

    p = LayerNorm2dParams(c=64, m=10)
    cfg = k.reduce_config(p, 4, DEVICES[0])
    part = torch.zeros(5 * 64 + 1)[1:].view(5, 64)  # 4-byte offset view
    with pytest.raises(ValueError, match="dweight_part must be 16-byte aligned"):
        k.launch_reduce(None, p, cfg, dweight_part=part, dbias_part=None, dweight=None,
                        dbias=None, parts=5)  # fmt: skip
