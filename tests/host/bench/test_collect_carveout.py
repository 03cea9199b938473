"""benchmarks/collect_carveout.py on the host: which pairs it times, and how `merge` replaces the
re-timed twins' rows and appends the variants (rows written before the carveout field match)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
from script_module import load_script

from spio.cuda import known_device
from spio.kernels.conv2d_gw8 import fprop as fp
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
from spio.tune.dataset import Sample, append, read
from spio.tune.features import to_dict

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "collect_carveout.py"
DEV = "NVIDIA H100 80GB HBM3"
LAYER = Conv2dGw8Params(
    n=64, c=72, h=112, w=112, r=3, s=3, pad_h=1, pad_w=1, has_bias=True, stride_h=2, stride_w=2
)


@pytest.fixture(scope="module")
def cc():
    yield from load_script(SCRIPT)


def _row(params, cfg, us: float) -> Sample:
    return Sample("conv2d_gw8_dgrad", DEV, "sm_90", to_dict(params), to_dict(cfg), us)


def test_pairs_are_the_offered_variants_of_measured_twins_each_after_its_twin(cc):
    dev = known_device(DEV)
    space = fp.DGRAD.configs(LAYER, dev)
    twins = [c for c in space if c.carveout == -1]
    measured = {json.dumps(to_dict(c), sort_keys=True) for c in twins[::2]}
    pairs = cc._pairs(LAYER, measured, dev)
    assert pairs and len(pairs) % 2 == 0
    for twin, variant in zip(pairs[::2], pairs[1::2], strict=True):
        assert twin == dataclasses.replace(variant, carveout=-1) and variant in space
        assert json.dumps(to_dict(twin), sort_keys=True) in measured
    offered = {dataclasses.replace(c, carveout=-1) for c in space if c.carveout != -1}
    assert set(pairs[::2]) == {c for c in twins[::2] if c in offered}


def test_merge_replaces_the_twins_rows_and_appends_the_variants(cc, tmp_path, capsys):
    dev = known_device(DEV)
    variants = [c for c in fp.DGRAD.configs(LAYER, dev) if c.carveout != -1][:2]
    twins = [dataclasses.replace(c, carveout=-1) for c in variants]
    other = Conv2dGw8Params(n=8, c=64, h=28, w=28)
    data, new = tmp_path / "data.jsonl", tmp_path / "new.jsonl"
    append(data, [_row(LAYER, twins[0], 100.0), _row(LAYER, twins[1], 50.0)])
    append(data, [_row(other, fp.DGRAD.configs(other, dev)[0], 7.0)])
    # A row written before the field existed, keyed without it (and without later params keys).
    old = json.loads(data.read_text().splitlines()[0])
    assert "carveout" not in old["config"]
    append(new, [_row(LAYER, twins[0], 110.0), _row(LAYER, variants[0], 80.0)])
    append(new, [_row(LAYER, twins[1], 45.0), _row(LAYER, variants[1], 60.0)])
    cc.cmd_merge(argparse.Namespace(data=str(data), new=str(new)))
    rows = read(data)
    times = {(r.params["n"], json.dumps(r.config, sort_keys=True)): r.latency_us for r in rows}
    assert len(rows) == 5
    assert times[(64, json.dumps(to_dict(twins[0]), sort_keys=True))] == 110.0
    assert times[(64, json.dumps(to_dict(variants[1]), sort_keys=True))] == 60.0
    assert times[(8, json.dumps(to_dict(fp.DGRAD.configs(other, dev)[0]), sort_keys=True))] == 7.0
    out = capsys.readouterr().out
    assert "2 twins re-timed, 2 variants added" in out and "median 1.000" in out


def test_strided_shapes_join_rows_written_before_a_params_field(cc, tmp_path):
    dev = known_device(DEV)
    cfgs = [c for c in fp.DGRAD.configs(LAYER, dev) if c.carveout == -1][:2]
    data = tmp_path / "data.jsonl"
    append(data, [_row(LAYER, cfgs[0], 10.0), _row(LAYER, cfgs[1], 11.0)])
    lines = data.read_text().splitlines()
    first = json.loads(lines[0])
    del first["params"]["pad_h_end"], first["params"]["pad_w_end"]  # an older row's keys
    data.write_text(json.dumps(first) + "\n" + lines[1] + "\n")
    shapes = cc._strided_shapes(data, DEV)
    assert list(shapes) == [LAYER]
    assert shapes[LAYER] == {json.dumps(to_dict(c), sort_keys=True) for c in cfgs}
