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


def _two_layer_sweep(tmp_path) -> tuple[Path, list]:
    """fprop timed at two layers (C16 and C24, 14x14, N8), three configs each."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    dev = known_device("H100")
    lines = ["pass,c,hw,k,n,stride,config,us"]
    layers = []
    for c in (16, 24):
        p = Conv2dGw8Params(n=8, c=c, h=14, w=14, pad_h=1, pad_w=1, has_bias=True)
        cfgs = KERNELS["conv2d_gw8_fprop"].configs(p, dev)[:3]
        lines += [f'fprop,{c},14,3,8,1,"{cfg}",{10.0 + i}' for i, cfg in enumerate(cfgs)]
        layers.append((p, cfgs))
    path = tmp_path / "sweep.csv"
    path.write_text("\n".join(lines) + "\n")
    return path, layers


def test_export_writes_samples_the_trainer_reads(yardstick, tmp_path):
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Config, Conv2dGw8Params
    from spio.kernels.kernel_def import from_dict
    from spio.tune.dataset import read

    path, layers = _two_layer_sweep(tmp_path)
    assert yardstick.main(["--csv", str(path), "--export", str(tmp_path / "out")]) == 0
    samples = read(tmp_path / "out" / "conv2d_gw8_fprop.jsonl", "conv2d_gw8_fprop")
    got = {(from_dict(Conv2dGw8Params, s.params), from_dict(Conv2dGw8Config, s.config)):
           s.latency_us for s in samples}  # fmt: skip
    want = {(p, cfg): 10.0 + i for p, cfgs in layers for i, cfg in enumerate(cfgs)}
    assert got == want
    assert {s.device for s in samples} == {"NVIDIA H100 80GB HBM3"}


def test_loo_never_trains_on_the_layer_it_scores(yardstick, tmp_path, monkeypatch):
    """Each layer's model is trained on the other layer's sweep rows and the --data samples of
    other layers: a dataset sample of the held-out layer at another batch size is left out."""
    from dataclasses import replace

    from spio.cuda import known_device
    from spio.kernels.kernel_def import to_dict
    from spio.tune.dataset import Sample, append
    from spio.tune.model import PerfModel

    path, layers = _two_layer_sweep(tmp_path)
    # The C16 layer at another batch size in a second sweep CSV: never trained on for C16.
    other_batch = tmp_path / "sweep_n32.csv"
    other_batch.write_text(
        "pass,c,hw,k,n,stride,config,us\n"
        + "".join(f'fprop,16,14,3,32,1,"{cfg}",{20.0 + i}\n' for i, cfg in enumerate(layers[0][1]))
    )
    dev = known_device("H100")
    data = tmp_path / "data.jsonl"
    for p, cfgs in [(replace(layers[0][0], n=4), layers[0][1]), (replace(layers[0][0], c=40),
                    layers[0][1])]:  # fmt: skip
        append(data, [Sample("conv2d_gw8_fprop", dev.name, dev.arch, to_dict(p), to_dict(cfg),
                             5.0) for cfg in cfgs])  # fmt: skip
    trained_on: list[set] = []
    real = PerfModel.train.__func__

    def spy(cls, kernel, device, arch, rows, latency_us, *args, **kw):
        trained_on.append({r["c"] for r in rows})
        return real(cls, kernel, device, arch, rows, latency_us, *args, **kw)

    monkeypatch.setattr(PerfModel, "train", classmethod(spy))
    sweeps = yardstick.read_sweeps([path, other_batch])
    rows = yardstick.leave_one_out(sweeps, [data], "H100", tmp_path / "m")
    assert [r["layer"] for r in rows] == [
        "C16 14^2 k3 N8 stride 1",
        "C16 14^2 k3 N32 stride 1",
        "C24 14^2 k3 N8 stride 1",
    ]
    # C16 (either batch): C24's sweep rows and the C40 data; C24: both C16 sweeps and C40.
    assert trained_on == [{24, 40}, {24, 40}, {16, 40}]
    assert all(r["regret"] >= 1.0 for r in rows)


def test_warm_l2_sweep_rows_are_refused(yardstick, tmp_path):
    """A sweep timed with --warm-l2 is not comparable with the L2-flushed samples the models
    learn from: reading one names the file and the fix instead of mixing its rows in."""
    path = tmp_path / "conv2d_gw8_warm.csv"
    path.write_text(
        "pass,c,hw,k,n,stride,config,us,l2\n"
        "fprop,64,14,3,8,1,cfg_a,5.0,flushed\n"
        "fprop,64,14,3,8,1,cfg_b,4.0,warm\n"
    )
    with pytest.raises(ValueError, match="conv2d_gw8_warm.csv: a row timed with the L2 warm"):
        yardstick.read_sweeps([path])
    path.write_text("pass,c,hw,k,n,stride,config,us,l2\nfprop,64,14,3,8,1,cfg_a,5.0,flushed\n")
    assert yardstick.read_sweeps([path]) == {("fprop", 64, 14, 3, 8, 1): {"cfg_a": 5.0}}
