"""benchmarks/retime_heldout.py on the host: the plan matches `spio tune eval`'s complete shapes,
and `score` turns re-timed rounds into regrets (medians over rounds, against the best re-timed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "retime_heldout.py"


@pytest.fixture(scope="module")
def retime():
    yield from load_script(SCRIPT)


def _write(path: Path, rows: list[tuple]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "device", "shape", "config", "round", "us"])
        w.writerows(rows)


def test_score_uses_medians_against_the_best_retimed(retime, tmp_path, capsys):
    shape = {"m": 1}
    cfgs = [{"t": 1}, {"t": 2}, {"t": 3}]
    entry = {
        "kernel": "fam",
        "device": "GPU",
        "shape": shape,
        "configs": cfgs,
        "roles": [["pick"], ["tried"], ["fastest"]],
        "recorded_us": [12.0, 11.0, 10.0],
        "recorded_pick_regret": 1.2,
        "recorded_autotune_regret": 1.1,
    }
    key = json.dumps(shape, sort_keys=True)
    times = {0: [11.0, 10.0, 30.0], 1: [10.5, 10.5, 10.5], 2: [10.0, 10.0, 10.2]}
    rows = [
        ("fam", "GPU", key, json.dumps(cfgs[j], sort_keys=True), r, t)
        for j, ts in times.items()
        for r, t in enumerate(ts)
    ]
    _write(tmp_path / "t.csv", rows)
    per = retime.score([entry], tmp_path / "t.csv")
    # medians 11.0, 10.5, 10.0: the pick 1.10x the best, autotune's tried 1.05x
    assert per["fam"]["pick"] == [pytest.approx(1.1)]
    assert per["fam"]["autotune"] == [pytest.approx(1.05)]
    assert per["fam"]["recorded_pick"] == [1.2]
    assert max(per["fam"]["noise"]) == pytest.approx(3.0)  # 30 / 10 of the pick's rounds
    assert "fam: 1 complete held-out shapes" in capsys.readouterr().out


def _entry(shape: dict, configs: list[dict], roles: list[list[str]]) -> dict:
    return {"kernel": "fam", "device": "GPU", "shape": shape, "configs": configs, "roles": roles,
            "recorded_us": [1.0] * len(configs), "recorded_pick_regret": 1.0,
            "recorded_autotune_regret": 1.0}  # fmt: skip


def test_merge_keeps_every_config_of_a_shape_once(retime):
    a = [_entry({"m": 1}, [{"t": 1}, {"t": 2}], [["pick"], ["tried"]])]
    b = [_entry({"m": 1}, [{"t": 2}, {"t": 3}], [["pick"], ["fastest"]]),
         _entry({"m": 2}, [{"t": 1}], [["pick", "tried"]])]  # fmt: skip
    merged = retime.merge([a, b])
    assert [e["shape"] for e in merged] == [{"m": 1}, {"m": 2}]
    assert merged[0]["configs"] == [{"t": 1}, {"t": 2}, {"t": 3}]
    assert merged[0]["roles"] == [["pick"], ["tried"], ["fastest"]]  # the first plan's roles
    assert a[0]["configs"] == [{"t": 1}, {"t": 2}]  # the inputs unchanged


def test_score_takes_the_best_of_every_plan_timed_into_the_csv(retime, tmp_path):
    """Two plans timed into one CSV: each scores against the shape's fastest config, even one
    only the other plan listed (so the two models' regrets share a best)."""
    shape = {"m": 1}
    old = _entry(shape, [{"t": 1}, {"t": 2}], [["pick"], ["tried", "fastest"]])
    new = _entry(shape, [{"t": 3}], [["pick", "tried", "fastest"]])
    key = json.dumps(shape, sort_keys=True)
    us = {1: 12.0, 2: 11.0, 3: 10.0}
    rows = [("fam", "GPU", key, json.dumps({"t": t}, sort_keys=True), r, u)
            for t, u in us.items() for r in range(3)]  # fmt: skip
    _write(tmp_path / "t.csv", rows)
    assert retime.score([old], tmp_path / "t.csv")["fam"]["pick"] == [pytest.approx(1.2)]
    assert retime.score([new], tmp_path / "t.csv")["fam"]["pick"] == [pytest.approx(1.0)]


def test_a_shape_missing_timings_is_left_out(retime, tmp_path):
    entry = {"kernel": "fam", "device": "GPU", "shape": {"m": 2}, "configs": [{"t": 1}],
             "roles": [["pick", "tried", "fastest"]], "recorded_us": [1.0],
             "recorded_pick_regret": 1.0, "recorded_autotune_regret": 1.0}  # fmt: skip
    _write(tmp_path / "t.csv", [])
    assert retime.score([entry], tmp_path / "t.csv") == {}


def test_plan_matches_evaluate(retime):
    """The plan's recorded regrets are `spio tune eval`'s whole-space and autotune numbers, and
    those are the ones docs/tuning.md publishes for the shipped layernorm_2d_bwd dataset (a pin:
    `held_out`, which both read, must keep ranking and scoring as it did)."""
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import evaluate

    name = "layernorm_2d_bwd"
    entries = retime.plan([name], top=3, folds=5)
    samples = read(retime.TUNE / f"{name}.jsonl.gz", name)
    report = evaluate(KERNELS[name], samples, _device_for(samples[0].device, "eval"), folds=5)
    assert report.complete == len(entries) == 83
    assert report.complete_regret == pytest.approx((1.043, 1.147, 1.228), abs=5e-4)
    assert report.autotune_regret == pytest.approx((1.000, 1.036, 1.052), abs=5e-4)
    picks = sorted(e["recorded_pick_regret"] for e in entries)
    tuned = sorted(e["recorded_autotune_regret"] for e in entries)
    assert (picks[-1], tuned[-1]) == pytest.approx(
        (report.complete_regret[2], report.autotune_regret[2])
    )
    for e in entries:
        roles = [r for rs in e["roles"] for r in rs]
        assert roles.count("pick") == 1 and 1 <= roles.count("tried") <= 5
        # the fastest recorded config is re-timed
        fastest = min(range(len(e["configs"])), key=e["recorded_us"].__getitem__)
        assert "fastest" in e["roles"][fastest]


def test_time_refuses_another_gpu_kind(retime, tmp_path, monkeypatch):
    """`time` re-times only on the GPU kind the datasets were measured on."""
    import spio.cuda

    class Dev:
        name = "NVIDIA H200"

    monkeypatch.setattr(spio.cuda, "device_attributes", lambda ordinal=0: Dev())
    entry = {"kernel": "matmul", "device": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(SystemExit, match="re-time on the GPU kind"):
        retime.time_plan([entry], 1, 0, tmp_path / "t.csv")


@pytest.mark.parametrize("args, flush", [([], True), (["--warm-l2"], False)])
def test_time_flushes_the_l2_unless_told(retime, tmp_path, monkeypatch, args, flush):
    """`time --warm-l2` times with the L2 as the previous call left it (a layer repeated alone);
    by default every call runs after a flush, as the collector's samples did."""
    seen = {}
    monkeypatch.setattr(retime, "time_plan", lambda *a, **k: seen.update(k))
    (tmp_path / "p.json").write_text("[]")
    assert retime.main(["time", str(tmp_path / "p.json"), "--csv", str(tmp_path / "t.csv")]
                       + args) == 0  # fmt: skip
    assert seen == {"flush_l2": flush}


def test_time_refuses_to_mix_flushed_and_warm_timings(retime, tmp_path, monkeypatch):
    """A CSV holds one L2 mode: resuming a flushed run (rows without the l2 column count as
    flushed) with --warm-l2 would skip its entries or mix the two, so `time` stops and says so."""
    import spio.cuda

    class Dev:
        name = "NVIDIA H100 80GB HBM3"

    monkeypatch.setattr(spio.cuda, "device_attributes", lambda ordinal=0: Dev())
    entry = {"kernel": "matmul", "device": Dev.name, "shape": {}, "configs": []}
    _write(tmp_path / "old.csv", [("matmul", Dev.name, "{}", "{}", 0, 2.5)])
    with pytest.raises(SystemExit, match="with the L2 flushed; this run times it warm"):
        retime.time_plan([entry], 1, 0, tmp_path / "old.csv", flush_l2=False)
    _write(tmp_path / "header_only.csv", [])  # no l2 column and no rows: still a flushed file
    with pytest.raises(SystemExit, match="with the L2 flushed; this run times it warm"):
        retime.time_plan([entry], 1, 0, tmp_path / "header_only.csv", flush_l2=False)
    with (tmp_path / "warm.csv").open("w") as f:
        f.write("kernel,device,shape,config,round,us,l2\nmatmul,GPU,{},{},0,2.5,warm\n")
    with pytest.raises(SystemExit, match="with the L2 warm; this run times it flushed"):
        retime.time_plan([entry], 1, 0, tmp_path / "warm.csv")
    with pytest.raises(SystemExit, match="appends plain CSV rows"):
        retime.time_plan([entry], 1, 0, tmp_path / "t.csv.gz")


def test_plan_and_timings_read_gzipped(retime, tmp_path):
    import gzip

    plan = [{"kernel": "fam", "shape": {"m": 1}}]
    with gzip.open(tmp_path / "p.json.gz", "wt") as f:
        json.dump(plan, f)
    assert retime.read_plan(tmp_path / "p.json.gz") == plan
    _write(tmp_path / "t.csv", [("fam", "GPU", "{}", "{}", 0, 2.5)])
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress((tmp_path / "t.csv").read_bytes()))
    assert retime.read_times(tmp_path / "t.csv.gz") == {("fam", "{}", "{}"): [2.5]}


def test_merge_subcommand_writes_one_plan(retime, tmp_path, capsys):
    a = [_entry({"m": 1}, [{"t": 1}], [["pick", "tried"]])]
    b = [_entry({"m": 1}, [{"t": 2}], [["pick", "tried"]])]
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json.gz").write_bytes(__import__("gzip").compress(json.dumps(b).encode()))
    out = tmp_path / "m.json"
    assert retime.main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json.gz"),
                        "--out", str(out)]) == 0  # fmt: skip
    assert json.loads(out.read_text())[0]["configs"] == [{"t": 1}, {"t": 2}]
    assert "1 shapes, 2 configs to re-time" in capsys.readouterr().out
