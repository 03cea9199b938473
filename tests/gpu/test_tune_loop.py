"""The performance-model loop end to end on a GPU: collect a small dataset with `collect`, train a
model on it, select with that model, launch the selected config and check its output.

Uses layernorm_2d_fwd (cheap to compile and to time). The trained model goes to a temporary local
models directory, which `find_model` searches before the shipped models, so the selection must
come from it (asserted: the pick equals the top of this model's ranking).
"""

from __future__ import annotations

import math

import pytest
import torch

from spio.kernels import layernorm_2d as ln
from spio.kernels.layernorm_2d_params import LayerNorm2dParams
from spio.kernels.loader import FunctionCache
from spio.select import Selector
from spio.testing import assert_close, poison, tolerance
from spio.tune import store
from spio.tune.collect import collect
from spio.tune.dataset import read
from spio.tune.evaluate import feature_rows
from spio.tune.features import from_dict
from spio.tune.model import PerfModel
from spio.tune.rank import rank

pytestmark = pytest.mark.gpu

EPS = 1e-6


def test_collect_train_select_launch(tmp_path, monkeypatch, seed):
    pytest.importorskip("xgboost", reason="training needs xgboost (pip install spio[tune])")
    from spio.cuda import device_attributes

    dev = device_attributes(torch.cuda.current_device())
    data = tmp_path / "layernorm_2d_fwd.jsonl"
    written = collect(ln.FWD, 0.1, data, seed=seed, max_configs=8, progress=False)
    samples = read(data, ln.FWD.name, dev.name)
    assert written == len(samples) > 0, f"seed={seed}: collect wrote {written}, read {len(samples)}"
    for s in samples:
        assert s.arch == dev.arch and s.device == dev.name
        assert math.isfinite(s.latency_us) and 0.5 < s.latency_us < 1e5, f"seed={seed}: {s}"
    # Resumable: a rerun with the same seed draws the same shapes (and config subsets) again,
    # skips every pair already measured and measures only the others: no pair twice. (Not "the
    # first shape gets no new rows": the first run may hit its deadline inside that shape, e.g.
    # after a slow cold compile, and then the rerun rightly finishes it.)
    again = collect(ln.FWD, 0.02, data, seed=seed, max_configs=8, progress=False)
    keys = [s.pair_key() for s in read(data, ln.FWD.name, dev.name)]
    assert len(keys) == len(samples) + again, f"seed={seed}: {len(keys)} rows, {again} new"
    assert len(set(keys)) == len(keys), (
        f"seed={seed}: the rerun ({again} rows) measured already measured pairs again"
    )

    model = PerfModel.train(
        ln.FWD.name,
        dev.name,
        dev.arch,
        feature_rows(ln.FWD, samples, dev),
        [s.latency_us for s in samples],
        rounds=50,
    )
    models = tmp_path / "models"
    model.save(store.model_path(models, ln.FWD.name, dev.name))
    monkeypatch.setattr(store, "local_models_dir", lambda: models)

    p = from_dict(LayerNorm2dParams, samples[0].params)
    sel = Selector(store_dir=tmp_path / "selections")
    cfg = sel.select(ln.FWD, p, dev)
    assert sel.sources[(ln.FWD.name, p, dev.name)] == "model"
    assert cfg == rank(ln.FWD, p, dev, model)[0][0], "the selection did not use the trained model"
    assert cfg in ln.FWD.configs(p, dev)

    # The pick runs and is correct (a ragged row count: M is a runtime argument).
    m = 1031
    g = torch.Generator("cuda").manual_seed(seed)
    dt, wdt = getattr(torch, p.dtype), getattr(torch, p.wdtype or p.dtype)
    x = (3 + torch.randn(m, p.c, generator=g, device="cuda", dtype=torch.float64)).to(dt)
    w = torch.randn(p.c, generator=g, device="cuda").to(wdt) if p.has_weight else None
    b = torch.randn(p.c, generator=g, device="cuda").to(wdt) if p.has_bias else None
    y = poison(torch.empty(m, p.c, dtype=dt, device="cuda"))
    mean = poison(torch.empty(m, dtype=torch.float32, device="cuda"))
    rstd = poison(torch.empty(m, dtype=torch.float32, device="cuda"))
    run_p = LayerNorm2dParams(
        c=p.c, m=m, dtype=p.dtype, wdtype=p.wdtype, has_weight=p.has_weight, has_bias=p.has_bias
    )
    loaded = FunctionCache().get(ln.FWD, run_p.static(), cfg, dev)
    stream = torch.cuda.current_stream().cuda_stream
    ln.launch_forward(
        loaded, run_p, cfg, dev, x=x, weight=w, bias=b, y=y, mean=mean, rstd=rstd, eps=EPS,
        stream=stream,
    )  # fmt: skip
    torch.cuda.synchronize()
    ref_y, ref_mean, _ = ln.reference(x.reshape(m, p.c, 1, 1), w, b, EPS)
    where = f"{run_p} {cfg} seed={seed}"
    assert_close(y.reshape(m, p.c, 1, 1), ref_y, tolerance(dt, p.c), f"{where} y")
    assert_close(mean, ref_mean.flatten(), tolerance(torch.float32, p.c), f"{where} mean")
