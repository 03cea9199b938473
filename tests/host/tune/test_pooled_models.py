"""A model trained on several GPUs' samples with device features (`spio tune train/eval
--pool-for`): the device terms, the rows, the folds' scoring and the selection path."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from synthetic_family import KDEF, Cfg, P, configs, true_us

from spio.cuda import known_device
from spio.kernels.kernel_def import to_dict
from spio.tune.dataset import Sample, append
from spio.tune.evaluate import evaluate, feature_rows, pooled_rows
from spio.tune.features import DEVICE_FEATURES, device_features, feature_columns
from spio.tune.model import PerfModel
from spio.tune.rank import rank


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A synthetic GPU with the attributes device_features reads."""

    name: str
    memory_clock_khz: int
    memory_bus_bits: int = 5120
    l2_bytes: int = 50 << 20
    arch: str = "sm_90"
    sm_count: int = 100
    ordinal: int = 0


SLOW, FAST = Gpu("Slow GPU", 1_000_000), Gpu("Fast GPU", 4_000_000)


def _true(p: P, cfg: Cfg, gpu: Gpu) -> float:
    """On the fast GPU the 8-warp configs pay 4x their fixed cost: its best configs differ."""
    extra = 3.0 * cfg.warps if gpu is FAST and cfg.warps == 8 else 0.0
    return true_us(p, cfg) + extra


def _samples(gpu: Gpu, shapes: list[P]) -> list[Sample]:
    return [
        Sample("synthetic", gpu.name, "sm_90", to_dict(p), to_dict(c), _true(p, c, gpu))
        for p in shapes
        for c in configs(p, gpu)
    ]


def _shapes(seed: int, n: int) -> list[P]:
    rng = random.Random(seed)
    return [P(rng.choice([200, 2000, 20000]) + rng.randrange(100), rng.choice([16, 64]))
            for _ in range(n)]  # fmt: skip


def test_device_terms_of_the_h100_and_the_h200():
    h100, h200 = known_device("NVIDIA H100 80GB HBM3"), known_device("NVIDIA H200")
    assert device_features(h100) == pytest.approx({"dev_dram_gbps": 3352.32, "dev_l2_mib": 50.0})
    assert device_features(h200) == pytest.approx({"dev_dram_gbps": 4814.304, "dev_l2_mib": 60.0})
    assert tuple(device_features(h100)) == DEVICE_FEATURES


def test_columns_of_a_pooled_model_end_with_the_devices_constants():
    p = P(2000, 64)
    cfgs = configs(p, FAST)
    own = ("n", "c", "tile", "warps", "tiles", "waves")
    names = (*own, *DEVICE_FEATURES)
    columns = feature_columns(KDEF, p, cfgs, FAST, names)
    assert columns[: len(own)] == feature_columns(KDEF, p, cfgs, FAST, own)
    # 4 GHz of double-rate memory clock on a 5120-bit bus: 5120 GB/s; 50 MiB of L2
    assert columns[-2:] == [[5120.0] * len(cfgs), [50.0] * len(cfgs)]


def test_pooled_rows_take_each_sample_s_own_gpu():
    samples = _samples(SLOW, [P(200, 16)]) + _samples(FAST, [P(200, 16)])
    rows = pooled_rows(KDEF, samples, {g.name: g for g in (SLOW, FAST)})
    for s, row in zip(samples, rows, strict=True):
        gpu = SLOW if s.device == SLOW.name else FAST
        assert row == feature_rows(KDEF, [s], gpu)[0] | device_features(gpu)


def test_a_pooled_model_ranks_each_gpu_by_its_own_terms():
    """Trained on both GPUs, the model sees the device terms at selection (rank) and picks each
    GPU's own best where they differ; the folds' evaluation with pool scores only the named GPU
    and says the models were pooled."""
    train = _samples(SLOW, _shapes(0, 30)) + _samples(FAST, _shapes(1, 30))
    pool = {g.name: g for g in (SLOW, FAST)}
    model = PerfModel.train("synthetic", FAST.name, "sm_90", pooled_rows(KDEF, train, pool),
                            [s.latency_us for s in train])  # fmt: skip
    assert model.feature_names[-2:] == DEVICE_FEATURES
    differ = 0
    for p in _shapes(2, 20):
        for gpu in (SLOW, FAST):
            cfg, _ = rank(KDEF, p, gpu, model)[0]
            best = min(_true(p, c, gpu) for c in configs(p, gpu))
            assert _true(p, cfg, gpu) <= 1.1 * best, (p, gpu.name, cfg)
        differ += rank(KDEF, p, SLOW, model)[0][0] != rank(KDEF, p, FAST, model)[0][0]
    assert differ > 0  # the terms reached the ranking: the GPUs' picks are not all the same
    report = evaluate(KDEF, train, FAST, folds=3, pool=pool)
    assert report.device == FAST.name and report.shapes == len({
        s.shape_key() for s in train if s.device == FAST.name})  # fmt: skip
    assert "of Fast GPU, Slow GPU, pooled with device features" in str(report)
    with pytest.raises(ValueError, match="pool trains the folds' models"):
        evaluate(KDEF, train, FAST, pool=pool, model=model)


def test_eval_and_train_pool_for_from_the_command_line(tmp_path: Path, capsys):
    """`spio tune eval/train --pool-for GPU` on the shipped layernorm_2d_bwd datasets of the H100
    and the H200 cut to a few shapes: the report names both GPUs, the model is the named GPU's,
    trained on both with the device terms last, byte-identical when trained again; --pool-for
    needs that GPU and another in the data, and no --model."""
    from spio.cli.tune import main
    from spio.tune.dataset import read

    root = Path(__file__).resolve().parents[3] / "benchmarks/data/tune"
    data = []
    for src in (root / "layernorm_2d_bwd.jsonl.gz", root / "h200/layernorm_2d_bwd.jsonl.gz"):
        rows = read(src)
        keep = sorted({s.shape_key() for s in rows})[:12]
        out = tmp_path / f"{src.parent.name}.jsonl"
        append(out, [s for s in rows if s.shape_key() in keep])
        data += ["--data", str(out)]
    argv = ["--kernel", "layernorm_2d_bwd", *data, "--pool-for", "NVIDIA H200"]
    assert main(["eval", *argv, "--folds", "2"]) == 0
    assert "on NVIDIA H200: " in (out := capsys.readouterr().out)
    assert "of NVIDIA H100 80GB HBM3, NVIDIA H200, pooled with device features" in out, out
    models = tmp_path / "models"
    assert main(["train", *argv, "--out", str(models)]) == 0
    path = models / "layernorm_2d_bwd__nvidia-h200.json.gz"
    first = path.read_bytes()
    model = PerfModel.load(path)
    assert model.device == "NVIDIA H200" and model.feature_names[-2:] == DEVICE_FEATURES
    assert main(["train", *argv, "--out", str(models)]) == 0
    assert path.read_bytes() == first
    capsys.readouterr()
    # the pooled model ranking the H200's samples alone: eval --model gives it its device terms
    assert main(["eval", "--kernel", "layernorm_2d_bwd", *data[2:], "--model", str(path)]) == 0
    assert "ranked by the NVIDIA H200 model" in capsys.readouterr().out
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["train", "--kernel", "layernorm_2d_bwd", *data[:2], "--pool-for", "NVIDIA H200"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (
        "--pool-for 'NVIDIA H200' needs layernorm_2d_bwd samples of that GPU and of another" in err
    )
