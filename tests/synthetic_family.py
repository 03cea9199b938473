"""A synthetic kernel family whose true latency is known, for the host tests of the performance
models (tests/host/tune) and of selection (tests/host/select). On sys.path through pytest's
`pythonpath` setting (pyproject.toml)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from spio.kernels.kernel_def import KernelDef, KernelStats, to_dict
from spio.tune.dataset import Sample


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
    ordinal: int = 0


def configs(p: P, dev) -> list[Cfg]:
    return [Cfg(t, w) for t in (16, 32, 64, 128) for w in (1, 2, 4, 8) if t * w <= 4 * p.c]


def true_us(p: P, cfg: Cfg) -> float:
    # Waves of tiles plus a per-warp overhead: the best tile depends on the shape.
    tiles = math.ceil(p.n / cfg.tile)
    waves = math.ceil(tiles / (100 * 4 / cfg.warps))
    return 5.0 + waves * cfg.tile * p.c / (cfg.warps * 40.0) + 0.3 * cfg.warps


def features(p: P, cfg: Cfg, dev) -> dict[str, float]:
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
    configs=configs,
    spec=None,
    heuristic=lambda p, dev: Cfg(32, 4),
    stats=lambda p: KernelStats(0),
    features=features,
    make_runner=lambda p, cfg: lambda: None,
)


def shape(rng: random.Random) -> P:
    """One layer shape; training and held-out shapes come from this same distribution."""
    return P(
        rng.choice([1000, 5000, 20000, 100000, 400000]) + rng.randrange(1000),
        rng.choice([16, 32, 64, 128]),
    )


def dataset(shapes: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(shapes):
        p = shape(rng)
        for cfg in configs(p, Dev()):
            noise = 1 + 0.01 * rng.uniform(-1, 1)
            out.append(
                Sample(
                    "synthetic",
                    Dev().name,
                    "sm_90",
                    to_dict(p),
                    to_dict(cfg),
                    true_us(p, cfg) * noise,
                )
            )
    return out
