"""The backward's fused kernel (the wgrad kernel's FUSE_DGRAD variant, `wgrad.WGRAD_DGRAD`): when
a layer can and should fuse (`fusable`, `may_fuse`, `fuses`), its heuristic, its spec, and that
it compiles (sampled configs, both archs, no local memory). Its results are checked on a GPU
(tests/gpu/kernels/test_conv2d_gw8_fused.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spio.cuda import known_device
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params, Conv2dGw8WgradConfig
from spio.testing import sample


def _layer(n, c, hw, k=3, pad=1, stride=1, **kw):
    return Conv2dGw8Params(
        n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=pad, pad_w=pad, stride_h=stride,
        stride_w=stride, **kw,
    )  # fmt: skip


def test_fusable_needs_one_column_tile_with_zero_columns_for_the_halo():
    p = _layer(8, 64, 28)
    assert wg.fusable(p, Conv2dGw8WgradConfig(28, 32, 4, 3, 2))
    assert wg.fusable(p, Conv2dGw8WgradConfig(14, 32, 4, 3, 2))  # two row chunks
    # row chunks of a 1x1 kernel at stride 2 leave rows between them: not fused
    one = _layer(8, 64, 27, k=1, pad=0, stride=2)
    assert wg.fusable(one, Conv2dGw8WgradConfig(14, 16, 4, 3, 2))
    assert not wg.fusable(one, Conv2dGw8WgradConfig(7, 16, 4, 3, 2))
    assert not wg.fusable(p, Conv2dGw8WgradConfig(28, 16, 4, 3, 2))  # two column tiles
    assert not wg.fusable(_layer(8, 64, 32), Conv2dGw8WgradConfig(32, 32, 4, 3, 2))  # no zero col
    # 'valid' padding: Q = 26, dy columns -2..27 read, 2 wrap onto 30, 31
    assert wg.fusable(_layer(8, 64, 28, pad=0), Conv2dGw8WgradConfig(26, 32, 4, 3, 2))
    assert not wg.fusable(_layer(8, 64, 33, pad=0), Conv2dGw8WgradConfig(31, 32, 4, 3, 2))
    # stride 2: Q = 14, dy columns -1..14 read
    strided = _layer(8, 64, 28, stride=2)
    assert wg.fusable(strided, Conv2dGw8WgradConfig(14, 16, 4, 3, 2))
    assert not wg.fusable(_layer(8, 64, 32, stride=2), Conv2dGw8WgradConfig(16, 16, 4, 3, 2))
    # a stream that stops before the last input row (stride 2, no padding, even H): not fused
    assert not wg.fusable(_layer(8, 64, 28, pad=0, stride=2), Conv2dGw8WgradConfig(13, 16, 4, 3, 2))
    with pytest.raises(ValueError, match="cannot fuse"):
        wg.spec(p, Conv2dGw8WgradConfig(28, 16, 4, 3, 2), known_device("H100"), fuse_dgrad=True)


def test_the_backward_fuses_where_the_measured_rule_says():
    dev = known_device("H100")
    # row chunks (a model's pick) fuse at stride 1 at any size, at stride 2 up to
    # FUSE_MAX_ROWS input rows
    for p in (_layer(32, 64, 56), _layer(32, 24, 56, stride=2), _layer(1, 8, 112)):
        assert wg.may_fuse(p, dev)
        chunks = [c for c in wg.fused_configs(p, dev) if c.block_p < p.p]
        assert chunks and all(wg.fuses(p, c, dev) for c in chunks)
    strided = _layer(128, 48, 112, stride=2)
    assert not wg.may_fuse(strided, dev)
    assert not any(wg.fuses(strided, c, dev) for c in wg.fused_configs(strided, dev))
    # whole images, at most FUSE_SHORT_ROWS output rows: fused at any batch, stride 1 or 2
    for p in (_layer(1, 104, 14), _layer(1, 104, 28, stride=2)):
        assert wg.may_fuse(p, dev)
        assert wg.fuses(p, Conv2dGw8WgradConfig(14, 16, 1, 3, 4), dev)
    # whole images up to FUSE_MID_ROWS input rows: where the images' groups give every SM
    # FUSE_MIN_TASKS_PER_SM (132 SMs), whatever the config's warps
    eight = Conv2dGw8WgradConfig(28, 32, 8, 3, 1)
    assert wg.fuses(_layer(128, 104, 28), eight, dev)  # 1664 groups; 256 tasks of 8 warps
    assert wg.fuses(_layer(40, 56, 28), eight, dev)
    assert not wg.fuses(_layer(32, 56, 28), eight, dev)  # 224 groups < 264
    # whole images up to FUSE_MAX_ROWS input rows: where the config's tasks do
    for stride in (1, 2):
        wide = Conv2dGw8WgradConfig(56 // stride, 64 // stride, 4, 3, 2)
        assert not wg.fuses(_layer(128, 64, 56, stride=stride), wide, dev)  # 256 tasks < 264
        assert wg.fuses(_layer(256, 64, 56, stride=stride), wide, dev)
        assert wg.fuses(_layer(128, 64, 56, stride=stride), replace(wide, warps=2), dev)
    # whole images of more than FUSE_MAX_ROWS input rows: never
    assert not wg.fuses(_layer(256, 64, 112, stride=2), Conv2dGw8WgradConfig(56, 64, 1, 3, 4), dev)
    # only 3x3 and smaller were timed
    assert wg.fusable(_layer(8, 64, 28, k=5, pad=2), Conv2dGw8WgradConfig(28, 32, 4, 3, 2))
    assert not wg.may_fuse(_layer(8, 64, 28, k=5, pad=2), dev)
    one_by_five = Conv2dGw8Params(n=128, c=104, h=28, w=28, r=1, s=5, pad_h=0, pad_w=2)
    assert wg.fusable(one_by_five, Conv2dGw8WgradConfig(28, 32, 1, 3, 4))
    assert not wg.may_fuse(one_by_five, dev)
    # strides (1, 2) and (2, 1): the kernel takes them, untimed
    wide_only = Conv2dGw8Params(n=8, c=64, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1, stride_w=2)
    assert wg.fused_configs(wide_only, dev) and not wg.may_fuse(wide_only, dev)
    # a layer no config can fuse: two column tiles at least (Q = 130 > 128)
    assert not wg.fused_configs(_layer(256, 64, 130, pad=0), dev)
    assert not wg.may_fuse(_layer(256, 64, 130, pad=0), dev)


@pytest.mark.parametrize("p", [
    _layer(128, 104, 28), _layer(256, 24, 56), _layer(128, 440, 7), _layer(256, 56, 56, stride=2),
    _layer(1, 8, 5), Conv2dGw8Params(n=4, c=32, h=11, w=10, r=3, s=1, pad_h=1, pad_w=0),
], ids=str)  # fmt: skip
def test_fused_heuristic_is_a_fused_config_near_the_wgrad_heuristic(p):
    for arch in ("H100", "sm_80"):
        dev = known_device(arch)
        cfg = wg.fused_heuristic(p, dev)
        assert cfg in wg.fused_configs(p, dev) and cfg.block_p == p.p
        base = replace(wg.heuristic(p, dev), block_p=p.p)
        if base in wg.fused_configs(p, dev, chunked=False):
            assert cfg == base
        assert wg.WGRAD_DGRAD.heuristic(p, dev) == cfg


def test_fused_heuristic_names_a_layer_that_cannot_fuse():
    with pytest.raises(ValueError, match="no fused config"):
        wg.fused_heuristic(_layer(256, 64, 130, pad=0), known_device("H100"))


def test_fused_spec_passes_dx_and_the_weight():
    dev = known_device("H100")
    p = _layer(1, 64, 28, wdtype="float32", weight_cl=True)
    cfg = Conv2dGw8WgradConfig(28, 32, 4, 3, 2)
    plain, fused = wg.spec(p, cfg, dev), wg.fused_spec(p, cfg, dev)
    assert fused.signature == plain.signature + "pp"
    assert fused.specs["FUSE_DGRAD"].value and not plain.specs["FUSE_DGRAD"].value
    assert wg.WGRAD_DGRAD.compiled(p.with_batch(64)) == p  # the weight's dtype stays
    assert wg.WGRAD_DGRAD.derived_from is None  # selected and tuned as a family of its own
    assert wg.WGRAD_DGRAD.selection(p.with_batch(100)) == wg.WGRAD.selection(p.with_batch(100))


FUSED_LAYERS = [
    *wg.fused_examples(),
    _layer(2, 24, 56),  # RegNet-like: 3 groups, 1-warp CTAs
    _layer(2, 104, 28, has_bias=True, dtype="bfloat16"),  # 13 groups: idle warps
    _layer(2, 440, 7, wdtype="float32", weight_cl=True),
    Conv2dGw8Params(n=2, c=16, h=6, w=6, r=1, s=1, pad_h=0, pad_w=0),
    Conv2dGw8Params(n=2, c=32, h=11, w=10, r=3, s=1, pad_h=1, pad_w=0),
    _layer(2, 24, 112, stride=2),
    _layer(2, 440, 14, stride=2, has_bias=True),
    Conv2dGw8Params(n=2, c=16, h=9, w=11, r=1, s=1, pad_h=0, pad_w=0, stride_h=2, stride_w=2),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("p", FUSED_LAYERS, ids=str)
def test_sampled_fused_configs_compile_without_local_memory(p, arch):
    from spio.compiler import kernel_resources
    from spio.kernels.loader import compile_spec

    dev = known_device(arch)
    cfgs = wg.fused_configs(p, dev)
    assert cfgs, f"{p}: no fused config"
    assert all(wg.fusable(p, c) for c in cfgs)
    for cfg in sample(cfgs, 2, seed=p.c):
        image = compile_spec(wg.fused_spec(wg.fused_variant(p), cfg, dev), arch)
        # Tasks of more than MAX_TASK_ROWS rows run the chunked row loop, where ptxas keeps a
        # few scalars on the stack (32 B at C104 28^2, 8 warps, sm_90: that kernel was among
        # those timed 1.33x faster than dgrad + wgrad); so do row chunks' tasks, whose dy halo
        # and first-chunk tests are run-time (8-40 B at 14 of 60 sampled sm_90 configs of
        # three layers; the collection timed them as they are). Unrolled whole images keep none.
        whole = cfg.block_p == p.p and wg.task_rows(p, cfg) <= wg.MAX_TASK_ROWS
        allowed = 0 if whole else 64
        for name, res in kernel_resources(image).items():
            assert res.local_bytes <= allowed, f"{name} {p} {cfg} {arch}: {res.local_bytes} B"


def _kernel_rows(p, cfg, images=2, tasks_per_split=None):
    """conv2d_gw8_wgrad.cu's row bookkeeping under FUSE_DGRAD, mirrored with its dy ring: the
    CTAs' streams of task rows (task t: image t // P_CHUNKS, chunk c = t % P_CHUNKS, rows h0 +
    i for i < TILE_H, h0 = SH c BLOCK_P - PAD_H), the copy of stream position k + STAGES - 1
    at step k into dy slot (k + STAGES - 1) % DY_ROWS, and the reads of ds[r] = slot (k - r) %
    DY_ROWS. Returns, per (image, row), the (dy row, filter row) terms its dx sums (each row
    written by one task), the weight gradient's (image, dy row, filter row) pairs and the bias
    gradient's (image, dy row) rows; asserts that every slot read holds the dy row meant."""
    sh, r_, pad = p.stride_h, p.r, p.pad_h
    chunks, rows, ring = wg.p_chunks(p, cfg), wg.task_rows(p, cfg), wg.dy_rows(p, cfg)
    halo = (r_ - 1) // sh if chunks > 1 else 0
    last_rows = p.p - (chunks - 1) * cfg.block_p

    def task(t):
        p0 = t % chunks * cfg.block_p
        return t // chunks, p0, p0 * sh - pad

    def dy_inside(t, o, extra=0):  # the kernel's dy_row_inside (extra = 0) / dy_row_held
        return o < cfg.block_p + extra and (o < last_rows or task(t)[1] + o < p.p)

    dx, pairs, bias = {}, [], []
    tasks = images * chunks
    per = tasks_per_split or tasks
    for first in range(0, tasks, per):
        stream = [(t, i) for t in range(first, min(first + per, tasks)) for i in range(rows)]
        slots = [None] * ring

        def copy(k, stream=stream, slots=slots):
            if k < len(stream):
                t, i = stream[k]
                if i % sh == 0 and dy_inside(t, i // sh, halo):
                    slots[k % ring] = (task(t)[0], task(t)[1] + i // sh)

        for k in range(cfg.stages - 1):
            copy(k)
        for k, (t, i) in enumerate(stream):
            copy(k + cfg.stages - 1)
            image, p0, h0 = task(t)
            live = [r for r in range(r_) if i >= r and (i - r) % sh == 0]
            if not 0 <= h0 + i < p.h:  # padding: its dy row still joins the bias gradient
                if i % sh == 0 and dy_inside(t, i // sh):
                    bias.append(slots[k % ring])
                continue
            for r in live:
                if dy_inside(t, (i - r) // sh):
                    assert slots[(k - r) % ring] == (image, p0 + (i - r) // sh), (p, cfg, k, r)
                    pairs.append((image, p0 + (i - r) // sh, r))
                    bias += [slots[k % ring]] if r == 0 else []
            if chunks > 1 and i < r_ - sh and p0 != 0:
                continue  # the previous chunk's dx row
            assert (image, h0 + i) not in dx, f"{p} {cfg}: dx row {h0 + i} written twice"
            terms = set()
            for r in live:
                if dy_inside(t, (i - r) // sh, halo):
                    assert slots[(k - r) % ring] == (image, p0 + (i - r) // sh), (p, cfg, k, r)
                    terms.add((p0 + (i - r) // sh, r))
            dx[(image, h0 + i)] = terms
    return dx, pairs, bias


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("k, pad", [(1, 0), (3, 1), (3, 0), (5, 2)])
def test_row_chunks_write_every_dx_row_once_with_every_tap(k, pad, stride):
    """Where `fusable` takes a config (row chunks or whole images; one of each row tiling and
    stage count), every dx row of every image is written by one task, through every filter row
    that reaches it, and the weight and bias gradients sum each (dy row, filter row) pair and
    each dy row once, with every dy ring slot read holding the row meant, one task or several
    per CTA; at R < stride chunks leave rows no task streams, and `fusable` refuses them."""
    dev = known_device("H100")
    seen = 0
    for hw in (7, 12, 17, 28, 31, 56):
        p = _layer(2, 16, hw, k=k, pad=pad, stride=stride)
        want_dx = {(n, h): {((h + pad - t) // stride, t) for t in range(k)
                            if (h + pad - t) % stride == 0 and 0 <= (h + pad - t) // stride < p.p}
                   for n in range(2) for h in range(p.h)}  # fmt: skip
        want_pairs = sorted((n, o, t) for n in range(2) for o in range(p.p) for t in range(k)
                            if 0 <= o * stride + t - pad < p.h)  # fmt: skip
        want_bias = sorted((n, o) for n in range(2) for o in range(p.p))
        rows = {(c.block_p, c.stages): c for c in wg.fused_configs(p, dev, chunked=True)}
        for cfg in rows.values():
            for per in (1, None):
                dx, pairs, bias = _kernel_rows(p, cfg, tasks_per_split=per)
                assert dx == want_dx, f"{p} {cfg}"
                assert sorted(pairs) == want_pairs, f"{p} {cfg}"
                assert sorted(bias) == want_bias, f"{p} {cfg}"
            seen += cfg.block_p < p.p
        for bp in wg.block_p_choices(p):
            cfg = Conv2dGw8WgradConfig(bp, 64, 1, 3, 4)
            if bp < p.p and k < stride:
                assert not wg.fusable(p, cfg)
            elif wg.fusable(p, cfg):
                assert _kernel_rows(p, cfg)[0] == want_dx
    assert seen or k < stride


def test_where_the_backward_may_fuse_the_heuristic_has_a_config():
    """`may_fuse` asks for a whole-image config, the only kind `fused_heuristic` (GPUs without a
    model) picks, so selecting the fused config never fails where the op asks for one. A layer
    that fuses only in row chunks (3x3 'valid', stride 2, even H: a ragged last chunk reaches
    the input row a whole image's stream stops short of) runs dgrad + wgrad."""
    import random

    from spio.kernels.conv2d_gw8.tune import sample_params

    only_chunks = _layer(64, 64, 28, pad=0, stride=2)
    rng = random.Random(5)
    layers = [only_chunks] + [sample_params(rng) for _ in range(60)]
    for arch in ("H100", "sm_80"):
        dev = known_device(arch)
        assert wg.fused_configs(only_chunks, dev) and not wg.may_fuse(only_chunks, dev)
        for p in layers:
            if wg.may_fuse(p, dev):
                assert wg.fused_heuristic(p, dev) in wg.fused_configs(p, dev), p
