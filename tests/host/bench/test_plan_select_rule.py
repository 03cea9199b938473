"""benchmarks/plan_select_rule.py on the host: every rule's plan covers the same held-out layers
at or below --max-size, each led by its rule's pick from the family's space, and they merge into
one plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

BENCH = Path(__file__).parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def planner():
    yield from load_script(BENCH / "plan_select_rule.py")


@pytest.fixture(scope="module")
def retime():
    yield from load_script(BENCH / "retime_heldout.py")


@pytest.mark.parametrize(
    "kernel, field, at", [("conv2d_gw8_wgrad", "n", 256), ("layernorm_2d_bwd", "m", 2**17)]
)
def test_plans_pick_from_the_space_at_each_rule(planner, retime, monkeypatch, kernel, field, at):
    """A fake model that ranks the space's first config first when asked at a small size (every
    chosen layer's own is at most at / 2) and its last first at the fixed size `at`: the `shape`
    plan leads with the first, the `at` plan with the last, and `selected` with the first too
    (both families select at the size's power-of-two bucket, below `at` here)."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.tune.features import from_dict
    from spio.tune.model import PerfModel

    class Fake:
        def predict_us(self, rows):
            fixed = rows[0][field] == at
            return [float(len(rows) - i if fixed else i) for i in range(len(rows))]

    monkeypatch.setattr(PerfModel, "train", staticmethod(lambda *a, **k: Fake()))
    kdef = KERNELS[kernel]
    plans = planner.plans(kernel, max_size=at // 2, shapes=3, seed=5, at=[at], buckets=(at,))
    assert set(plans) == {"shape", "selected", f"at{at}", f"bucket{at}"}
    shapes = [[json.dumps(e["shape"], sort_keys=True) for e in plans[r]] for r in plans]
    assert all(s == shapes[0] for s in shapes) and len(shapes[0]) == 3
    # a bucket of a layer at most at / 2 is below `at`: ranked small, like the layer itself
    last = {"shape": False, "selected": False, f"at{at}": True, f"bucket{at}": False}
    dev = known_device("H100")
    for rule, entries in plans.items():
        for e in entries:
            assert e["shape"][field] <= at // 2
            space = kdef.configs(from_dict(kdef.params_type, e["shape"]), dev)
            assert from_dict(kdef.config_type, e["configs"][0]) == space[-1 if last[rule] else 0]
            assert e["roles"][0] == ["pick", "tried"]
            assert len(e["configs"]) == len(e["roles"]) == len(e["recorded_us"]) <= 4
    assert len(retime.merge(list(plans.values()))) == 3
    assert (
        planner.plans(kernel, max_size=at // 2, shapes=3, seed=5, at=[], min_size=at)["shape"] == []
    )
