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


def test_a_shape_missing_timings_is_left_out(retime, tmp_path):
    entry = {"kernel": "fam", "device": "GPU", "shape": {"m": 2}, "configs": [{"t": 1}],
             "roles": [["pick", "tried", "fastest"]], "recorded_us": [1.0],
             "recorded_pick_regret": 1.0, "recorded_autotune_regret": 1.0}  # fmt: skip
    _write(tmp_path / "t.csv", [])
    assert retime.score([entry], tmp_path / "t.csv") == {}


def test_plan_matches_evaluate(retime):
    """The plan's recorded regrets are `spio tune eval`'s whole-space and autotune numbers."""
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import evaluate

    name = "layernorm_2d_bwd"
    entries = retime.plan([name], top=3, folds=5)
    samples = read(retime.TUNE / f"{name}.jsonl", name)
    report = evaluate(KERNELS[name], samples, _device_for(samples[0].device, "eval"), folds=5)
    assert len(entries) == report.complete
    picks = sorted(e["recorded_pick_regret"] for e in entries)
    assert max(picks) == pytest.approx(report.complete_regret[2])
    for e in entries:
        roles = [r for rs in e["roles"] for r in rs]
        assert roles.count("pick") == 1 and roles.count("fastest") == min(3, len(e["configs"]))
        assert 1 <= roles.count("tried") <= 5
