"""The selector's policy on a synthetic kernel family whose true latency is known: the heuristic
without a model, the model's top-1 pick with one, persisted autotune winners first, and a config
shared across the batch sizes of a layer while it is valid."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from spio.kernels.kernel_def import KernelDef, KernelStats
from spio.select import Selector
from spio.settings import override
from spio.tune.dataset import Sample
from spio.tune.evaluate import feature_rows
from spio.tune.features import to_dict
from spio.tune.model import PerfModel
from spio.tune.rank import rank
from spio.tune.store import find_model, model_path


@dataclass(frozen=True, slots=True)
class P:
    n: int
    c: int


@dataclass(frozen=True, slots=True)
class Cfg:
    tile: int
    warps: int


@dataclass(frozen=True)
class Dev:
    name: str = "Synthetic GPU"
    arch: str = "sm_90"
    sm_count: int = 100


def _configs(p: P, dev) -> list[Cfg]:
    return [Cfg(t, w) for t in (16, 32, 64, 128) for w in (1, 2, 4, 8) if t * w <= 4 * p.c]


def _true_us(p: P, cfg: Cfg) -> float:
    # Waves of tiles plus a per-warp overhead: the best tile depends on the shape.
    tiles = math.ceil(p.n / cfg.tile)
    waves = math.ceil(tiles / (100 * 4 / cfg.warps))
    return 5.0 + waves * cfg.tile * p.c / (cfg.warps * 40.0) + 0.3 * cfg.warps


def _feat(p: P, cfg: Cfg, dev) -> dict[str, float]:
    tiles = math.ceil(p.n / cfg.tile)
    return {
        "n": p.n,
        "c": p.c,
        "tile": cfg.tile,
        "warps": cfg.warps,
        "tiles": tiles,
        "waves": math.ceil(tiles / (dev.sm_count * 4 / cfg.warps)),
    }


KDEF = KernelDef(
    name="synthetic",
    params_type=P,
    config_type=Cfg,
    configs=_configs,
    spec=None,
    heuristic=lambda p, dev: Cfg(32, 4),
    stats=lambda p: KernelStats(0),
    features=_feat,
    make_runner=lambda p, cfg: lambda: None,
)


def _shape(rng: random.Random) -> P:
    """One layer shape; training and held-out shapes come from this same distribution."""
    return P(
        rng.choice([1000, 5000, 20000, 100000, 400000]) + rng.randrange(1000),
        rng.choice([16, 32, 64, 128]),
    )


def _dataset(shapes: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(shapes):
        p = _shape(rng)
        for cfg in _configs(p, Dev()):
            noise = 1 + 0.01 * rng.uniform(-1, 1)
            out.append(
                Sample(
                    "synthetic",
                    Dev().name,
                    "sm_90",
                    to_dict(p),
                    to_dict(cfg),
                    _true_us(p, cfg) * noise,
                )
            )
    return out


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
        sel.store.save_winner(KDEF, p, Dev(), Cfg(128, 2))
        fresh = Selector(store_dir=tmp_path / "sel")
        assert fresh.select(KDEF, p, Dev()) == Cfg(128, 2)
        assert fresh.sources[("synthetic", p, Dev().name)] == "autotune"


def test_shared_selection_reuses_the_first_config_while_valid(tmp_path: Path):
    # With `share`, a new batch of the same layer runs the config already chosen (and loaded),
    # unless that config is invalid for it.
    class Pick:
        calls = 0

        @staticmethod
        def heuristic(p, dev):
            Pick.calls += 1
            return Cfg(128, 1) if p.n > 10000 else Cfg(16, 1)

    kdef = KernelDef(
        name="shared",
        params_type=P,
        config_type=Cfg,
        configs=_configs,
        spec=None,
        heuristic=Pick.heuristic,
        stats=None,
    )
    with override(cache_dir=tmp_path):
        sel = Selector(store_dir=tmp_path / "sel")
        first = sel.select(kdef, P(50000, 64), Dev(), share=64)
        assert first == Cfg(128, 1)
        assert sel.select(kdef, P(500, 64), Dev(), share=64) == first  # shared, not re-chosen
        assert sel.sources[("shared", P(500, 64), Dev().name)] == "shared"
        # Cfg(128, 1) needs tile * warps <= 4 * c: invalid for c = 16, so it is chosen afresh.
        assert sel.select(kdef, P(500, 16), Dev(), share=64) == Cfg(16, 1)
        assert sel.select(kdef, P(500, 64), Dev()) == first  # cached per params
        assert Pick.calls == 2
