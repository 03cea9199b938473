"""The selector's policy on a synthetic kernel family whose true latency is known: the heuristic
without a model, the model's top-1 pick with one, persisted autotune winners first, and a config
shared across the batch sizes of a layer while it is valid."""

from __future__ import annotations

from pathlib import Path

from synthetic_family import KDEF, Cfg, Dev, P
from synthetic_family import dataset as _dataset

from spio.select import Selector
from spio.select.basis import winner_basis
from spio.settings import override
from spio.tune.evaluate import feature_rows
from spio.tune.model import PerfModel
from spio.tune.rank import rank
from spio.tune.store import find_model, model_path


def test_selector_without_model_uses_heuristic_and_caches(tmp_path: Path, caplog):
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        p = P(1000, 32)
        assert sel.select(KDEF, p, Dev()) == Cfg(32, 4)
        assert sel.sources[("synthetic", p, Dev().name)] == "heuristic"
        assert sel.ranked(KDEF, p, Dev())[0] == (Cfg(32, 4), None)
        sel.select(KDEF, P(2000, 32), Dev())
    # One warning per family and GPU, shown at the default level.
    said = [r for r in caplog.records if "no performance model for synthetic" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"


def test_selector_uses_model_when_one_exists(tmp_path: Path, seed):
    samples = _dataset(30, seed)
    model = PerfModel.train(
        "synthetic",
        Dev().name,
        "sm_90",
        feature_rows(KDEF, samples, Dev()),
        [s.latency_us for s in samples],
        rounds=150,
    )
    with override(cache_dir=tmp_path):
        model.save(model_path(tmp_path / "models", "synthetic", Dev().name))
        assert find_model("synthetic", Dev().name, "sm_90") is not None
        # Another GPU of the same arch borrows the model; another arch gets none.
        assert find_model("synthetic", "Other GPU", "sm_90") is not None
        assert find_model("synthetic", "Other GPU", "sm_80") is None
        sel = Selector(store_dir=tmp_path / "sel")
        p = P(300000, 128)
        choice = sel.select(KDEF, p, Dev())
        assert sel.sources[("synthetic", p, Dev().name)] == "model"
        assert choice == rank(KDEF, p, Dev(), model)[0][0]


def test_persisted_autotune_winner_is_reused(tmp_path: Path):
    with override(cache_dir=tmp_path):
        p = P(5000, 64)
        sel = Selector(store_dir=tmp_path / "sel")
        sel.store.save_winner(KDEF, p, Dev(), winner_basis(KDEF, Dev()), Cfg(128, 2))
        fresh = Selector(store_dir=tmp_path / "sel")
        assert fresh.select(KDEF, p, Dev()) == Cfg(128, 2)
        assert fresh.sources[("synthetic", p, Dev().name)] == "autotune"


def test_a_family_with_its_own_ranking(tmp_path: Path, caplog, monkeypatch):
    """A family selected by a cost model of its own (`KernelDef.ranked`, as matmul_sm90): its
    heuristic is the pick (not persisted), with no 'no performance model' warning; the
    selector's ranking is the family's; SPIO_AUTOTUNE measures from that ranking (the fastest,
    persisted, is reused by a fresh selector)."""
    from dataclasses import replace

    import spio.tune.rank as rank_mod

    order = [Cfg(64, 2), Cfg(32, 4), Cfg(128, 1)]
    kdef = replace(KDEF, name="ranked", heuristic=lambda p, dev: order[0],
                   ranked=lambda p, dev: list(order), make_runner=lambda p, c: None)  # fmt: skip
    measured = []

    def measure(kd, p, cfgs):  # Cfg(32, 4) is the fastest
        measured.append(list(cfgs))
        return sorted(((c, 1.0 if c == Cfg(32, 4) else 2.0) for c in cfgs), key=lambda t: t[1])

    monkeypatch.setattr(rank_mod, "measure", measure)
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        p = P(1000, 64)
        assert sel.select(kdef, p, Dev()) == order[0]
        assert ("ranked", p, Dev().name) not in sel.sources  # not kept per shape
        assert [c for c, _ in sel.ranked(kdef, p, Dev())] == order
        assert not sel.store.path(kdef, Dev(), ".picks.json").exists()  # not persisted
        with override(autotune=True):
            q = P(2000, 64)
            assert Selector(store_dir=tmp_path / "sel").select(kdef, q, Dev()) == Cfg(32, 4)
        assert measured == [order]
        assert Selector(store_dir=tmp_path / "sel").select(kdef, q, Dev()) == Cfg(32, 4)
    assert not [r for r in caplog.records if "no performance model" in r.getMessage()]


def test_matmul_sm90_ranks_as_many_configs_as_autotune_measures():
    """`matmul_sm90.ranked` is cut at AUTOTUNE_CANDIDATES, which must be the selector's TOP_K:
    with more, `autotune_candidates` would reorder the cost model's ranking."""
    from spio.kernels import matmul_sm90 as k90
    from spio.select.selector import TOP_K

    assert k90.AUTOTUNE_CANDIDATES == TOP_K
