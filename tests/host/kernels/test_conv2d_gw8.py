"""conv2d_gw8 kernel families on the host: params/config validation, config spaces for an H100 and
an A100, heuristics, stats/features, the dgrad transform, and NVRTC compiles of sampled configs
for sm_80 and sm_90 with no local memory (exhaustive under `slow`)."""

from __future__ import annotations

import csv
import functools
import math
import zlib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.kernels.conv2d_gw8 import fprop as fp
from spio.kernels.conv2d_gw8 import reference as ref
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8.params import (
    REDUCE_THREADS,
    Conv2dGw8Config,
    Conv2dGw8Params,
    Conv2dGw8ReduceConfig,
    Conv2dGw8WgradConfig,
    warps_allowed,
)
from spio.kernels.kernel_def import to_dict
from spio.testing import sample

SHAPES_CSV = Path(__file__).resolve().parents[3] / "spio/kernels/data/conv2d_gw8_layer_shapes.csv"
DEVICES = ("H100", "A100")


@functools.cache
def _dev(name: str):
    return known_device(name)


def layer_shapes() -> list[Conv2dGw8Params]:
    with SHAPES_CSV.open() as f:
        return [
            Conv2dGw8Params(
                n=int(r["n"]),
                c=int(r["c"]),
                h=int(r["h"]),
                w=int(r["w"]),
                r=int(r["r"]),
                s=int(r["s"]),
                pad_h=int(r["pad_h"]),
                pad_w=int(r["pad_w"]),
                has_bias=r["bias"] == "1",
            )
            for r in csv.DictReader(f)
        ]


EDGE_SHAPES = [
    Conv2dGw8Params(n=1, c=8, h=1, w=1, r=1, s=1, pad_h=0, pad_w=0),
    Conv2dGw8Params(n=3, c=24, h=13, w=9, r=3, s=5, pad_h=1, pad_w=2, has_bias=True),
    Conv2dGw8Params(n=2, c=64, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3, dtype="bfloat16"),
    Conv2dGw8Params(n=1, c=16, h=200, w=300, r=3, s=3, pad_h=0, pad_w=0),
    Conv2dGw8Params(n=1, c=16, h=5, w=5, r=3, s=3, pad_h=4, pad_w=4),  # dgrad with cropping
]


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"c": 12}, "multiple of 8"),
        ({"c": 0}, "multiple of 8"),
        ({"n": 0}, "batch"),
        ({"n": 70000}, "batch"),
        ({"r": 8}, "kernel size"),
        ({"s": 0}, "kernel size"),
        ({"h": 0}, "H and W"),
        ({"h": 2, "r": 5, "pad_h": 0}, "increase the padding"),
        ({"dtype": "float32"}, "dtype"),
        ({"c": 2**20, "h": 64, "w": 64}, "2\\^31"),
    ],
)
def test_params_reject(kwargs, message):
    base = {"n": 2, "c": 16, "h": 8, "w": 8, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1}
    with pytest.raises(ValueError, match=message):
        Conv2dGw8Params(**{**base, **kwargs})


def test_params_types_and_output_size():
    with pytest.raises(TypeError, match="must be an int"):
        Conv2dGw8Params(n=2.0, c=16, h=8, w=8)
    p = Conv2dGw8Params(n=2, c=16, h=10, w=7, r=5, s=3, pad_h=0, pad_w=2)
    assert (p.p, p.q, p.groups) == (6, 9, 2)
    with pytest.raises(TypeError, match="weight_cl must be a bool"):
        Conv2dGw8Params(n=2, c=16, h=8, w=8, weight_cl=1)
    # one memory order for a 1x1 weight: one compiled variant, not two
    one = Conv2dGw8Params(n=2, c=16, h=8, w=8, r=1, s=1, pad_h=0, pad_w=0, weight_cl=True)
    assert not one.weight_cl
    assert Conv2dGw8Params(n=2, c=16, h=8, w=8, weight_cl=True).dgrad_as_fprop().weight_cl


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (Conv2dGw8Config, {"block_q": 24}, "multiple of 16"),
        (Conv2dGw8Config, {"warps": 3}, "warps"),
        (Conv2dGw8Config, {"stages": 5}, "stages"),
        (Conv2dGw8WgradConfig, {"stages": 5}, "stages"),
        (Conv2dGw8Config, {"block_p": 0}, "block_p"),
        (Conv2dGw8Config, {"carveout": 101}, r"carveout must be a percent in \[0, 100\] or -1"),
        (Conv2dGw8Config, {"carveout": -2}, "carveout"),
        (Conv2dGw8WgradConfig, {"block_q": 12}, "multiple of 8"),
        (Conv2dGw8WgradConfig, {"splits_per_sm": 3}, "splits_per_sm"),
        (Conv2dGw8ReduceConfig, {"threads": 100}, "threads"),
    ],
)
def test_config_reject(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_from_tensors():
    x = torch.empty(2, 16, 9, 7, dtype=torch.bfloat16)
    w = torch.empty(16, 8, 3, 5, dtype=torch.bfloat16)
    p = Conv2dGw8Params.from_tensors(x, w, torch.empty(16, dtype=torch.bfloat16))
    assert (p.pad_h, p.pad_w, p.has_bias, p.dtype) == (1, 2, True, "bfloat16")
    with pytest.raises(ValueError, match="input channels per group"):
        Conv2dGw8Params.from_tensors(x, torch.empty(16, 4, 3, 3), None)
    with pytest.raises(ValueError, match="must equal the input channels"):
        Conv2dGw8Params.from_tensors(x, torch.empty(32, 8, 3, 3), None)
    with pytest.raises(ValueError, match="bias must have shape"):
        Conv2dGw8Params.from_tensors(x, w, torch.empty(8))
    with pytest.raises(TypeError, match="padding"):
        Conv2dGw8Params.from_tensors(x, w, None, padding="same")
    with pytest.raises(ValueError, match="padding must be >= 0"):
        Conv2dGw8Params.from_tensors(x, w, None, padding=-1)


def test_registered():
    assert KERNELS["conv2d_gw8_fprop"] is fp.FPROP
    assert KERNELS["conv2d_gw8_dgrad"] is fp.DGRAD
    assert KERNELS["conv2d_gw8_wgrad"] is wg.WGRAD
    assert KERNELS["conv2d_gw8_wgrad_reduce"] is rd.WGRAD_REDUCE


# ---- the dgrad transform (pure PyTorch, exact in fp64) -----------------------------------------


@pytest.mark.parametrize("p", EDGE_SHAPES[:3] + EDGE_SHAPES[4:], ids=str)
def test_dgrad_is_fprop_of_transposed_weight(p, seed):
    g = torch.Generator().manual_seed(seed)
    dy = torch.randn(p.n, p.c, p.p, p.q, generator=g, dtype=torch.float64)
    w = torch.randn(p.c, 8, p.r, p.s, generator=g, dtype=torch.float64)
    q = p.dgrad_as_fprop()
    assert (q.p, q.q) == (p.h, p.w)
    want = ref.dgrad(dy, w, (p.h, p.w), p.padding)
    got = ref.fprop(dy, ref.transpose_weight(w), None, q.padding) if min(q.padding) >= 0 else None
    if got is None:  # negative padding: crop a zero-padded input instead
        pad = (-q.pad_h, -q.pad_w)
        full = ref.fprop(dy, ref.transpose_weight(w), None, (0, 0))
        got = full[:, :, pad[0] : pad[0] + p.h, pad[1] : pad[1] + p.w]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---- config spaces ------------------------------------------------------------------------------

SPACES = [
    ("fprop", fp.configs, fp.heuristic, fp.smem_bytes, fp.live_regs, fp.MAX_LIVE_REGS),
    ("dgrad", fp.dgrad_configs, fp.dgrad_heuristic, None, None, None),
    ("wgrad", wg.configs, wg.heuristic, wg.smem_bytes, wg.live_regs, wg.MAX_LIVE_REGS),
]


@pytest.mark.parametrize("gpu", DEVICES)
@pytest.mark.parametrize("space", SPACES, ids=lambda s: s[0])
def test_config_spaces(gpu, space):
    dev = _dev(gpu)
    _, configs, heuristic, smem, regs, max_regs = space
    for p in layer_shapes() + EDGE_SHAPES:
        cfgs = configs(p, dev)
        assert cfgs, f"no config for {p} on {gpu}"
        assert len(set(cfgs)) == len(cfgs)
        assert heuristic(p, dev) in cfgs
        for cfg in cfgs:
            # Idle warps in the last group block (wgrad's too since the twentieth session): at
            # most groups / 4, or a quarter of the warps of a CTA that spans every group.
            idle = -p.groups % cfg.warps
            if cfg.warps > p.groups:
                assert 4 * idle <= cfg.warps, (p, cfg)
            else:
                assert 4 * idle <= p.groups, (p, cfg)
            if smem is not None:
                # fprop's shared memory depends on the device (TMA rows on sm_90), wgrad's not.
                need = smem(p, cfg, dev) if space[0] == "fprop" else smem(p, cfg)
                assert need <= dev.max_smem_per_block_optin
                assert regs(p, cfg) <= max_regs


def test_odd_group_counts_get_several_warps():
    """7, 19 and 55 groups (C 56, 152, 440) get CTAs of up to 4 or 8 warps, with idle warps in
    the last group block (RAGGED_GROUPS); 3, 6 and 7 groups (C 24, 48, 56) also get one CTA
    spanning every group with at most a quarter of its warps idle (4, 8 and 8 warps), but not
    two group blocks of 2 warps at 3 groups (a third of the groups' worth idle) nor 8 warps at
    5 groups (3 of 8 idle); the kernel gets the constants it masks by."""
    dev = _dev("H100")
    cases = ((56, {1, 2, 4, 8}), (152, {1, 2, 4}), (440, {1, 2, 4, 8}), (24, {1, 4}),
             (48, {1, 2, 8}), (40, {1, 2}), (16, {1, 2}), (8, {1}))  # fmt: skip
    for c, want in cases:
        p = Conv2dGw8Params(n=8, c=c, h=14, w=14, stride_h=2, stride_w=2)
        for configs in (fp.configs, fp.dgrad_configs):
            assert {cfg.warps for cfg in configs(p, dev)} == want, (c, configs.__name__)
    p = Conv2dGw8Params(n=8, c=56, h=14, w=14)
    cfg = next(c for c in fp.configs(p, dev) if c.warps == 4)
    assert fp.grid(p, cfg)[0] == math.ceil(p.p / cfg.block_p) * math.ceil(p.q / cfg.block_q) * 2
    consts = fp.spec(p, cfg).specs
    assert (consts["GROUPS"].value, consts["RAGGED_GROUPS"].value) == (7, True)
    p = Conv2dGw8Params(n=8, c=24, h=14, w=14)
    cfg = next(c for c in fp.configs(p, dev) if c.warps == 4)
    assert fp.grid(p, cfg)[0] == math.ceil(p.p / cfg.block_p) * math.ceil(p.q / cfg.block_q)
    consts = fp.spec(p, cfg).specs
    assert (consts["GROUPS"].value, consts["RAGGED_GROUPS"].value) == (3, True)
    even = fp.spec(p, next(c for c in fp.configs(p, dev) if c.warps == 1)).specs
    assert even["RAGGED_GROUPS"].value is False


def test_kernel_defs_pickle_by_reference():
    """The conv families (dgrad's functions come from fprop's through one adapter) pickle as the
    registry's own objects, as a spawned worker would need them."""
    import pickle

    for name in ("conv2d_gw8_fprop", "conv2d_gw8_dgrad", "conv2d_gw8_wgrad"):
        kdef = KERNELS[name]
        assert pickle.loads(pickle.dumps(kdef)) == kdef, name
    assert fp.dgrad_configs.__name__ == "dgrad_configs"
    assert fp.dgrad_spec.__qualname__ == "dgrad_spec"


def test_config_space_is_real():
    p = Conv2dGw8Params(n=32, c=64, h=56, w=56)
    dev = _dev("H100")
    assert len(fp.configs(p, dev)) >= 20
    assert len(wg.configs(p, dev)) >= 20
    assert len({c.block_p for c in fp.configs(p, dev)}) >= 3


def test_wgrad_split_plan_covers_every_task_once():
    dev = _dev("H100")
    for p in EDGE_SHAPES + layer_shapes()[:10]:
        for cfg in sample(wg.configs(p, dev), 5):
            tasks, tps, splits = wg.split_plan(p, cfg, dev)
            assert tasks == p.n * wg.p_chunks(p, cfg)
            assert (splits - 1) * tps < tasks <= splits * tps  # every split non-empty
            assert wg.num_slices(p, cfg, dev) == splits * wg.q_tiles(p, cfg)


def test_stats_and_features():
    dev = _dev("H100")
    p = Conv2dGw8Params(n=32, c=64, h=56, w=56, has_bias=True)
    st = fp.stats(p)
    assert st.bytes_moved == 2 * (2 * 32 * 64 * 56 * 56) + 2 * 64 * 8 * 9 + 2 * 64
    assert st.flops == 2 * 32 * 56 * 56 * 64 * 8 * 9
    for kdef in (fp.FPROP, fp.DGRAD, wg.WGRAD):  # the reduction has no features (no model)
        cfg = kdef.heuristic(p, dev)
        feats = kdef.features(p, cfg, dev)
        assert feats and all(isinstance(v, (int, float)) for v in feats.values()), kdef.name
        assert list(feats) == list(kdef.features(p, kdef.configs(p, dev)[0], dev))


@pytest.mark.parametrize("device", DEVICES)
def test_feature_columns_are_the_features_of_each_config(device):
    """`feature_columns` (what a new shape's selection evaluates) takes a tile's terms once (fprop
    and dgrad from the config before it, wgrad per tile, splits and stages): over whole spaces in
    `configs`' order (stages, splits and carveout twins in a row), shuffled and one config alone,
    its columns are `features` config by config, bit for bit."""
    import random

    dev = _dev(device)
    rng = random.Random(0)
    layers = [*fp.examples(), *(fp.FPROP.sample_params(rng) for _ in range(12))]
    layers.append(Conv2dGw8Params(n=128, c=104, h=56, w=56, stride_h=2, stride_w=2))
    for kdef in (fp.FPROP, fp.DGRAD, wg.WGRAD):
        for p in layers:
            cfgs = kdef.configs(p, dev)
            shuffled = rng.sample(cfgs, len(cfgs))
            for subset in (cfgs, shuffled, cfgs[-1:]):
                rows = [kdef.features(p, c, dev) for c in subset]
                columns = kdef.feature_columns(p, subset, dev)
                assert list(columns) == list(rows[0]), (kdef.name, p)
                for name, column in columns.items():
                    want = [float(r[name]).hex() for r in rows]
                    assert [float(v).hex() for v in column] == want, (kdef.name, p, name)
    assert any(c.carveout != -1 for c in fp.DGRAD.configs(layers[-1], dev))  # twins were met
    names = list(wg.features(layers[0], wg.configs(layers[0], dev)[0], dev))
    empty = wg.feature_columns(layers[0], [], dev)  # every name, no rows
    assert {k: list(v) for k, v in empty.items()} == {k: [] for k in names}


def test_sector_waste_counts_the_sectors_each_group_blocks_slice_touches():
    """`sector_waste` (a fprop/dgrad feature) against the byte ranges themselves: over 64 NHWC
    pixels, the 32-byte sectors each group block's 16 B-per-warp channel slice touches, over the
    fewest it could."""
    dev = _dev("H100")
    for c in range(8, 400, 8):
        for warps in (1, 2, 4, 8):
            if not warps_allowed(c // 8, warps):
                continue
            touched = ideal = 0
            for pixel in range(64):
                for lo in range(0, 2 * c, 16 * warps):
                    first, end = pixel * 2 * c + lo, pixel * 2 * c + min(lo + 16 * warps, 2 * c)
                    touched += len({b // 32 for b in range(first, end)})
                    ideal += math.ceil((end - first) / 32)
            assert fp.sector_waste(c, warps) == touched / ideal, (c, warps)
    assert fp.sector_waste(72, 2) == 1.4  # every other pixel starts mid-sector
    assert {fp.sector_waste(c, 1) for c in range(8, 400, 8)} == {1.0}  # 16 B never straddles
    p = Conv2dGw8Params(n=64, c=72, h=112, w=112, stride_h=2, stride_w=2)
    cfg = Conv2dGw8Config(block_p=2, block_q=64, warps=2, stages=2)
    for kdef in (fp.FPROP, fp.DGRAD):
        assert kdef.features(p, cfg, dev)["sector_waste"] == 1.4


def test_spec_does_not_depend_on_batch():
    dev = _dev("H100")
    p = Conv2dGw8Params(n=8, c=64, h=28, w=28)
    for kdef in (fp.FPROP, fp.DGRAD, wg.WGRAD, rd.WGRAD_REDUCE):
        cfg = kdef.heuristic(p, dev)
        a, b = kdef.spec(p, cfg, dev), kdef.spec(p.with_batch(256), cfg, dev)
        assert a.title == b.title and a.smem == b.smem and set(a.specs) == set(b.specs)


# ---- NVRTC compiles -----------------------------------------------------------------------------

COMPILE_PARAMS = [
    Conv2dGw8Params(n=4, c=64, h=20, w=37, r=3, s=3, pad_h=1, pad_w=1, has_bias=True),
    Conv2dGw8Params(n=2, c=24, h=9, w=7, r=7, s=5, pad_h=3, pad_w=2, dtype="bfloat16"),
    Conv2dGw8Params(n=1, c=8, h=5, w=70, r=1, s=2, pad_h=0, pad_w=0),
    # stride 2 (fprop; dgrad on dy dilated by 2; wgrad), odd and even sizes
    Conv2dGw8Params(
        n=3, c=24, h=15, w=16, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2, has_bias=True
    ),
    # a channels_last float32 weight (a channels_last model under autocast)
    Conv2dGw8Params(
        n=3,
        c=32,
        h=11,
        w=13,
        r=5,
        s=3,
        pad_h=2,
        pad_w=1,
        has_bias=True,
        wdtype="float32",
        weight_cl=True,
    ),
]
KDEFS = (fp.FPROP, fp.DGRAD, wg.WGRAD, rd.WGRAD_REDUCE)
_PER_KERNEL = 2  # sampled configs per (params, kernel, arch) in CI


def _jobs(limit: int | None) -> list[tuple]:
    jobs = []
    for p in COMPILE_PARAMS:
        for kdef in KDEFS:
            cfgs = kdef.configs(p, _dev("H100"))
            for cfg in sample(cfgs, limit, seed=zlib.crc32(kdef.name.encode()) % 1000):
                jobs.append((kdef, p, cfg))
    return jobs


def _compile(kdef, p, cfg, arch: str) -> bytes:
    from spio.kernels.loader import compile_spec

    # The device of the arch: on sm_90 fprop/dgrad load their input rows with TMA (tma_rows).
    return compile_spec(kdef.spec(p, cfg, known_device(arch)), arch)


def _assert_local_memory(image: bytes, what: str, allowed: int = 0) -> None:
    from spio.compiler import kernel_resources

    for name, res in kernel_resources(image).items():
        assert res.local_bytes <= allowed, (
            f"{what}: {name} uses {res.local_bytes} B of local memory (at most {allowed})"
        )


# ptxas keeps a few scalars on the stack in some configs of the space (8 B at C32 3x3 4 warps 2
# stages, 8-16 B at some C24/C48 CTAs spanning every group: docs/ops/conv2d_gw8.md, "Fortieth
# session"); a ring or slot array demoted to local memory would take far more.
SAMPLED_LOCAL_BYTES = 16


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("job", range(len(COMPILE_PARAMS) * len(KDEFS) * _PER_KERNEL))
def test_sampled_configs_compile(arch, job):
    jobs = _jobs(_PER_KERNEL)
    if job >= len(jobs):
        pytest.skip(f"only {len(jobs)} sampled compile jobs")
    kdef, p, cfg = jobs[job]
    image = _compile(kdef, p, cfg, arch)
    assert image[:4] == b"\x7fELF"
    _assert_local_memory(image, f"{kdef.name} {p} {cfg} {arch}", SAMPLED_LOCAL_BYTES)


# The stride-2 group convs of regnetx_002 / regnety_004 (batch 256 / 128), and a 7x7 one.
STRIDED_LAYERS = [
    Conv2dGw8Params(n=256, c=24, h=112, w=112, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=128, c=104, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=256, c=368, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    Conv2dGw8Params(n=32, c=64, h=28, w=28, r=7, s=7, pad_h=3, pad_w=3, stride_h=2, stride_w=2),
]


@pytest.mark.parametrize("kdef", KDEFS, ids=lambda k: k.name)
def test_heuristic_configs_of_strided_layers_compile_without_spills(kdef):
    for p in STRIDED_LAYERS:
        cfg = kdef.heuristic(p, _dev("H100"))
        _assert_local_memory(_compile(kdef, p, cfg, "sm_90"), f"{kdef.name} {p} {cfg}")


@pytest.mark.parametrize("kdef", KDEFS, ids=lambda k: k.name)
def test_heuristic_configs_of_real_layers_compile_without_spills(kdef):
    shapes = sample(layer_shapes(), 2, seed=7)
    for p in shapes:
        cfg = kdef.heuristic(p, _dev("H100"))
        _assert_local_memory(_compile(kdef, p, cfg, "sm_90"), f"{kdef.name} {p} {cfg}")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_config_compiles(arch):
    from spio.kernels.loader import compile_specs

    dev = known_device(arch)  # on sm_90 fprop/dgrad load their input rows with TMA (tma_rows)
    images = compile_specs([kdef.spec(p, cfg, dev) for kdef, p, cfg in _jobs(None)], arch)
    assert all(img[:4] == b"\x7fELF" for img in images)


def test_sampled_params_always_have_configs():
    import random

    rng = random.Random(0)
    for _ in range(200):
        p = fp.FPROP.sample_params(rng)
        for kdef in KDEFS:
            assert kdef.configs(p, _dev("A100")), f"{kdef.name}: no config for {p}"
    # The reduction is timed inside the wgrad runner; its CTA size is a function of the slices.
    assert all(k.make_runner is not None for k in (fp.FPROP, fp.DGRAD, wg.WGRAD))
    assert rd.WGRAD_REDUCE.make_runner is None and rd.WGRAD_REDUCE.sample_params is None


def test_reduce_config_for_slices():
    """Each warp sums at most UNROLL slices while 32 warps suffice; never fewer than 4 warps."""
    for slices in range(1, 600):
        cfg = rd.config_for(slices)
        assert cfg in rd.reduce_configs(None, None)
        per_warp = -(-slices // rd.parts(cfg))
        assert per_warp <= rd.UNROLL or cfg.threads == 1024, slices
        smaller = [t for t in REDUCE_THREADS if t < cfg.threads]
        assert not smaller or -(-slices // (smaller[-1] // 32)) > rd.UNROLL, slices
    with pytest.raises(ValueError, match="slices must be >= 1"):
        rd.config_for(0)


def test_wgrad_launch_rejects_unaligned_partial():
    p = Conv2dGw8Params(n=1, c=8, h=4, w=4)
    dev = _dev("H100")
    cfg = wg.heuristic(p, dev)
    buf = torch.empty(wg.num_slices(p, cfg, dev) * 8 * 8 * 9 + 1)
    with pytest.raises(ValueError, match="16-byte aligned"):
        wg.launch(None, p, cfg, dev, buf[1:], buf, buf, buf, 0)


def test_tma_rows_rule_and_variants():
    """Which fprop/dgrad variants load their input rows by TMA (`tma_rows`): sm_90, 3x3, 2+ warps,
    one-image tiles, not dilated along W. Those take the tensor map (signature 't'), a shared
    memory layout swizzled by pixel (TMA's WARPS*16-byte swizzle) whose stages are whole swizzle
    periods, and the alignment slack and one barrier per stage; the rest are unchanged."""
    h100, a100 = _dev("H100"), _dev("A100")
    p = Conv2dGw8Params(n=4, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
    cfg = Conv2dGw8Config(block_p=8, block_q=32, warps=8, stages=4)
    assert fp.tma_rows(p, cfg, h100)
    assert not fp.tma_rows(p, cfg, a100)  # no TMA before sm_90
    assert not fp.tma_rows(p, cfg, None)
    assert not fp.tma_rows(p, replace(cfg, warps=1), h100)  # a 16-byte box streams worse
    assert not fp.tma_rows(replace(p, r=7, s=7, pad_h=3, pad_w=3), cfg, h100)  # 7x7 lost
    small = Conv2dGw8Params(n=4, c=64, h=7, w=7, r=3, s=3, pad_h=1, pad_w=1)
    assert not fp.tma_rows(small, replace(cfg, block_p=7, block_q=8), h100)  # two images
    strided = replace(p, stride_h=2, stride_w=2)
    assert fp.tma_rows(strided, cfg, h100)  # the forward of a stride-2 layer: rows as they are
    assert not fp.tma_rows(strided.dgrad_as_fprop(), cfg, h100)  # dy dilated along W
    spec = fp.FPROP.spec(p, cfg, h100)
    assert spec.signature == "ppppit" and fp.FPROP.spec(p, cfg, a100).signature == "ppppi"
    stage_w = fp.stage_w(p, cfg, h100)
    assert stage_w % 8 == 0 and stage_w >= fp.tile_w(p, cfg) == 34
    assert fp.smem_bytes(p, cfg, h100) == (
        128 * 8 + cfg.stages * 8 * stage_w * 16 + fp.smem_bytes(p, cfg) - cfg.stages * 8 * 34 * 16
        + 8 * cfg.stages
    )  # fmt: skip
    assert fp.tma_swizzle(cfg) == 128 and fp.tma_swizzle(replace(cfg, warps=2)) == 32
    assert fp.features(p, cfg, h100)["tma_rows"] == 1.0
    assert fp.features(p, replace(cfg, warps=1), h100)["tma_rows"] == 0.0


def test_carveout_variants_only_where_the_carveout_holds_fewer_ctas():
    """A strided layer's dgrad space offers, right after a cp.async config, its variant at each
    of CARVEOUT_CHOICES that holds at most CARVEOUT_MAX_SHARE of its CTAs; fprop and stride-1
    spaces have none. The variant shares its twin's cubin (same title and header) and differs in
    the loaded function's carveout and in dgrad's two carveout features."""
    h100 = _dev("H100")
    p = Conv2dGw8Params(
        n=64, c=72, h=112, w=112, r=3, s=3, pad_h=1, pad_w=1, has_bias=True, stride_h=2, stride_w=2
    )
    q = p.dgrad_as_fprop()
    cfgs = fp.DGRAD.configs(p, h100)
    variants = [i for i, c in enumerate(cfgs) if c.carveout != -1]
    assert variants and len(variants) < len(cfgs) - len(variants)
    for i in variants:
        cfg, twin = cfgs[i], cfgs[i - 1]
        assert cfg.carveout in fp.CARVEOUT_CHOICES and twin == replace(cfg, carveout=-1)
        assert not fp.tma_rows(q, cfg, h100)
        held, most = (
            fp.carveout_ctas(q, cfg, h100, cfg.carveout),
            fp.carveout_ctas(q, cfg, h100, -1),
        )
        assert held <= fp.CARVEOUT_MAX_SHARE * most
        a, b = fp.DGRAD.spec(p, cfg, h100), fp.DGRAD.spec(p, twin, h100)
        assert (a.title, a.specs.keys(), a.smem) == (b.title, b.specs.keys(), b.smem)
        assert (a.carveout, b.carveout) == (cfg.carveout, -1)
        fa, fb = fp.DGRAD.features(p, cfg, h100), fp.DGRAD.features(p, twin, h100)
        assert (fa["carveout"], fb["carveout"]) == (cfg.carveout, 100.0)
        assert {k: v for k, v in fa.items() if k != "carveout"} == {
            k: v for k, v in fb.items() if k != "carveout"
        }
    # Twins the carveout leaves as many CTAs (here: small shared memory, few CTAs) get none.
    lone = [c for c in cfgs if c.carveout == -1 and replace(c, carveout=50) not in cfgs]
    assert lone and all(
        fp.carveout_ctas(q, replace(c, carveout=50), h100, 50)
        > fp.CARVEOUT_MAX_SHARE * fp.carveout_ctas(q, c, h100, -1)
        for c in lone
        if not fp.tma_rows(q, c, h100)
    )
    assert all(c.carveout == -1 for c in fp.FPROP.configs(p, h100))
    stride1 = replace(p, stride_h=1, stride_w=1)
    assert all(c.carveout == -1 for c in fp.DGRAD.configs(stride1, h100))
    # to_dict leaves the field out at its default: rows written before it existed still match.
    assert "carveout" not in to_dict(cfgs[0]) and to_dict(cfgs[variants[0]])["carveout"] == 50
    assert repr(cfgs[variants[0]]).endswith(", carveout=50)")
    assert "carveout" not in repr(cfgs[0]) and "carveout" not in fp.FPROP.features(p, cfgs[0], h100)


@pytest.mark.parametrize("driver", [(13, 0), (12, 8), (12, 6), None])
def test_launches_carry_the_carveout_on_drivers_that_know_it(monkeypatch, driver):
    import spio.cuda
    from spio.kernels import loader

    bound = []

    class FakeFunction:
        num_regs = 64

        def bind(self, grid, block, smem, *, pdl, carveout):
            bound.append(carveout)

    class FakeModule:
        @staticmethod
        def load(image):
            return SimpleNamespace(function=lambda entry, signature: FakeFunction())

    monkeypatch.setattr(spio.cuda, "Module", FakeModule)
    monkeypatch.setattr(spio.cuda, "driver_version", lambda: driver)
    monkeypatch.setattr(loader, "compile_spec", lambda spec, arch: b"cubin")
    monkeypatch.setattr(loader, "programmatic_launch", lambda arch: False)
    p = Conv2dGw8Params(n=2, c=16, h=8, w=8, stride_h=2, stride_w=2)
    cfg = Conv2dGw8Config(block_p=4, block_q=16, warps=1, stages=2)
    for c in (cfg, replace(cfg, carveout=50)):
        loader.load_spec(fp.DGRAD.spec(p, c, _dev("H100")), "sm_90").bind((1, 1, 1))
    knows = driver is not None and driver >= loader.CARVEOUT_MIN_DRIVER
    assert bound == [-1, 50 if knows else -1]


def test_tma_launch_passes_the_input_map(monkeypatch):
    """FpropLaunch / DgradLaunch of a TMA-rows variant pass the input's tensor map (x as (N*H
    rows, W, C), a box of one row x TILE_W pixels x the CTA's channels, swizzled by WARPS*16 B),
    encoded once per address; a cp.async variant launches without one."""
    from spio.cuda import driver, tensor_map

    encoded: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled",
                        lambda *a: encoded.append(a) or bytes([len(encoded)]) * 128)  # fmt: skip
    h100 = _dev("H100")
    p = Conv2dGw8Params(n=3, c=64, h=20, w=30, r=3, s=3, pad_h=1, pad_w=1, dtype="bfloat16")
    cfg = Conv2dGw8Config(block_p=8, block_q=16, warps=4, stages=3)

    class Tensor:
        def __init__(self, address: int) -> None:
            self.address = address

        def data_ptr(self) -> int:
            return self.address

    class Kernel:
        def __init__(self, spec) -> None:
            self.spec = spec
            self.launched: list = []

        def bind(self, grid):
            return lambda args, stream: self.launched.append(args)

    fk = Kernel(fp.FPROP.spec(p, cfg, h100))
    run = fp.FpropLaunch(fk, p, cfg)
    out, x, w = object(), Tensor(0x10000), object()
    run(out, x, w, None, 0)
    run(out, x, w, None, 0)
    assert len(encoded) == 1 and fk.launched[0] == (out, x, w, w, 3, bytes([1]) * 128)
    want: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *a: want.append(a) or bytes(128))
    tensor_map.tiled(0x10000, "bfloat16", (3 * 20, 30, 64), (30 * 64, 64, 1), (1, 18, 32),
                     swizzle=64)  # fmt: skip
    assert encoded == want

    strided = replace(p, stride_h=2, stride_w=1)  # dgrad: dy (3, 64, 10, 30) dilated along H
    dk = Kernel(fp.DGRAD.spec(strided, cfg, h100))
    assert dk.spec.signature.endswith("t")
    monkeypatch.setattr(driver, "tensor_map_encode_tiled",
                        lambda *a: encoded.append(a) or bytes(128))  # fmt: skip
    fp.DgradLaunch(dk, strided, cfg)(object(), Tensor(0x20000), w, 0)
    q = strided.dgrad_as_fprop()
    assert encoded[-1][2] == (64, 30, 3 * q.h) and q.h == 10

    one_warp = replace(cfg, warps=1)
    ck = Kernel(fp.FPROP.spec(p, one_warp, h100))
    fp.FpropLaunch(ck, p, one_warp)(out, x, w, None, 0)
    assert ck.launched == [(out, x, w, w, 3)]
