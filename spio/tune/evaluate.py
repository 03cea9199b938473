"""Honest evaluation of a performance model: regret of its top-1 pick on layer shapes it never saw.

Shapes (params) are split into folds; each fold is predicted by a model trained on the others, so
no shape is in both train and test. For every held-out shape, the model ranks the configs that
were measured for it: regret = measured time of its top-1 / best measured time; top-5 hit = the
best measured config is among its 5 best predictions.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.tune.dataset import Sample
from spio.tune.features import features, from_dict
from spio.tune.model import PerfModel


@dataclass(frozen=True)
class Report:
    kernel: str
    device: str
    shapes: int
    samples: int
    regret_median: float
    regret_p90: float
    regret_max: float
    top5_hit_rate: float

    def __str__(self) -> str:
        return (
            f"{self.kernel} on {self.device}: {self.shapes} held-out shapes, "
            f"{self.samples} samples\n"
            f"  top-1 regret: median {self.regret_median:.3f}x, p90 {self.regret_p90:.3f}x, "
            f"max {self.regret_max:.3f}x;  top-5 hit rate {self.top5_hit_rate:.0%}"
        )


def feature_rows(kdef: KernelDef, samples: list[Sample], device: Any) -> list[dict[str, float]]:
    """Recomputes features from stored params/config with the family's current code."""
    return [
        features(
            kdef,
            from_dict(kdef.params_type, s.params),
            from_dict(kdef.config_type, s.config),
            device,
        )
        for s in samples
    ]


def _fold(shape_key: str, folds: int) -> int:
    return int(hashlib.sha256(shape_key.encode()).hexdigest(), 16) % folds


def evaluate(
    kdef: KernelDef, samples: list[Sample], device: Any, folds: int = 5, rounds: int | None = None
) -> Report:
    if not samples:
        raise ValueError(f"evaluate: no samples for {kdef.name}")
    rows = feature_rows(kdef, samples, device)
    by_shape: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_shape[s.shape_key()].append(i)
    if len(by_shape) < 2:
        raise ValueError(f"evaluate: {kdef.name} needs samples of at least 2 shapes, got 1")
    folds = min(folds, len(by_shape))
    regrets: list[float] = []
    hits = 0
    kwargs = {} if rounds is None else {"rounds": rounds}
    for f in range(folds):
        test_shapes = [k for k in by_shape if _fold(k, folds) == f]
        if not test_shapes:
            continue
        train_idx = [i for k, idx in by_shape.items() if _fold(k, folds) != f for i in idx]
        if not train_idx:
            continue
        model = PerfModel.train(
            kdef.name,
            samples[0].device,
            samples[0].arch,
            [rows[i] for i in train_idx],
            [samples[i].latency_us for i in train_idx],
            **kwargs,
        )
        for k in test_shapes:
            idx = by_shape[k]
            measured = [samples[i].latency_us for i in idx]
            predicted = model.predict_us([rows[i] for i in idx])
            order = sorted(range(len(idx)), key=lambda j: predicted[j])
            best = min(measured)
            regrets.append(measured[order[0]] / best)
            hits += any(measured[j] == best for j in order[:5])
    regrets.sort()
    p90 = regrets[min(len(regrets) - 1, int(round(0.9 * (len(regrets) - 1))))]
    return Report(
        kdef.name,
        samples[0].device,
        len(regrets),
        len(samples),
        statistics.median(regrets),
        p90,
        regrets[-1],
        hits / len(regrets),
    )
