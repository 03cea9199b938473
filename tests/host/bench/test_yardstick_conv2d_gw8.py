"""benchmarks/yardstick_conv2d_gw8.py on the host: the shipped sweep CSV scored by the models."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "yardstick_conv2d_gw8.py"


@pytest.fixture(scope="module")
def yardstick():
    yield from load_script(SCRIPT)


def test_shipped_sweeps_score_every_pass(yardstick):
    paths = sorted(yardstick.DATA.glob("conv2d_gw8_*.csv"))
    assert paths, f"no sweep CSV in {yardstick.DATA}"
    sweeps = yardstick.read_sweeps(paths)
    rows = yardstick.regrets(sweeps, None, "H100")
    assert {r["pass"] for r in rows} == set(yardstick.PASSES)
    assert len(rows) == len(sweeps)  # every (pass, layer) of the sweeps has measured configs
    for r in rows:
        assert r["regret"] >= 1.0 and r["pick_us"] >= r["best_us"] > 0
        assert r["configs"] > 1


def test_regret_is_the_picks_time_over_the_best(yardstick, tmp_path, monkeypatch):
    """Two configs measured; a model that prefers the slower one has regret slow / fast."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    p = Conv2dGw8Params(n=8, c=16, h=14, w=14, has_bias=True)
    a, b = KERNELS["conv2d_gw8_fprop"].configs(p, known_device("H100"))[:2]
    csv_path = tmp_path / "sweep.csv"
    csv_path.write_text(
        "pass,c,hw,k,n,stride,config,us\n"
        f'fprop,16,14,3,8,1,"{a}",10.0\n'
        f'fprop,16,14,3,8,1,"{b}",30.0\n'
    )

    class Slow:
        def predict_us(self, rows):
            return [0.0 if r["block_p"] == b.block_p and r["stages"] == b.stages else 1.0
                    for r in rows]  # fmt: skip

    monkeypatch.setattr(yardstick, "_shipped", lambda kernel, dev: Slow())
    (row,) = yardstick.regrets(yardstick.read_sweeps([csv_path]), None, "H100")
    assert row["regret"] == pytest.approx(3.0)
