"""Held-out regret of performance-model training recipes, on the datasets in benchmarks/data/tune.

CPU only. Same split as `spio tune eval` (5 folds by layer: the params' integer dimensions without
the batch-like one, so no layer is in both train and test at any batch size, dtype or layout;
`--split params` folds by full params, the split before), with regret per full params, but
averaged over several training seeds: one seed's max regret swings by 2-20x on these
datasets (a single pick of a mismeasured config decides it), so recipes are compared on the mean
over seeds of each statistic. `--clean` also reports the regret with *suspect* samples dropped
from the dataset: measured more than 2x above what a model trained on the other folds predicts,
relative to the rest of their shape (mostly bursts of consecutive rows: timing noise at
collection, see docs/tuning.md). `--suspects` lists them (dataset line numbers); `--worst N`
prints each family's N worst held-out shapes.

    python benchmarks/tune_experiments.py --recipe shipped baseline --seeds 0 1 2 [--clean]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from spio.tune.evaluate import SPLITS, Split, fold_of, group_key
from spio.tune.model import ROUNDS, TRAIN_PARAMS

DATA = Path(__file__).parent / "data" / "tune"
FAMILIES = (
    "conv2d_gw8_fprop",
    "conv2d_gw8_dgrad",
    "conv2d_gw8_wgrad",
    "layernorm_2d_fwd",
    "layernorm_2d_bwd",
    "matmul",
)
Scorer = Callable[[np.ndarray], np.ndarray]  # lower = predicted faster
Recipe = Callable[[np.ndarray, np.ndarray, list[str], list[str], int], Scorer]


def load(kernel: str, split: Split = "layer") -> dict:
    """Feature matrix, latencies, shape keys, fold group keys and configs of a family's dataset."""
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import feature_rows

    samples = read(DATA / f"{kernel}.jsonl.gz", kernel)
    rows = feature_rows(KERNELS[kernel], samples, _device_for(samples[0].device))
    names = list(rows[0])
    return {
        "x": np.asarray([[r[n] for n in names] for r in rows], dtype=np.float32),
        "t": np.asarray([s.latency_us for s in samples]),
        "keys": [s.shape_key() for s in samples],
        "groups": [group_key(KERNELS[kernel], s, split) for s in samples],
        "configs": [json.dumps(s.config, sort_keys=True) for s in samples],
        "names": names,
    }


def _groups(keys: list[str]) -> dict[str, list[int]]:
    g: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        g[k].append(i)
    return g


def _relative(y: np.ndarray, keys: list[str]) -> np.ndarray:
    """log t minus the log of the fastest sample of the same shape."""
    rel = np.empty_like(y)
    for idx in _groups(keys).values():
        rel[idx] = y[idx] - y[idx].min()
    return rel


def regressor(
    params: dict | None = None,
    rounds: int = ROUNDS,
    weight_exp: float = 0.0,
    relative: bool = False,
) -> Recipe:
    """XGBoost regression of log t (or of log t relative to the shape's fastest sample), with
    optional weights exp(-weight_exp * relative) that emphasise each shape's fast configs."""

    def recipe(x, t, keys, names, seed):
        import xgboost as xgb

        y = np.log(t)
        rel = _relative(y, keys)
        w = np.exp(-weight_exp * rel) if weight_exp else None
        p = dict(TRAIN_PARAMS, **(params or {}), seed=seed)
        d = xgb.DMatrix(x, label=rel if relative else y, weight=w, feature_names=names)
        booster = xgb.train(p, d, rounds)
        return booster.inplace_predict

    return recipe


def ranker(objective: str = "rank:pairwise", rounds: int = ROUNDS) -> Recipe:
    """XGBoost learning to rank, one query per shape; labels: 5% speed grades below the best."""

    def recipe(x, t, keys, names, seed):
        import xgboost as xgb

        groups = _groups(keys)
        order = np.array([i for idx in groups.values() for i in idx])
        qid = np.empty(len(t), dtype=np.int64)
        for q, idx in enumerate(groups.values()):
            qid[idx] = q
        grade = np.clip(np.floor(-_relative(np.log(t), keys) / np.log(1.05)) + 20, 0, 31)
        d = xgb.DMatrix(x[order], label=grade[order], qid=qid[order], feature_names=names)
        booster = xgb.train(dict(TRAIN_PARAMS, objective=objective, seed=seed), d, rounds)
        return lambda xt: -booster.inplace_predict(xt)

    return recipe


RECIPES: dict[str, Recipe] = {
    "shipped": regressor(),
    "eta05": regressor({"eta": 0.05}, rounds=450),
    "baseline": regressor({"eta": 0.15}, rounds=150),  # the recipe before issue 6's tuning
    "fast_weights": regressor(weight_exp=3.0),
    "relative": regressor(relative=True),
    "pairwise": ranker(),
    "ndcg": ranker("rank:ndcg"),
    "depth4": regressor({"max_depth": 4}),
    "depth6": regressor({"max_depth": 6}),
}


def evaluate(data: dict, recipe: Recipe, seed: int, folds: int = 5) -> tuple[dict, list]:
    x, t, keys = data["x"], data["t"], data["keys"]
    groups = _groups(keys)
    fold = np.array([fold_of(g, folds) for g in data["groups"]])  # by layer (or params)
    shape_fold = {k: int(fold[idx[0]]) for k, idx in groups.items()}
    regrets, hits, worst = [], 0, []
    for f in range(folds):
        train = np.array([i for k, idx in groups.items() if shape_fold[k] != f for i in idx])
        score = recipe(x[train], t[train], [keys[i] for i in train], data["names"], seed)
        for k in (k for k in groups if shape_fold[k] == f):
            idx = np.array(groups[k])
            order = np.argsort(score(x[idx]), kind="stable")
            measured = t[idx]
            best = int(np.argmin(measured))
            regrets.append(measured[order[0]] / measured[best])
            hits += best in order[:5]
            rank_of_best = int(np.where(order == best)[0][0])
            worst.append(
                (
                    regrets[-1],
                    k,
                    len(idx),
                    measured[best],
                    measured[order[0]],
                    data["configs"][idx[order[0]]],
                    data["configs"][idx[best]],
                    rank_of_best,
                )
            )
    r = np.sort(regrets)
    stats = {
        "median": float(np.median(r)),
        "p90": float(r[min(len(r) - 1, int(round(0.9 * (len(r) - 1))))]),
        "max": float(r[-1]),
        "mean": float(r.mean()),
        "top5": hits / len(r),
    }
    return stats, sorted(worst, reverse=True)


def suspects(data: dict, ratio: float = 2.0, folds: int = 5) -> np.ndarray:
    """Samples measured > ratio x above an out-of-fold prediction, relative to their shape."""
    x, t, keys = data["x"], data["t"], data["keys"]
    fold = np.array([fold_of(g, folds) for g in data["groups"]])
    residual = np.zeros(len(t))
    for f in range(folds):
        train = fold != f
        score = RECIPES["baseline"](
            x[train], t[train], [k for k, m in zip(keys, train, strict=True) if m], data["names"], 0
        )
        residual[~train] = np.log(t[~train]) - score(x[~train])
    for idx in _groups(keys).values():
        residual[idx] -= np.median(residual[idx])
    return residual > np.log(ratio)


def _subset(data: dict, keep: np.ndarray) -> dict:
    return {
        "x": data["x"][keep],
        "t": data["t"][keep],
        "keys": [k for k, m in zip(data["keys"], keep, strict=True) if m],
        "groups": [g for g, m in zip(data["groups"], keep, strict=True) if m],
        "configs": [c for c, m in zip(data["configs"], keep, strict=True) if m],
        "names": data["names"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", nargs="*", default=list(FAMILIES))
    ap.add_argument("--recipe", nargs="*", default=["shipped", "baseline"], choices=RECIPES)
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--clean", action="store_true", help="also without suspect samples")
    ap.add_argument("--suspects", action="store_true", help="with --clean: list them")
    ap.add_argument("--worst", type=int, default=0, help="worst held-out shapes to print")
    ap.add_argument("--split", default="layer", choices=SPLITS, help="what the folds split on")
    a = ap.parse_args()
    for kernel in a.kernel:
        data = load(kernel, a.split)
        variants = [("raw", data)]
        if a.clean:
            bad = suspects(data)
            print(f"{kernel}: {int(bad.sum())} of {len(bad)} samples suspect (> 2x)")
            if a.suspects:  # dataset line numbers (1-based), for re-measuring on the GPU
                for i in np.flatnonzero(bad):
                    print(
                        f"    line {i + 1}: {data['t'][i]:.1f} us {data['keys'][i]} "
                        f"{data['configs'][i]}"
                    )
            variants.append(("clean", _subset(data, ~bad)))
        for name in a.recipe:
            for label, d in variants:
                runs = [evaluate(d, RECIPES[name], s) for s in a.seeds]
                mean = {q: np.mean([r[0][q] for r in runs]) for q in runs[0][0]}
                maxes = " ".join(f"{r[0]['max']:.2f}" for r in runs)
                print(
                    f"{kernel:18s} {name:12s} {label:5s} median {mean['median']:.3f} "
                    f"p90 {mean['p90']:.3f} max {mean['max']:.3f} (per seed {maxes}) "
                    f"mean {mean['mean']:.3f} top-5 {mean['top5']:.0%}"
                )
                for w in runs[0][1][: a.worst]:
                    print(
                        f"    {w[0]:.3f}x  {w[1]}  {w[2]} configs, best {w[3]:.1f} us, "
                        f"pick {w[4]:.1f} us {w[5]}, best {w[6]} (predicted rank {w[7]})"
                    )


if __name__ == "__main__":
    main()
