"""`spio.tune.trees` predicts what XGBoost predicts, bit for bit: every shipped model on sampled
layers with all their configs, a trained model on rows with missing, infinite and threshold
values, whatever the trees' node numbering; malformed boosters are refused (ModelFormatError).

The oracle is XGBoost itself (`Booster.inplace_predict(..., predict_type="margin")` on the
float32 matrix XGBoost is given). Margins must be equal to the bit, so the ranking is XGBoost's
stable argsort exactly. Latencies are exp(margin): in float64 here, in float32 by numpy there,
whose exp is within 2 ulps (libm's or numpy's SIMD one) and rounded: EXP_ULPS float32 ulps
apart at most, each at most 2**-23 of the value.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random

import numpy as np
import pytest
import xgboost as xgb

from spio.cuda import known_device
from spio.errors import ModelFormatError
from spio.kernels import KERNELS
from spio.tune.features import feature_columns
from spio.tune.model import PerfModel, read_text
from spio.tune.rank import best, rank
from spio.tune.store import PACKAGE_MODELS, SUFFIX
from spio.tune.trees import Trees

SHIPPED = sorted(PACKAGE_MODELS.glob(f"*{SUFFIX}"))
PAST_A_FIELD = 300  # rounds: more trees than 257, the most whose byte sums a 16-bit field holds
SAMPLED = 2  # sampled layers per shipped model and run, on top of the family's examples
EXP_ULPS = 3


def _booster(data: dict) -> xgb.Booster:
    booster = xgb.Booster()
    booster.load_model(bytearray(json.dumps(data["booster"]).encode()))
    booster.set_param({"nthread": 1})
    return booster


def _xgb_margins(booster: xgb.Booster, columns) -> np.ndarray:
    """XGBoost's margins of the rows whose features are `columns` (float64 -> float32, as the
    selection path's float32 matrix was built)."""
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as the evaluator rounds it
        x = np.ascontiguousarray(np.asarray(columns, dtype=np.float64).T.astype(np.float32))
    return booster.inplace_predict(x, predict_type="margin")


def _assert_bitwise(got: list[float], want: np.ndarray, where: str) -> None:
    got32 = np.asarray(got, dtype=np.float32)
    assert np.asarray(got).tolist() == got32.tolist(), f"{where}: margins are not float32 values"
    bad = np.flatnonzero(got32.view(np.uint32) != want.view(np.uint32))
    lines = [f"  row {i}: spio {got32[i]!r}, xgboost {want[i]!r}" for i in bad[:16]]
    assert not len(bad), f"{where}: {len(bad)} of {len(want)} margins differ\n" + "\n".join(lines)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name.split("__")[0])
def test_shipped_model_predicts_and_ranks_as_xgboost(path, seed):
    data = json.loads(read_text(path))
    booster = _booster(data)
    model = PerfModel.load(path)
    kdef = KERNELS[model.kernel]
    dev = known_device(model.device)  # the GPU it was trained on (H100, or the H200)
    assert dev.arch == "sm_90"
    rng = random.Random(seed)
    layers = list(kdef.examples()) + [kdef.sample_params(rng) for _ in range(SAMPLED)]
    for params in layers:
        configs = kdef.configs(params, dev)
        if not configs:
            continue
        where = f"{model.kernel} {params} seed={seed}"
        columns = feature_columns(kdef, params, configs, dev, model.feature_names)
        want = _xgb_margins(booster, columns)
        predicted = model.trees.predict(columns)
        _assert_bitwise(predicted.margins(), want, where)
        # The float64 sums best() prunes with are within the derived bound of the margins.
        sums = [s + model.trees.base for s in predicted.sums()]
        off = max(abs(s - w) for s, w in zip(sums, want.tolist(), strict=True))
        assert off <= model.trees.bound, f"{where}: float64 sums {off} off the margins"
        order = np.argsort(want, kind="stable").tolist()
        ranked = rank(kdef, params, dev, model)
        assert [c for c, _ in ranked] == [configs[i] for i in order], f"{where}: ranking"
        us = np.exp(want[order]).astype(np.float64)
        got_us = np.asarray([u for _, u in ranked])
        assert np.all(np.abs(got_us - us) <= EXP_ULPS * 2.0**-23 * us), f"{where}: latencies"
        assert best(kdef, params, dev, model) == ranked[0], f"{where}: best is not rank's first"


@functools.cache
def _trained(seed: int, rounds: int = 40) -> tuple[PerfModel, list[str]]:
    """A small model trained on rows with missing values, so its splits send missing values
    both ways (default_left 0 and 1)."""
    rng = random.Random(seed)
    names = ["a", "b", "c", "d"]
    rows, latency = [], []
    for _ in range(400):
        row = {
            "a": rng.choice([1.0, 2.0, 4.0, 8.0, math.nan]),
            "b": rng.uniform(-5, 5) if rng.random() < 0.8 else math.nan,
            "c": float(rng.randrange(1000)),
            "d": rng.choice([0.1, 0.2, 0.3]) if rng.random() < 0.5 else math.nan,
        }
        a = 3.0 if math.isnan(row["a"]) else row["a"]
        b = -2.0 if math.isnan(row["b"]) else row["b"]
        d = 0.25 if math.isnan(row["d"]) else row["d"]
        rows.append(row)
        latency.append(math.exp(1 + 0.3 * a + 0.2 * abs(b) + row["c"] / 500 + d))
    return PerfModel.train("synthetic", "GPU", "sm_90", rows, latency, rounds=rounds), names


def test_missing_infinite_and_threshold_values_split_as_in_xgboost(seed):
    model, names = _trained(seed)
    data = json.loads(model.to_json())
    trees = data["booster"]["learner"]["gradient_booster"]["model"]["trees"]
    directions = {
        d
        for t in trees
        for d, c in zip(t["default_left"], t["left_children"], strict=True)
        if c >= 0
    }
    assert directions == {0, 1}, "the training data should teach both missing-value directions"
    thresholds = [
        (f, x)
        for t in trees
        for f, x, c in zip(
            t["split_indices"], t["split_conditions"], t["left_children"], strict=True
        )
        if c >= 0
    ]
    rng = random.Random(seed)
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e39, -1e39]
    columns: list[list[float]] = [[] for _ in names]
    for _ in range(600):  # > 255 distinct values a column: the row-by-row masks too
        f, x = rng.choice(thresholds)
        x32 = float(np.float32(x))
        near = float(np.nextafter(x32, math.inf)) if rng.random() < 0.5 else x32 * (1 - 2**-30)
        for j, column in enumerate(columns):
            pick = rng.random()
            if j == f and pick < 0.6:
                column.append(x32 if pick < 0.3 else near)  # on a threshold, or rounding to it
            elif pick < 0.8:
                column.append(rng.uniform(-10, 1000))
            else:
                column.append(rng.choice(specials))
    _assert_bitwise(model.trees.predict(columns).margins(), _xgb_margins(model.booster, columns),
                    f"seed={seed}")  # fmt: skip
    few = [column[:40] for column in columns]  # a batch of few values a column: byte classes
    _assert_bitwise(
        model.trees.predict(few).margins(), _xgb_margins(model.booster, few), f"seed={seed}"
    )


def _renumbered(tree: dict, rng: random.Random) -> dict:
    """The same tree with its nodes numbered in another order (root first; a child may come
    before its parent, as when XGBoost reuses a pruned node's slot)."""
    n = len(tree["left_children"])
    new = [0] + rng.sample(range(1, n), n - 1)  # old node -> new number
    old = {g: i for i, g in enumerate(new)}
    out = dict(tree)
    for key in ("split_indices", "split_conditions", "default_left", "split_type"):
        out[key] = [tree[key][old[g]] for g in range(n)]
    for key in ("left_children", "right_children"):
        out[key] = [new[tree[key][old[g]]] if tree[key][old[g]] >= 0 else -1 for g in range(n)]
    return out


def test_node_numbering_does_not_change_predictions(seed):
    model, names = _trained(seed)
    data = json.loads(model.to_json())
    rng = random.Random(seed)
    gbm = data["booster"]["learner"]["gradient_booster"]["model"]
    gbm["trees"] = [_renumbered(t, rng) for t in gbm["trees"]]
    assert any(c < g for t in gbm["trees"] for g, c in enumerate(t["left_children"]) if c >= 0), (
        "no child numbered before its parent: the test would not test it"
    )
    renumbered = Trees(data["booster"], len(names))
    columns = [[rng.choice([math.nan, rng.uniform(-5, 1000)]) for _ in range(200)] for _ in names]
    assert renumbered.predict(columns).margins() == model.trees.predict(columns).margins()


def _mutations() -> list[tuple[str, str]]:
    return [
        ("objective", "objective"),
        ("num_feature", "features"),
        ("dart", "gbtree"),
        ("no_trees", "trees"),
        ("child_out_of_range", "out of range"),
        ("loop_to_root", "reached twice"),
        ("loop_to_parent", "reached twice"),
        ("categorical", "categorical"),
        ("nan_leaf", "finite"),
        ("float_index", "types"),
        ("base_score", "base_score"),
        ("lengths", "different lengths"),
        ("not_a_list", "readable"),
    ]


@pytest.mark.parametrize(("mutation", "message"), _mutations(), ids=[m for m, _ in _mutations()])
def test_malformed_booster_is_refused(mutation, message):
    model, _ = _trained(0)
    data = json.loads(model.to_json())
    learner = data["booster"]["learner"]
    trees = learner["gradient_booster"]["model"]["trees"]
    tree = trees[1]
    inner = next(g for g, c in enumerate(tree["left_children"]) if c >= 0 and g > 0)
    leaf = tree["left_children"].index(-1)
    if mutation == "objective":
        learner["objective"]["name"] = "binary:logistic"
    elif mutation == "num_feature":
        learner["learner_model_param"]["num_feature"] = "5"
    elif mutation == "dart":
        learner["gradient_booster"]["name"] = "dart"
    elif mutation == "no_trees":
        del learner["gradient_booster"]["model"]["trees"]
    elif mutation == "child_out_of_range":
        tree["left_children"][0] = len(tree["left_children"])
    elif mutation == "loop_to_root":
        tree["left_children"][inner] = 0
    elif mutation == "loop_to_parent":
        sides = (tree["left_children"], tree["right_children"])
        parent = next(g for g in range(len(sides[0])) if inner in (sides[0][g], sides[1][g]))
        tree["right_children"][inner] = parent
    elif mutation == "categorical":
        tree["split_type"][0] = 1
    elif mutation == "nan_leaf":
        tree["split_conditions"][leaf] = math.nan
    elif mutation == "float_index":
        tree["split_indices"][0] = 0.5
    elif mutation == "base_score":
        learner["learner_model_param"]["base_score"] = "[1,2]"
    elif mutation == "lengths":
        tree["default_left"].append(0)
    elif mutation == "not_a_list":
        tree["left_children"] = None
    with pytest.raises(ModelFormatError, match=message):
        PerfModel.from_json(json.dumps(data))


def test_broken_model_file_fields_are_refused():
    model, _ = _trained(0)
    with pytest.raises(ModelFormatError, match="not JSON"):
        PerfModel.from_json(model.to_json()[:-1])
    data = json.loads(model.to_json())
    del data["features"]
    with pytest.raises(ModelFormatError, match="features"):
        PerfModel.from_json(json.dumps(data))
    data = copy.deepcopy(json.loads(model.to_json()))
    data["booster"] = []
    with pytest.raises(ModelFormatError, match="learner"):
        PerfModel.from_json(json.dumps(data))


@pytest.mark.parametrize("rows", [1, 2, 3, 257])
def test_sums_bound_and_pick_past_one_flush_of_the_16_bit_fields(seed, rows):
    """More trees than a 16-bit field sums (`trees._FLUSH`), batches of one row, odd and even row
    counts: every approximate sum within `Trees.bound` of XGBoost's margin minus base_score, and
    `best` is XGBoost's first smallest margin."""
    from spio.tune import trees as trees_module

    model, names = _trained(seed, rounds=PAST_A_FIELD)
    assert model.trees.n_trees > trees_module._FLUSH, "the test would not cross a flush"
    rng = random.Random(seed)
    columns = [[rng.choice([math.nan, rng.uniform(-5, 1000)]) for _ in range(rows)] for _ in names]
    want = _xgb_margins(model.booster, columns)
    predicted = model.trees.predict(columns)
    _assert_bitwise(predicted.margins(), want, f"seed={seed} rows={rows}")
    sums = [s + model.trees.base for s in predicted.sums()]
    off = max(abs(s - w) for s, w in zip(sums, want.tolist(), strict=True))
    assert off <= model.trees.bound, f"seed={seed} rows={rows}: sums {off} off the margins"
    row, margin = predicted.best()
    assert row == int(np.argmin(want)) and margin == float(want[row])


def test_sums_flush_before_a_16_bit_field_overflows(seed):
    """Trees whose leaves are all the widest count (65535 steps: low and high byte 255) but one:
    a row summing them in more trees than `trees._FLUSH` would overflow a 16-bit field without
    the flush."""

    model, names = _trained(seed, rounds=PAST_A_FIELD)
    data = json.loads(model.to_json())
    widest = 65535 / 65536  # so the step is 2**-16 and this leaf 65535 steps above 0
    for tree in data["booster"]["learner"]["gradient_booster"]["model"]["trees"]:
        leaves = [g for g, c in enumerate(tree["left_children"]) if c < 0]
        for g in leaves:
            tree["split_conditions"][g] = 0.0 if g == leaves[0] else widest
    trees = Trees(data["booster"], len(names))
    rng = random.Random(seed)
    columns = [[rng.choice([math.nan, rng.uniform(-5, 1000)]) for _ in range(64)] for _ in names]
    predicted = trees.predict(columns)
    margins = predicted.margins()
    sums = [s + trees.base for s in predicted.sums()]
    assert max(margins) > trees.base + 257 * widest, "no row's low bytes pass a 16-bit field"
    off = max(abs(s - m) for s, m in zip(sums, margins, strict=True))
    assert off <= trees.bound, f"seed={seed}: sums {off} off the margins"


def test_best_is_the_first_smallest_margin_among_near_ties(seed):
    """Leaves of large magnitude a few float32 ulps apart: the rows' float32 margins and their
    exact sums order differently, so `best` must keep every row within the bound of the
    smallest approximate sum (pruning at the smallest alone picks wrong rows here)."""
    model, names = _trained(seed, rounds=PAST_A_FIELD)
    data = json.loads(model.to_json())
    rng = random.Random(seed)
    for tree in data["booster"]["learner"]["gradient_booster"]["model"]["trees"]:
        for g, c in enumerate(tree["left_children"]):
            if c < 0:
                tree["split_conditions"][g] = 1024.0 + rng.randrange(4) * 2.0**-13
    trees = Trees(data["booster"], len(names))
    wrong = []
    for batch in range(40):
        rows = rng.randrange(1, 60)
        columns = [[rng.uniform(-5, 1000) for _ in range(rows)] for _ in names]
        predicted = trees.predict(columns)
        margins = predicted.margins()
        first = margins.index(min(margins))
        if predicted.best() != (first, margins[first]):
            wrong.append(batch)
    assert not wrong, f"seed={seed}: best() is not the first smallest margin in batches {wrong}"
