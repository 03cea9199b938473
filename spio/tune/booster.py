"""XGBoost's JSON booster (`Booster.save_raw("json")`), read and checked for `spio.tune.trees`.

Read: `learner.learner_model_param` (base_score, num_feature, one output), the objective (only
`reg:squarederror`: an identity link, the margin is the prediction) and the `gbtree` trees'
node arrays (left_children, right_children, split_indices, split_conditions, default_left,
split_type). Anything else a model file may hold, or a booster that is malformed (arrays of
different lengths or types, indices out of range, a tree whose walk loops, a leaf that is not a
finite number, categorical splits), is refused with `ModelFormatError`, whose message says to
retrain (`spio tune train`).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from itertools import accumulate, chain, compress, repeat
from operator import eq, ge, gt, lt, not_
from typing import Any

from spio.errors import ModelFormatError

OBJECTIVES = ("reg:squarederror",)  # identity link: the margin is the prediction


@dataclass(frozen=True)
class Nodes:
    """Every tree's nodes, concatenated in tree order (children numbered within their tree).

    value: split_conditions as float32, a leaf's value or the node's threshold.
    sizes: each tree's node count. internal: whether a node splits.
    """

    base: float  # base_score, float32
    left: list[int]
    right: list[int]
    feature: list[int]
    value: list[float]
    default_left: list[int]
    sizes: list[int]
    internal: list[bool]


def read_booster(booster: dict[str, Any], n_features: int) -> Nodes:
    """The nodes of a booster with one output and `n_features` features, checked."""
    learner = _field(booster, "learner", dict)
    params = _field(learner, "learner_model_param", dict)
    objective = _field(_field(learner, "objective", dict), "name", str)
    if objective not in OBJECTIVES:
        raise ModelFormatError(
            f"booster objective {objective!r}: spio predicts with {' or '.join(OBJECTIVES)} "
            "models (an identity link); retrain with `spio tune train`"
        )
    if str(params.get("num_class", "0")) != "0" or str(params.get("num_target", "1")) != "1":
        raise ModelFormatError(
            "booster has several outputs (num_class/num_target); a spio model predicts one "
            "latency: retrain with `spio tune train`"
        )
    if str(params.get("num_feature")) != str(n_features):
        raise ModelFormatError(
            f"booster has {params.get('num_feature')} features, the model file lists "
            f"{n_features}; the file is corrupt: retrain with `spio tune train`"
        )
    gbm = _field(learner, "gradient_booster", dict)
    if gbm.get("name") != "gbtree":
        raise ModelFormatError(
            f"booster {gbm.get('name')!r}: spio reads gbtree boosters (dart weighs its "
            "trees, gblinear has none); retrain with `spio tune train`"
        )
    trees = _field(_field(gbm, "model", dict), "trees", list)
    return Nodes(_base_score(params), *_arrays(trees, n_features))


def _field(obj: Any, key: str, kind: type) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise ModelFormatError(
            f"booster JSON has no {kind.__name__} {key!r}: not an XGBoost JSON model "
            "(Booster.save_raw('json')); retrain with `spio tune train`"
        )
    return value


def _base_score(params: dict[str, Any]) -> float:
    """base_score as float32; XGBoost 3 writes it as a one-element list in a string, '[5.4E0]'."""
    raw = str(params.get("base_score", "")).strip()
    text = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    try:
        (value,) = (float(x) for x in text.split(","))
    except ValueError:
        raise ModelFormatError(
            f"booster base_score {raw!r} is not one number; retrain with `spio tune train`"
        ) from None
    if not math.isfinite(value):
        raise ModelFormatError(f"booster base_score is {value}; retrain with `spio tune train`")
    return array("f", [value])[0]


def _arrays(trees: list[Any], n_features: int) -> tuple[list, ...]:
    """The node arrays of all trees, concatenated and checked: (left, right, feature, value,
    default_left, sizes, internal); `value` is split_conditions as float32 (a leaf's value, or
    the node's threshold), children are numbered within their tree, `sizes` counts each tree's
    nodes, `internal` says whether a node splits."""
    keys = ("left_children", "right_children", "split_indices", "split_conditions")
    try:
        arrays = [[tree[k] for tree in trees] for k in (*keys, "default_left")]
        sizes = list(map(len, arrays[0]))
        left, right, feature, _, default_left = (list(chain.from_iterable(a)) for a in arrays)
        value = array("f", chain.from_iterable(arrays[3])).tolist()  # float32, as XGBoost reads
        internal = list(map(ge, left, repeat(0)))
        well_formed = (
            trees
            and 0 not in sizes
            and all(list(map(len, a)) == sizes for a in arrays[1:])
            and all(type(sum(a)) is int for a in (left, right, feature))  # no float index
            and set(default_left) <= {0, 1}
            and list(map(ge, right, repeat(0))) == internal  # a leaf has no child at all
            and min(min(left), min(right)) >= -1
            and all(map(lt, map(max, arrays[0]), sizes))
            and all(map(lt, map(max, arrays[1]), sizes))
            and all(0 <= f < n_features for f in set(compress(feature, internal)))
            and all(map(eq, value, value))  # no NaN threshold or leaf
            and all(map(math.isfinite, compress(value, map(not_, internal))))
        )
        categorical = any(any(tree.get("split_type", ())) for tree in trees)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ModelFormatError(
            f"booster trees have no readable node arrays ({type(e).__name__}: {e}); retrain "
            "with `spio tune train`"
        ) from None
    if not well_formed:
        raise ModelFormatError(
            "booster trees: none, an empty one, node arrays of different lengths or types, a "
            "child or feature index out of range, or a leaf that is not a finite number; the "
            "file is corrupt: retrain with `spio tune train`"
        )
    if categorical:
        raise ModelFormatError(
            "booster splits a categorical feature; spio's models split numbers only: retrain "
            "with `spio tune train`"
        )
    parents = list(compress(chain.from_iterable(map(range, sizes)), internal))
    if not all(map(gt, compress(left, internal), parents)) or not all(
        map(gt, compress(right, internal), parents)
    ):  # a child before its parent (XGBoost reused a pruned node's slot): a walk must end
        for t, (a, n) in enumerate(zip(accumulate(sizes, initial=0), sizes, strict=False)):
            _check_tree(left[a : a + n], right[a : a + n], t)
    return left, right, feature, value, default_left, sizes, internal


def _check_tree(left: list[int], right: list[int], t: int) -> None:
    """Raises ModelFormatError if a walk of tree t from its root reaches a node twice."""
    seen, todo = set(), [0]
    while todo:
        g = todo.pop()
        if g in seen:
            raise ModelFormatError(
                f"booster tree {t}: node {g} is reached twice; the file is corrupt: retrain "
                "with `spio tune train`"
            )
        seen.add(g)
        if left[g] >= 0:
            todo += [left[g], right[g]]
