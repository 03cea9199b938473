"""conv2d_gw8 wgrad config space on the host: balanced row chunks, the narrow column tile, the
8-warp option kept out of the default space, the heuristic's task height, and NVRTC compiles of
the new options for sm_80 and sm_90 without local memory."""

from __future__ import annotations

import math

import pytest

from spio.cuda import known_device
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params, Conv2dGw8WgradConfig
from spio.testing import sample


def _layer(n: int, c: int, hw: int, k: int, **kw) -> Conv2dGw8Params:
    return Conv2dGw8Params(n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=k // 2, pad_w=k // 2, **kw)


@pytest.mark.parametrize("rows", [1, 5, 7, 9, 14, 28, 56, 57, 100, 224])
def test_block_p_choices_are_balanced(rows):
    p = Conv2dGw8Params(n=1, c=8, h=rows, w=4, r=1, s=1, pad_h=0, pad_w=0)
    choices = wg.block_p_choices(p)
    assert choices == sorted(set(choices)) and choices[-1] <= max(wg.BLOCK_P_CHOICES)
    for bp in choices:
        chunks = math.ceil(rows / bp)
        assert chunks * bp - rows < chunks, f"P={rows} block_p={bp}: a chunk is mostly empty"
    assert {bp for bp in wg.block_p_choices(_layer(1, 64, 56, 3))} == {4, 8, 14, 28}


def test_narrow_tile_only_for_narrow_rows():
    dev = known_device("H100")
    for hw, want in [(5, {8}), (7, {8}), (9, {8, 16}), (14, {8, 16}), (16, {8, 16})]:
        got = {c.block_q for c in wg.configs(_layer(2, 64, hw, 3), dev)}
        assert got == want, hw
    assert 8 not in {c.block_q for c in wg.configs(_layer(2, 64, 28, 3), dev)}
    assert wg.heuristic(_layer(8, 512, 7, 7), dev).block_q == 8


def test_eight_warps_by_default_only_with_tma_rows():
    """8-warp CTAs are in the default space only where they copy rows by TMA (sm_90, 3x3 and
    smaller); elsewhere only on request (WIDE_WARP_CHOICES)."""
    dev = known_device("H100")
    p = _layer(32, 64, 28, 3)
    eight = [c for c in wg.configs(p, dev) if c.warps == 8]
    assert eight and all(wg.tma_rows(p, c, dev) for c in eight)
    for other, q in ((known_device("sm_80"), p), (dev, _layer(32, 64, 28, 5))):
        assert {c.warps for c in wg.configs(q, other)} == {1, 2, 4}, other.name
        wide = wg.configs(q, other, warp_choices=wg.WIDE_WARP_CHOICES)
        assert {c.warps for c in wide} == {1, 2, 4, 8}
    wide = wg.configs(p, dev, warp_choices=wg.WIDE_WARP_CHOICES)
    assert {c.warps for c in wide} == {1, 2, 4, 8}
    assert not any(
        c.warps == 8 for c in wg.configs(_layer(1, 32, 28, 3), dev, wg.WIDE_WARP_CHOICES)
    )


def test_heuristic_prefers_tall_tasks_while_every_sm_gets_two_ctas():
    dev = known_device("H100")
    assert wg.heuristic(_layer(128, 64, 56, 3), dev).block_p == 28  # 256 tasks x 2 CTAs each
    assert wg.heuristic(_layer(32, 64, 56, 3), dev).block_p == 8
    assert wg.heuristic(_layer(1, 64, 56, 3), dev).block_p == 4  # too few either way: shortest
    for p in [_layer(n, c, hw, k) for n in (1, 8, 128) for c, hw, k in [(64, 56, 3), (256, 14, 3)]]:
        cfg = wg.heuristic(p, dev)
        tasks, _, _ = wg.split_plan(p, cfg, dev)
        ctas = tasks * wg.q_tiles(p, cfg) * (p.groups // cfg.warps)
        taller = [bp for bp in wg.block_p_choices(p) if bp > cfg.block_p]
        if cfg.block_p != min(wg.block_p_choices(p)):
            assert ctas >= 2 * dev.sm_count, f"{p} {cfg}"
        if taller:
            t = taller[0]
            assert p.n * math.ceil(p.p / t) * ctas // tasks < 2 * dev.sm_count, f"{p} {cfg}"


# Not 5x5: there ptxas aims at 80 registers for some configs (60 accumulators) and spills 8-16 B,
# before these changes too (5 of 90 sampled 5x5 configs on sm_90; 2 of 90 now).
NEW_OPTIONS = [
    (_layer(8, 512, 7, 7, has_bias=True), Conv2dGw8WgradConfig(7, 8, 8, 4, 1)),
    (_layer(8, 512, 7, 7, dtype="bfloat16"), Conv2dGw8WgradConfig(4, 8, 2, 8, 4)),
    (_layer(8, 64, 56, 3, has_bias=True), Conv2dGw8WgradConfig(28, 64, 8, 3, 2)),
    (_layer(8, 64, 14, 3), Conv2dGw8WgradConfig(14, 8, 8, 6, 1)),
    (Conv2dGw8Params(n=2, c=24, h=9, w=5, r=7, s=3, pad_h=3, pad_w=1), None),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", range(len(NEW_OPTIONS)))
def test_new_options_compile_without_local_memory(arch, case):
    from spio.compiler import kernel_resources
    from spio.kernels.loader import compile_spec

    dev = known_device(arch)  # on sm_90, 2+-warp 3x3 configs copy their rows with TMA
    p, cfg = NEW_OPTIONS[case]
    wide = wg.configs(p, dev, warp_choices=wg.WIDE_WARP_CHOICES)
    cfg = cfg or sample([c for c in wide if c.block_q == 8], 1, seed=case)[0]
    assert cfg in wide, f"{p} {cfg}"
    image = compile_spec(wg.spec(p, cfg, dev), arch)
    for name, res in kernel_resources(image).items():
        assert res.local_bytes == 0, f"{p} {cfg} {arch}: {name} spills {res.local_bytes} B"


def test_split_choices_give_4_to_32_warps_per_sm():
    assert wg.split_choices(1) == (4, 8, 16, 32)
    assert wg.split_choices(2) == (2, 4, 8, 16)
    assert wg.split_choices(4) == (1, 2, 4, 8)
    assert wg.split_choices(8) == (1, 2, 4)
    dev = known_device("H100")
    # 7 groups: 1 warp, 2 and 4 with idle warps, or 8 spanning every group (TMA rows)
    cfgs = wg.configs(_layer(8, 56, 56, 3), dev)
    assert {c.warps for c in cfgs} == {1, 2, 4, 8}
    assert all(4 <= c.warps * c.splits_per_sm <= 32 for c in cfgs)


def test_heuristic_aims_at_16_warps_per_sm_while_partials_fit():
    """1-warp CTAs (odd group counts) get 16 splits per SM where the partials stay within the
    activation traffic; a layer whose partials would exceed it at any split count gets the
    space's fewest."""
    dev = known_device("H100")
    odd = Conv2dGw8Params(n=256, c=152, h=28, w=28, has_bias=True, stride_h=2, stride_w=2)
    cfg = wg.heuristic(odd, dev)
    assert cfg.warps == 1 and cfg.splits_per_sm == 16 and wg._partials_fit(odd, cfg, dev)
    heavy = Conv2dGw8Params(n=1, c=512, h=7, w=7, r=7, s=7, pad_h=3, pad_w=3)
    cfg = wg.heuristic(heavy, dev)
    assert cfg.splits_per_sm == min(wg.split_choices(cfg.warps))
    for n in (1, 8, 64, 256):  # the heuristic's config is always one of the space's
        for c in (8, 56, 64, 440, 1024):
            p = Conv2dGw8Params(n=n, c=c, h=14, w=14, has_bias=True)
            assert wg.heuristic(p, dev) in wg.configs(p, dev)


def test_heuristic_never_doubles_past_the_space(monkeypatch):
    """At the top of the space (1 warp, 32 splits) the deepening step must not ask for 64."""
    monkeypatch.setattr(wg, "HEURISTIC_WARPS_PER_SM", 32)
    dev = known_device("H100")
    for c in (8, 56, 440):  # N = 1: too few bytes in flight at any depth, so it tries more
        p = Conv2dGw8Params(n=1, c=c, h=14, w=14, has_bias=True)
        assert wg.heuristic(p, dev) in wg.configs(p, dev)


def test_idle_warp_configs_in_the_space_and_compile_without_local_memory():
    """Odd group counts (C440: 55 groups, C56: 7) get 2- and 4-warp wgrad CTAs (and 8-warp ones
    with TMA rows) in the default space, none with `with_idle_warps=False`; those variants
    (RAGGED_GROUPS) compile for sm_80
    and sm_90 with no local memory (TMA rows on sm_90: a ragged block's box reads zeros past C),
    and the grid covers every group with ceil(groups / warps) group blocks."""
    from spio.compiler import kernel_resources
    from spio.kernels.loader import compile_specs

    dev = known_device("H100")
    p = _layer(128, 440, 14, 3, stride_h=2, stride_w=2, has_bias=True)
    assert {c.warps for c in wg.configs(p, dev, with_idle_warps=False)} == {1}
    ragged = [c for c in wg.configs(p, dev) if c.warps > 1]
    assert {c.warps for c in ragged} == {2, 4, 8}  # 8: with TMA rows
    assert wg.grid(p, ragged[0], dev)[0] == wg.q_tiles(p, ragged[0]) * -(-55 // ragged[0].warps)
    cfgs = sample(ragged, 3, seed=1) + sample(
        [c for c in wg.configs(_layer(8, 56, 28, 3), dev, with_idle_warps=True) if c.warps > 1],
        3,
        seed=1,
    )
    layers = [p] * 3 + [_layer(8, 56, 28, 3)] * 3
    for arch in ("sm_80", "sm_90"):  # on sm_90 the ragged 3x3 blocks copy rows with TMA
        specs = [wg.spec(q, c, known_device(arch)) for q, c in zip(layers, cfgs, strict=True)]
        for q, c, image in zip(layers, cfgs, compile_specs(specs, arch), strict=True):
            for res in kernel_resources(image).values():
                assert res.local_bytes == 0, f"{q} {c} {arch}: {res}"


def test_tensor_size_limit_of_32_bit_offsets():
    """The kernel addresses x and dy as 32-bit offsets in 16-byte units: 2^32 units pass, one
    image more is refused with a clear error (never a wrapped address)."""
    wg.check_tensor_size(_layer(8192, 64, 256, 3))  # 8192 images of 256 * 256 * 8 units: 2^32
    with pytest.raises(ValueError, match="32-bit"):
        wg.check_tensor_size(_layer(8193, 64, 256, 3))
