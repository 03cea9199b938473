"""Persisted selections: model and heuristic picks answer a new process from disk, keyed so that a
changed model, spio version or family never reuses a stale pick; autotune winners keep priority
and are keyed by the code (a kernel change re-measures them); concurrent writers lose nothing; an
unreadable store is ignored with a warning."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import synthetic_family
from synthetic_family import Cfg, P

import spio
import spio.kernels.kernel_def as kernel_def
import spio.select.basis as basis_mod
import spio.select.picks as picks_mod
import spio.select.selector as selector_mod
import spio.tune.store as store
from spio.kernels.kernel_def import KernelDef
from spio.select import Selector
from spio.select.picks import MAX_BASES, PickStore
from spio.settings import override
from spio.tune.features import to_dict
from spio.tune.model import PerfModel
from spio.tune.rank import rank


@dataclass(frozen=True)
class Dev(synthetic_family.Dev):
    name: str = "Store Test GPU"


HEURISTIC_CALLS: list[P] = []


def _heuristic(p: P, dev) -> Cfg:
    HEURISTIC_CALLS.append(p)
    return Cfg(16, 1)


def _us(p: P, cfg: Cfg) -> float:
    waves = math.ceil(math.ceil(p.n / cfg.tile) / (400 / cfg.warps))
    return 5.0 + waves * cfg.tile * p.c / (cfg.warps * 40.0) + 0.3 * cfg.warps


def _feat(p: P, cfg: Cfg, dev) -> dict[str, float]:
    return {"n": p.n, "c": p.c, "tile": cfg.tile, "warps": cfg.warps}


KDEF = KernelDef(
    name="store_synthetic",
    params_type=P,
    config_type=Cfg,
    configs=synthetic_family.configs,
    spec=None,
    heuristic=_heuristic,
    stats=None,
    features=_feat,
)
SHAPE = P(300000, 128)


def _model(invert: bool = False) -> PerfModel:
    """A small model of _us (or of its inverse, which ranks the slowest config first)."""
    rng = random.Random(0)
    shapes = [P(rng.choice([1000, 20000, 300000]), rng.choice([32, 64, 128])) for _ in range(20)]
    rows, us = [], []
    for p in shapes:
        for cfg in synthetic_family.configs(p, Dev()):
            rows.append(_feat(p, cfg, Dev()))
            us.append(1e4 / _us(p, cfg) if invert else _us(p, cfg))
    return PerfModel.train(KDEF.name, Dev().name, "sm_90", rows, us, rounds=60)


def _save(model: PerfModel, cache: Path, bump_ns: int = 0) -> Path:
    path = store.model_path(cache / "models", KDEF.name, Dev().name)
    model.save(path)
    if bump_ns:  # a coarse-mtime filesystem must still see the rewrite
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump_ns))
    return path


def _picks_file(root: Path) -> Path:
    return root / f"{KDEF.name}__{store.slug(Dev().name)}.picks.json"


def _no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the selection loaded a model instead of reading the store")

    monkeypatch.setattr(store, "find_model", refuse)
    monkeypatch.setattr(PerfModel, "load", refuse)


def test_a_new_selector_answers_a_model_pick_from_disk(tmp_path: Path, monkeypatch):
    with override(cache_dir=tmp_path):
        model = _model()
        _save(model, tmp_path)
        first = Selector(store_dir=tmp_path / "sel")
        pick = first.select(KDEF, SHAPE, Dev())
        assert first.sources[(KDEF.name, SHAPE, Dev().name)] == "model"
        assert pick == rank(KDEF, SHAPE, Dev(), model)[0][0]
        assert pick != Cfg(16, 1)  # the check can fail: the heuristic answers otherwise

        _no_model_loading(monkeypatch)
        fresh = Selector(store_dir=tmp_path / "sel")  # a new process, as far as spio knows
        assert fresh.select(KDEF, SHAPE, Dev()) == pick
        assert fresh.sources[(KDEF.name, SHAPE, Dev().name)] == "model"
        # Another GPU of the same model (another ordinal) shares the picks.
        other = Selector(store_dir=tmp_path / "sel")
        assert other.select(KDEF, SHAPE, Dev(ordinal=3)) == pick


def test_a_retrained_or_added_model_invalidates_the_picks(tmp_path: Path, monkeypatch):
    with override(cache_dir=tmp_path):
        _save(_model(), tmp_path)
        old = Selector(store_dir=tmp_path / "sel").select(KDEF, SHAPE, Dev())
        inverted = _model(invert=True)
        _save(inverted, tmp_path, bump_ns=10**9)
        calls = []
        real = store.find_model
        monkeypatch.setattr(store, "find_model", lambda *a: calls.append(a) or real(*a))
        fresh = Selector(store_dir=tmp_path / "sel")
        new = fresh.select(KDEF, SHAPE, Dev())
        assert calls, "the stale pick of the previous model was reused"
        assert new == rank(KDEF, SHAPE, Dev(), inverted)[0][0] != old
        # A model file for another GPU may become the fallback: it changes the basis too.
        basis = fresh.basis(KDEF, Dev())
        inverted.save(store.model_path(tmp_path / "models", KDEF.name, "Another GPU"))
        assert fresh.basis(KDEF, Dev()) != basis


def test_heuristic_picks_are_keyed_by_spio_version_and_stale_once_a_model_exists(
    tmp_path: Path, monkeypatch, caplog
):
    HEURISTIC_CALLS.clear()
    with override(cache_dir=tmp_path):
        assert Selector(store_dir=tmp_path / "sel").select(KDEF, SHAPE, Dev()) == Cfg(16, 1)
        assert len(HEURISTIC_CALLS) == 1
        caplog.clear()
        fresh = Selector(store_dir=tmp_path / "sel")
        assert fresh.select(KDEF, SHAPE, Dev()) == Cfg(16, 1)
        assert fresh.sources[(KDEF.name, SHAPE, Dev().name)] == "heuristic"
        assert len(HEURISTIC_CALLS) == 1, "the heuristic ran again instead of the store answering"
        # The no-model warning still shows once in the new process.
        assert any(
            "no performance model for store_synthetic" in r.getMessage() for r in caplog.records
        )

        monkeypatch.setattr(spio, "__version__", spio.__version__ + ".post1")
        Selector(store_dir=tmp_path / "sel").select(KDEF, SHAPE, Dev())
        assert len(HEURISTIC_CALLS) == 2, "a pick of another spio version was reused"

        model = _model()
        _save(model, tmp_path)
        later = Selector(store_dir=tmp_path / "sel")
        assert later.select(KDEF, SHAPE, Dev()) == rank(KDEF, SHAPE, Dev(), model)[0][0]
        assert later.sources[(KDEF.name, SHAPE, Dev().name)] == "model"


def test_an_edited_family_module_changes_the_basis(tmp_path: Path, monkeypatch):
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        before = sel.basis(KDEF, Dev())
        st = os.stat(__file__)
        stamp = f"{__file__}|{st.st_size}|{st.st_mtime_ns}"
        code = basis_mod._code_identity(KDEF)
        assert stamp in code  # the family's module
        assert any(c.startswith(kernel_def.__file__ + "|") for c in code)  # spio.kernels
        for module in (basis_mod, picks_mod, selector_mod):  # spio.select
            assert any(c.startswith(module.__file__ + "|") for c in code), module.__name__
        src = Path(spio.__file__).parent / "src" / "conv2d_gw8_wgrad.cu"
        include = Path(spio.__file__).parent / "include" / "spio" / "tma.h"
        kernels = basis_mod._kernel_source_identity()
        for kernel_file in (src, include):  # what the kernels compile from: winners only
            assert any(c.startswith(f"{kernel_file}|") for c in kernels), kernel_file
        winners = basis_mod.winner_basis(KDEF, Dev())
        monkeypatch.setattr(basis_mod, "_kernel_source_identity", lambda: (*kernels, "k.cu|1|2"))
        assert basis_mod.winner_basis(KDEF, Dev()) != winners
        assert sel.basis(KDEF, Dev()) == before  # a model pick does not depend on them
        monkeypatch.setattr(basis_mod, "_code_identity", lambda kdef: [stamp + "0"])
        assert sel.basis(KDEF, Dev()) != before
        assert sel.basis(KDEF, Dev(sm_count=99)) != sel.basis(KDEF, Dev())


def test_autotune_winner_keeps_priority_over_a_persisted_pick(tmp_path: Path):
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        assert sel.select(KDEF, SHAPE, Dev()) == Cfg(16, 1)  # persisted as a heuristic pick
        sel.store.save_winner(KDEF, SHAPE, Dev(), basis_mod.winner_basis(KDEF, Dev()), Cfg(64, 2))
        fresh = Selector(store_dir=tmp_path / "sel")
        assert fresh.select(KDEF, SHAPE, Dev()) == Cfg(64, 2)
        assert fresh.sources[(KDEF.name, SHAPE, Dev().name)] == "autotune"


def test_an_autotune_winner_of_other_code_is_not_reused(tmp_path: Path, monkeypatch):
    """A winner was timed on the kernels of the code that measured it: edited code (a kernel
    source included, `test_an_edited_family_module_changes_the_basis`) or another spio version
    falls through to the pick; a retrained model does not touch the winners."""
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        sel.store.save_winner(KDEF, SHAPE, Dev(), basis_mod.winner_basis(KDEF, Dev()), Cfg(64, 2))
        _save(_model(), tmp_path)  # a new model: the winner stays
        assert Selector(store_dir=tmp_path / "sel").select(KDEF, SHAPE, Dev()) == Cfg(64, 2)
        kernels = basis_mod._kernel_source_identity()
        monkeypatch.setattr(basis_mod, "_kernel_source_identity", lambda: (*kernels, "k.cu|1|2"))
        fresh = Selector(store_dir=tmp_path / "sel")
        fresh.select(KDEF, SHAPE, Dev())
        assert fresh.sources[(KDEF.name, SHAPE, Dev().name)] == "model"


def test_winners_of_an_earlier_spio_are_ignored_with_a_warning_and_replaced(tmp_path: Path, caplog):
    """The flat winners file of earlier versions ({params: config}, keyed by the layer alone)
    may hold configs timed on older kernels: ignored once with a warning, replaced by the next
    winner."""
    root = tmp_path / "sel"
    root.mkdir()
    winners = root / "store_synthetic__store-test-gpu.json"
    winners.write_text('{"{\\"c\\": 128, \\"n\\": 300000}":{"tile":64,"warps":2}}')
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=root)
        b = basis_mod.winner_basis(KDEF, Dev())
        assert sel.store.winner(KDEF, SHAPE, Dev(), b) is None
        assert sel.select(KDEF, SHAPE, Dev()) == Cfg(16, 1)
        sel.store.save_winner(KDEF, SHAPE, Dev(), b, Cfg(32, 2))
        assert PickStore(root).winner(KDEF, SHAPE, Dev(), b) == Cfg(32, 2)
    warned = [r.getMessage() for r in caplog.records if "earlier spio" in r.getMessage()]
    assert len(warned) == 1 and winners.name in warned[0]
    assert json.loads(winners.read_text()) == {
        "format": 1,
        "bases": {b: {'{"c": 128, "n": 300000}': {"tile": 32, "warps": 2}}},
    }


def test_a_pick_no_longer_valid_for_the_family_is_not_used(tmp_path: Path):
    HEURISTIC_CALLS.clear()
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        sel.select(KDEF, P(1000, 4), Dev())
        path = _picks_file(tmp_path / "sel")
        data = json.loads(path.read_text())
        (picks,) = data["bases"].values()
        (key,) = picks
        picks[key]["config"] = to_dict(Cfg(128, 8))  # tile * warps > 4 * c: invalid for c = 4
        path.write_text(json.dumps(data))
        assert Selector(store_dir=tmp_path / "sel").select(KDEF, P(1000, 4), Dev()) == Cfg(16, 1)
        assert len(HEURISTIC_CALLS) == 2


@pytest.mark.parametrize(
    "garbage", ['{"format": 1, "bases": {"x": {', "[1, 2]", '{"format": 99}', "\udcff"]
)
def test_an_unreadable_store_is_ignored_with_a_warning_and_rewritten(
    tmp_path: Path, caplog, garbage
):
    root = tmp_path / "sel"
    root.mkdir()
    path = _picks_file(root)
    path.write_bytes(garbage.encode("utf-8", "surrogateescape"))
    (root / f"{KDEF.name}__{store.slug(Dev().name)}.json").write_text("not json")
    with override(cache_dir=tmp_path):
        assert Selector(store_dir=root).select(KDEF, SHAPE, Dev()) == Cfg(16, 1)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("unreadable selection store" in m and path.name in m for m in warned) == 1
    assert sum("unreadable selection store" in m for m in warned) == 2  # the winners file too
    data = json.loads(path.read_text())
    assert data["format"] == 1 and len(data["bases"]) == 1  # repaired by the pick


def test_an_unwritable_store_still_selects(tmp_path: Path, caplog):
    blocker = tmp_path / "sel"
    blocker.write_text("a file where the store directory should be")
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=blocker / "inner")
        assert sel.select(KDEF, SHAPE, Dev()) == Cfg(16, 1)
        assert sel.select(KDEF, P(5, 8), Dev()) == Cfg(16, 1)
    warned = [r.getMessage() for r in caplog.records if "could not persist" in r.getMessage()]
    assert len(warned) == 1  # once per file


def test_the_store_files_keep_their_names_and_bytes(tmp_path: Path):
    """The on-disk format, pinned: picks written before spio.select existed stay valid (winners
    changed format when they became keyed by the code: fifteenth session)."""
    root = tmp_path / "sel"
    winners = root / "store_synthetic__store-test-gpu.json"
    picks = root / "store_synthetic__store-test-gpu.picks.json"
    winners.parent.mkdir()
    winners.write_text(
        '{"format":1,"bases":{"w0":{"{\\"c\\": 128, \\"n\\": 300000}":{"tile":64,"warps":2}}}}'
    )
    picks.write_text(
        '{"format":1,"bases":{"b0":{"{\\"c\\": 128, \\"n\\": 300000}":'
        '{"config":{"tile":32,"warps":2},"source":"model"}}}}'
    )
    with override(cache_dir=tmp_path):
        old = PickStore(root)
        assert old.path(KDEF, Dev()) == winners
        assert old.path(KDEF, Dev(), ".picks.json") == picks
        assert old.winner(KDEF, SHAPE, Dev(), "w0") == Cfg(64, 2)
        assert old.winner(KDEF, SHAPE, Dev(), "w1") is None
        assert old.pick(KDEF, SHAPE, Dev(), "b0") == (Cfg(32, 2), "model")
        assert old.pick(KDEF, SHAPE, Dev(), "b1") is None

        new = PickStore(tmp_path / "new")
        new.save_winner(KDEF, SHAPE, Dev(), "w0", Cfg(64, 2))
        new.save_pick(KDEF, SHAPE, Dev(), "b0", Cfg(32, 2), "model")
    assert (tmp_path / "new" / winners.name).read_bytes() == winners.read_bytes()
    assert (tmp_path / "new" / picks.name).read_bytes() == picks.read_bytes()


def test_the_store_refuses_a_source_it_would_not_read_back(tmp_path: Path):
    with pytest.raises(ValueError, match="source must be one of"):
        PickStore(tmp_path).save_pick(KDEF, SHAPE, Dev(), "b0", Cfg(16, 1), "autotune")


def test_only_the_latest_bases_are_kept(tmp_path: Path, monkeypatch):
    with override(cache_dir=tmp_path):
        bases = []
        for i in range(MAX_BASES + 2):
            monkeypatch.setattr(spio, "__version__", f"0.0.{i}")
            sel = Selector(store_dir=tmp_path / "sel")
            sel.select(KDEF, SHAPE, Dev())
            bases.append(sel.basis(KDEF, Dev()))
        monkeypatch.setattr(spio, "__version__", "0.0.1")  # used again: moves to the end
        Selector(store_dir=tmp_path / "sel").select(KDEF, P(7, 8), Dev())
    kept = list(json.loads(_picks_file(tmp_path / "sel").read_text())["bases"])
    assert kept == bases[-(MAX_BASES - 1) :] + [bases[1]]


def _select_many(root: str, worker: int, count: int, barrier) -> None:
    barrier.wait()
    sel = Selector(store_dir=Path(root))
    for i in range(count):
        sel.select(KDEF, P(1000 * worker + i, 8), Dev())


def test_concurrent_processes_lose_no_pick(tmp_path: Path):
    workers, count = 4, 12
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers)
    with override(cache_dir=tmp_path):
        procs = [
            ctx.Process(target=_select_many, args=(str(tmp_path / "sel"), w, count, barrier))
            for w in range(workers)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0] * workers
    (picks,) = json.loads(_picks_file(tmp_path / "sel").read_text())["bases"].values()
    assert len(picks) == workers * count
    assert not list((tmp_path / "sel").glob("*.tmp"))  # no temporary file left behind


_NEW_PROCESS = """
import json, sys
from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.select import Selector
from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
sel = Selector()
p = Conv2dGw8Params(n=8, c=256, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
cfg = sel.select(KERNELS["conv2d_gw8_fprop"], p, known_device("H100"))
source = sel.sources[("conv2d_gw8_fprop", p, "NVIDIA H100 80GB HBM3")]
loaded = [m in sys.modules for m in ("spio.tune.trees", "xgboost", "numpy")]
print(json.dumps([repr(cfg), source, *loaded]))
"""


def test_new_processes_select_without_importing_xgboost_or_numpy(tmp_path: Path):
    """The shipped conv2d_gw8_fprop model, in two real processes sharing a cache dir: the first
    ranks the layer's configs with the model's trees, the second answers from the persisted
    pick without loading the model; neither imports XGBoost or numpy (issue 13: a first
    selection in <= 50 ms and a persisted one in <= 5 ms, which their imports alone exceed)."""
    import subprocess
    import sys

    if not store.model_files("conv2d_gw8_fprop"):
        pytest.skip("no conv2d_gw8_fprop model ships in this checkout")
    env = {**os.environ, "SPIO_CACHE_DIR": str(tmp_path)}

    def run() -> list:
        out = subprocess.run(
            [sys.executable, "-c", _NEW_PROCESS], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    first, second = run(), run()
    assert first[1:] == ["model", True, False, False]  # ranked with the model's trees
    assert second == [first[0], "model", False, False, False]  # the same pick, read from disk
