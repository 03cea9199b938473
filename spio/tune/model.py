"""An XGBoost regressor of log latency for one kernel family on one GPU, and its file format.

File (gzipped JSON): {"format": 1, "kernel": ..., "device": ..., "arch": ...,
"features": [names...], "n_samples": ..., "booster": <XGBoost's own JSON model>}. The feature
list is stored so a model trained against another version of a family's features is refused
instead of mispredicting (`ModelFormatError`, defined in `spio.errors`, importable from here).

XGBoost (and numpy) train and save a model; predictions, a loaded model's and a trained one's
alike, come from its trees evaluated in plain Python (`spio.tune.trees`), bit for bit what
XGBoost predicts, so a process that selects configs never imports either.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spio.errors import ModelFormatError
from spio.tune.trees import Trees

MODEL_FORMAT = 1

# Small trees, many rounds: the latency surface is smooth in tile sizes and piecewise in waves.
# eta 0.08 x 250 rounds (was 0.15 x 150): on held-out shapes (5 folds by shape, mean over 3
# training seeds; benchmarks/tune_experiments.py) it lowered the mean regret of 5 of 6 families and
# p90 of all 6, for 0.05-0.35 ms more prediction time per selection (XGBoost's predictor; 0.3-1 ms
# with spio.tune.trees). Ranking objectives, fast-config weights, per-shape-relative targets,
# robust losses, bagging and eta 0.05 x 450 were tried; none gained consistently across families
# for its cost (docs/tuning.md).
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

# Node arrays of XGBoost's JSON that prediction doesn't read (gains, hessian sums, parents,
# unscaled weights, categories; flat lists of numbers, never last in their tree's object).
# Dropped from the text before parsing, they halve json.loads's time (~5 ms of the ~50 a
# process's first selection may take on the 2-core development host).
_UNREAD = re.compile(
    r'"(?:base_weights|loss_changes|sum_hessian|parents|categories(?:_nodes|_segments|_sizes)?)"'
    r":\[[-+0-9.eE,]*\],"
)


@dataclass
class PerfModel:
    """Predicts latency (µs) of configs of one kernel family on one GPU."""

    kernel: str
    device: str
    arch: str
    feature_names: tuple[str, ...]
    trees: Trees  # what predicts
    n_samples: int = 0
    booster: Any = None  # the xgboost.Booster of a model trained in this process (to save it)

    @classmethod
    def train(
        cls,
        kernel: str,
        device: str,
        arch: str,
        rows: Sequence[dict[str, float]],
        latency_us: Sequence[float],
        rounds: int = ROUNDS,
        seed: int = 0,
    ) -> PerfModel:
        """Fits log latency; `seed` seeds XGBoost's row and column subsampling (the shipped
        models use 0; `spio tune eval --seeds` trains with several to show how much held-out
        regret owes to it)."""
        import numpy as np
        import xgboost as xgb

        if not rows:
            raise ValueError(f"PerfModel.train: no samples for {kernel} on {device}")
        names = tuple(rows[0])
        x = _matrix(rows, names)
        y = np.log(np.asarray(latency_us, dtype=np.float64))
        booster = xgb.train(
            {**TRAIN_PARAMS, "seed": seed},
            xgb.DMatrix(x, label=y, feature_names=list(names)),
            rounds,
        )
        trees = Trees(json.loads(booster.save_raw(raw_format="json")), len(names))
        return cls(kernel, device, arch, names, trees, len(rows), booster)

    def predict_us(self, rows: Sequence[dict[str, float]]) -> list[float]:
        """Predicted latency in µs of each feature row."""
        if rows:
            self.require(rows[0])
        columns = [[float(r[n]) if n in r else math.nan for r in rows] for n in self.feature_names]
        return [math.exp(m) for m in self.trees.predict(columns).margins()]

    def require(self, provided: Iterable[str]) -> None:
        """Raises ModelFormatError unless every feature the model needs is in `provided`."""
        missing = set(self.feature_names).difference(provided)
        if missing:
            raise ModelFormatError(
                f"model {self.kernel}/{self.device} needs features {sorted(missing)} that the "
                "kernel family no longer provides; retrain with `spio tune train`"
            )

    def to_json(self) -> str:
        if self.booster is None:
            raise ValueError(
                f"PerfModel.to_json: model {self.kernel}/{self.device} was loaded from a file "
                "and keeps no XGBoost booster to save; copy that file, or save a model from "
                "PerfModel.train"
            )
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
        """A model from a file's JSON text, with its trees ready to predict (no XGBoost)."""
        try:
            data = json.loads(_UNREAD.sub("", text))
        except ValueError as e:
            raise ModelFormatError(
                f"model file is not JSON ({e}); retrain with `spio tune train`"
            ) from None
        if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ModelFormatError(
                f"model format {found!r}, this spio reads {MODEL_FORMAT}; "
                "retrain with `spio tune train`"
            )
        try:
            kernel, device, arch = (str(data[k]) for k in ("kernel", "device", "arch"))
            names = tuple(str(n) for n in data["features"])
            booster = data["booster"]
        except (KeyError, TypeError) as e:
            raise ModelFormatError(
                f"model file lacks its {e} field; retrain with `spio tune train`"
            ) from None
        return cls(
            kernel, device, arch, names, Trees(booster, len(names)), data.get("n_samples", 0)
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


def _matrix(rows: Sequence[dict[str, float]], names: Sequence[str]) -> Any:
    """The float32 numpy matrix XGBoost trains on (rows x `names`)."""
    import numpy as np

    if rows and tuple(rows[0]) == tuple(names):  # the family's own key order: no per-key lookups
        return np.asarray([list(r.values()) for r in rows], dtype=np.float32)
    return np.asarray([[r.get(n, math.nan) for n in names] for r in rows], dtype=np.float32)
