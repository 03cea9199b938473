"""conv2d_gw8's performance-model data knows strided layers: the features of a stride-2 layer (and
of its dgrad, the fprop kernel on dy dilated by the stride) differ from the stride-1 layer's of the
same shape in every family, sampled layers include valid stride-2 ones, and a strided layer is
its own layer for the evaluation folds."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

import spio.kernels.conv2d_gw8.tune as tune
import spio.tune.evaluate as ev
from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.tune.dataset import Sample
from spio.tune.features import features, to_dict

FAMILIES = ("conv2d_gw8_fprop", "conv2d_gw8_dgrad", "conv2d_gw8_wgrad")
STRIDE_KEYS = ["stride_h", "stride_w", "dilate_h", "dilate_w"]
LAYERS = [
    Conv2dGw8Params(n=32, c=64, h=56, w=56),
    Conv2dGw8Params(n=8, c=240, h=57, w=57, has_bias=True),  # odd: dgrad's end padding differs
    Conv2dGw8Params(n=4, c=128, h=28, w=28, r=5, s=5, pad_h=2, pad_w=2, dtype="bfloat16"),
    Conv2dGw8Params(n=16, c=96, h=14, w=14, r=1, s=1, pad_h=0, pad_w=0),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer", LAYERS, ids=lambda p: f"{p.c}x{p.h}x{p.w}k{p.r}")
def test_stride_2_features_differ_from_stride_1(family, layer):
    kdef, dev = KERNELS[family], known_device("H100")
    strided = replace(layer, stride_h=2, stride_w=2)
    one, two = kdef.configs(layer, dev), kdef.configs(strided, dev)
    assert one and two
    common = [c for c in two if c in set(one)]
    assert common, f"{family}: no config valid for both strides of {layer}"
    for cfg in common:
        f1, f2 = features(kdef, layer, cfg, dev), features(kdef, strided, cfg, dev)
        assert list(f1) == list(f2), "feature names depend on the stride"
        assert f1 != f2
        # The stride itself is a feature (dgrad: the dilation of dy), after the layer's others.
        names = list(f1)
        assert names[names.index("bf16") + 1 : names.index("bf16") + 5] == STRIDE_KEYS
        assert [f1[k] for k in STRIDE_KEYS] == [1.0] * 4
        want = [1.0, 1.0, 2.0, 2.0] if family == "conv2d_gw8_dgrad" else [2.0, 2.0, 1.0, 1.0]
        assert [f2[k] for k in STRIDE_KEYS] == want


@pytest.mark.parametrize("family", FAMILIES)
def test_halo_ratio_counts_the_strided_input_tile(family):
    kdef, dev = KERNELS[family], known_device("H100")
    layer = LAYERS[0]
    strided = replace(layer, stride_h=2, stride_w=2)
    cfg = next(c for c in kdef.configs(strided, dev) if c in set(kdef.configs(layer, dev)))
    h1 = features(kdef, layer, cfg, dev)["halo_ratio"]
    h2 = features(kdef, strided, cfg, dev)["halo_ratio"]
    bp, bq = cfg.block_p, cfg.block_q
    if family == "conv2d_gw8_dgrad":  # stride 1 on dy dilated by 2: the same tile
        assert h1 == h2
    elif family == "conv2d_gw8_fprop":
        assert h1 == (bp + 2) * (bq + 2) / (bp * bq)
        assert h2 == (2 * bp + 1) * (2 * bq + 1) / (bp * bq)
    else:  # x rows per dy row times x columns per dy column (3x3: tile_w = (BQ - 1) * SW + 4)
        assert h1 == (bp + 2) / bp * (bq + 3) / bq
        assert h2 == (2 * bp + 1) / bp * (2 * bq + 2) / bq


def test_sampled_layers_include_valid_stride_2_ones():
    dev = known_device("H100")
    draws = [tune.sample_params(random.Random(seed)) for seed in range(400)]
    strided = [p for p in draws if p.stride == (2, 2)]
    assert {p.stride for p in draws} == {(1, 1), (2, 2)}
    assert 0.2 < len(strided) / len(draws) < 0.4
    assert any(p.h % 2 for p in strided)
    assert max(p.h for p in strided) <= tune.MAX_STRIDED_INPUT
    for p in draws[:150]:
        for family in FAMILIES:
            assert KERNELS[family].configs(p, dev), f"{family}: no config for {p}"


def test_real_stride_2_layers_double_the_stage_input(monkeypatch):
    monkeypatch.setattr(tune, "REAL_PROB", 1.0)
    monkeypatch.setattr(tune, "STRIDE2_PROB", 1.0)
    real = {(p.c, p.h, p.w, p.r, p.s, p.pad_h, p.pad_w) for p in tune.layer_shapes()}
    doubled = 0
    for seed in range(300):
        p = tune.sample_params(random.Random(seed))
        assert p.stride == (2, 2) and p.h <= tune.MAX_STRIDED_INPUT
        rest = (p.r, p.s, p.pad_h, p.pad_w)
        if p.h % 2 == 0 and (p.c, p.h // 2, p.w // 2, *rest) in real:
            doubled += 1
        else:  # kept as listed: its double would pass the cap
            assert (p.c, p.h, p.w, *rest) in real and 2 * p.h > tune.MAX_STRIDED_INPUT
    assert doubled > 200


def test_layer_shapes_read_an_optional_stride_column(tmp_path: Path, monkeypatch):
    csv = tmp_path / "shapes.csv"
    rows = [
        "n,c,h,w,pad_h,pad_w,r,s,bias,stride",
        "8,64,56,56,1,1,3,3,0,2",
        "8,64,28,28,1,1,3,3,1,",
    ]
    csv.write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(tune, "SHAPES_CSV", csv)
    tune.layer_shapes.cache_clear()
    try:
        shapes = tune.layer_shapes()
    finally:
        tune.layer_shapes.cache_clear()
    assert [p.stride for p in shapes] == [(2, 2), (1, 1)]
    assert shapes[0].p == 28 and shapes[1].has_bias


def test_a_strided_layer_is_its_own_fold_group():
    kdef = KERNELS["conv2d_gw8_fprop"]
    layer = Conv2dGw8Params(n=8, c=64, h=56, w=56)

    def key(params: dict) -> str:
        return ev.group_key(kdef, Sample(kdef.name, "D", "sm_90", params, {}, 1.0))

    one = key(to_dict(layer))
    assert one != key(to_dict(replace(layer, stride_h=2, stride_w=2)))
    assert one == key(to_dict(replace(layer, n=64, dtype="bfloat16", wdtype=None)))
    # A sample collected before the stride fields existed is the same layer as a new one.
    old = {k: v for k, v in to_dict(layer).items() if k in {
        "n", "c", "h", "w", "r", "s", "pad_h", "pad_w", "has_bias", "dtype"}}  # fmt: skip
    assert one == key(old)
