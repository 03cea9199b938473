"""An XGBoost regressor of log latency for one kernel family on one GPU, and its file format.

File (gzipped JSON): {"format": 1, "kernel": ..., "device": ..., "arch": ...,
"features": [names...], "n_samples": ..., "booster": <XGBoost's own JSON model>}. The feature
list is stored so a model trained against another version of a family's features is refused
instead of mispredicting (`ModelFormatError`, defined in `spio.errors`, importable from here).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spio.errors import ModelFormatError

MODEL_FORMAT = 1

# Small trees, many rounds: the latency surface is smooth in tile sizes and piecewise in waves.
# eta 0.08 x 250 rounds (was 0.15 x 150): on held-out shapes (5 folds by shape, mean over 3
# training seeds; benchmarks/tune_experiments.py) it lowered the mean regret of 5 of 6 families and
# p90 of all 6, for 0.05-0.35 ms more prediction time per selection. Ranking objectives,
# fast-config weights, per-shape-relative targets, robust losses, bagging and eta 0.05 x 450
# were tried; none gained consistently across families for its cost (docs/tuning.md).
TRAIN_PARAMS = {
    "objective": "reg:squarederror",
    "eta": 0.08,
    "max_depth": 5,
    "min_child_weight": 1.0,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "nthread": 0,
    "seed": 0,
}
ROUNDS = 250  # with depth 5: ~0.2 MB gzipped; deeper trees overfit the held-out shapes


@dataclass
class PerfModel:
    """Predicts latency (µs) of configs of one kernel family on one GPU."""

    kernel: str
    device: str
    arch: str
    feature_names: tuple[str, ...]
    booster: Any  # xgboost.Booster
    n_samples: int = 0

    @classmethod
    def train(
        cls,
        kernel: str,
        device: str,
        arch: str,
        rows: Sequence[dict[str, float]],
        latency_us: Sequence[float],
        rounds: int = ROUNDS,
    ) -> PerfModel:
        import xgboost as xgb

        if not rows:
            raise ValueError(f"PerfModel.train: no samples for {kernel} on {device}")
        names = tuple(rows[0])
        x = _matrix(rows, names)
        y = np.log(np.asarray(latency_us, dtype=np.float64))
        booster = xgb.train(
            TRAIN_PARAMS, xgb.DMatrix(x, label=y, feature_names=list(names)), rounds
        )
        return cls(kernel, device, arch, names, booster, len(rows))

    def predict_us(self, rows: Sequence[dict[str, float]]) -> np.ndarray:
        """Predicted latency in µs of each feature row."""
        if rows:
            self.require(rows[0])
        return self.predict_matrix_us(_matrix(rows, self.feature_names))

    def require(self, provided: Iterable[str]) -> None:
        """Raises ModelFormatError unless every feature the model needs is in `provided`."""
        missing = set(self.feature_names).difference(provided)
        if missing:
            raise ModelFormatError(
                f"model {self.kernel}/{self.device} needs features {sorted(missing)} that the "
                "kernel family no longer provides; retrain with `spio tune train`"
            )

    def predict_matrix_us(self, x: np.ndarray) -> np.ndarray:
        """Predicted latency in µs of each row of a float32 matrix whose columns are
        `feature_names` (see `spio.tune.features.feature_matrix`)."""
        return np.exp(self.booster.inplace_predict(x))

    def to_json(self) -> str:
        raw = self.booster.save_raw(raw_format="json").decode()
        return json.dumps(
            {
                "format": MODEL_FORMAT,
                "kernel": self.kernel,
                "device": self.device,
                "arch": self.arch,
                "features": list(self.feature_names),
                "n_samples": self.n_samples,
                "booster": json.loads(raw),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> PerfModel:
        import xgboost as xgb

        data = json.loads(text)
        if data.get("format") != MODEL_FORMAT:
            raise ModelFormatError(
                f"model format {data.get('format')!r}, this spio reads {MODEL_FORMAT}; "
                "retrain with `spio tune train`"
            )
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(data["booster"]).encode()))
        booster.set_param(
            {"nthread": 1}
        )  # one row batch per call: threads cost more than they save
        return cls(
            data["kernel"],
            data["device"],
            data["arch"],
            tuple(data["features"]),
            booster,
            data.get("n_samples", 0),
        )

    def save(self, path: Path) -> None:
        """Writes gzipped JSON atomically (mtime 0, so the same model gives the same bytes)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(gzip.compress(self.to_json().encode(), mtime=0))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> PerfModel:
        return cls.from_json(read_text(path))


def read_text(path: Path) -> str:
    """The JSON text of a model file."""
    return gzip.decompress(path.read_bytes()).decode()


def _matrix(rows: Sequence[dict[str, float]], names: Sequence[str]) -> np.ndarray:
    if rows and tuple(rows[0]) == tuple(names):  # the family's own key order: no per-key lookups
        return np.asarray([list(r.values()) for r in rows], dtype=np.float32)
    return np.asarray([[r.get(n, math.nan) for n in names] for r in rows], dtype=np.float32)
