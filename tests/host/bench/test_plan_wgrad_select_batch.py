"""benchmarks/plan_wgrad_select_batch.py on the host: both plans cover the same small-batch
held-out layers, each led by its rule's pick from the family's space, and merge into one plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

BENCH = Path(__file__).parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def planner():
    yield from load_script(BENCH / "plan_wgrad_select_batch.py")


@pytest.fixture(scope="module")
def retime():
    yield from load_script(BENCH / "retime_heldout.py")


def test_plans_pick_from_the_space_at_each_rule(planner, retime, monkeypatch):
    """A fake model that ranks the space's first config first at the real N and its last first
    at 64 images: each plan leads with its rule's pick."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.tune.features import from_dict
    from spio.tune.model import PerfModel

    class Fake:
        def predict_us(self, rows):
            at64 = rows[0]["n"] == 64
            return [float(len(rows) - i if at64 else i) for i in range(len(rows))]

    monkeypatch.setattr(PerfModel, "train", staticmethod(lambda *a, **k: Fake()))
    kdef = KERNELS["conv2d_gw8_wgrad"]
    plans = planner.plans(shapes=4, seed=5)
    assert set(plans) == {"atN", "at64"}
    shapes = [[json.dumps(e["shape"], sort_keys=True) for e in plans[r]] for r in plans]
    assert shapes[0] == shapes[1] and len(shapes[0]) == 4
    dev = known_device("H100")
    for rule, entries in plans.items():
        for e in entries:
            assert e["shape"]["n"] <= 32
            space = kdef.configs(from_dict(kdef.params_type, e["shape"]), dev)
            assert (
                from_dict(kdef.config_type, e["configs"][0]) == space[-1 if rule == "at64" else 0]
            )
            assert e["roles"][0] == ["pick", "tried"]
            assert len(e["configs"]) == len(e["roles"]) == len(e["recorded_us"]) <= 4
    merged = retime.merge([plans["atN"], plans["at64"]])
    assert len(merged) == 4
