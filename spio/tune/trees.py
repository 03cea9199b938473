"""XGBoost tree ensembles evaluated in plain Python: no XGBoost, no numpy.

The performance models are XGBoost boosters (`spio.tune.model`). Importing XGBoost and numpy and
building a Booster takes ~300 ms on a 2-core host, six times the budget of a process's first
selection, so `Trees` takes the booster's own JSON (read and checked by `spio.tune.booster`) and
predicts what XGBoost's CPU predictor predicts, bit for bit:

- a split sends a row left when `x < split_condition`, both float32 (the features are rounded to
  float32 first: XGBoost is given a float32 matrix); a missing value (NaN) follows `default_left`;
- a leaf's value is its `split_conditions` entry; the margin is `base_score` plus each tree's
  leaf value, accumulated in float32 in tree order (XGBoost adds each tree into a float32
  output); with `reg:squarederror`, the only objective read, the margin is the prediction.

One call evaluates a batch of rows, usually one layer's configs: their layer features are equal
and their config features take a few values each. So the work is per tree, for all rows at once:
1. per feature, the rows that go left at each of the model's thresholds, as a row mask (a byte
   per row, in a Python int), made from the column's few distinct values (`_masks`);
2. each tree is walked once: a node splits the row mask it receives with its threshold's mask,
   and a leaf puts its number in its rows' bytes (`_walk`);
3. a tree's leaf numbers, a byte per row, are kept (`Prediction`): a row's leaf values are
   its bytes in each tree's numbers, looked up in its group's values (consecutive trees whose
   leaves, 256 at most, are numbered apart).
A row's margin is its leaves summed in float32 in XGBoost's order (~15 us a row on the 2-core
development host). `Prediction.best`, XGBoost's top pick, needs that for a few rows only: each
leaf value is also a 16-bit integer count of a power-of-two step above its tree's smallest
leaf, and `bytes.translate` maps a tree's leaf numbers to those counts' low and high bytes for
all rows at once; summed as Python ints with a 16-bit field per row (two ints of even and odd
rows per byte), they give every row's approximate sum, within `Trees.bound` of its margin, so
only the rows within twice the bound of the smallest can be the pick.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, mul, sub
from typing import Any

from spio.errors import ModelFormatError
from spio.tune.booster import read_booster

MAX_LEAVES = 256  # leaf numbers are bytes (a tree of max_depth <= 8 always fits)
_CLASSES = 255  # a column's distinct values that byte classes hold (class 255: NaN)

# Translate tables over byte classes: _BELOW[k] maps the classes below k to 1.
_BELOW = [bytes([1]) * k + bytes(256 - k) for k in range(256)]


def float32(values: Sequence[float]) -> list[float]:
    """The values rounded to float32 (to nearest, ties to even; beyond float32's range: +-inf)."""
    return array("f", values).tolist()


class Trees:
    """The trees of an XGBoost `gbtree` booster with one output, ready to `predict`.

    booster: the booster's JSON (`Booster.save_raw("json")`, parsed), as model files hold it.
    n_features: the number of feature columns the booster was trained on.

    A tree is four lists indexed by its nodes as XGBoost numbers them (`_trees`): left and right
    child (-1 at a leaf); the condition, an index into the per-batch masks (`_masks`): the
    position of the node's (feature, threshold) among all the model's, sorted, plus their count
    when a missing value goes left; and a leaf's number in its group of trees (`_groups`:
    consecutive trees whose leaves, 256 at most, share value and translate tables). `bound` is
    how far a row's approximate sum of leaves (`Prediction.sums`) can be from its margin minus
    base_score (`_bound`).
    """

    def __init__(self, booster: dict[str, Any], n_features: int) -> None:
        nodes = read_booster(booster, n_features)  # checked: ModelFormatError otherwise
        feature, value, sizes, internal = nodes.feature, nodes.value, nodes.sizes, nodes.internal
        self.n_features = n_features
        self.n_trees = len(sizes)
        self.base = nodes.base
        splits = sorted(set(compress(zip(feature, value, strict=True), internal)))
        self._thresholds: list[list[float]] = [[] for _ in range(n_features)]
        for f, x in splits:
            self._thresholds[f].append(x)
        position = dict(zip(splits, range(len(splits)), strict=True))
        cond = list(
            map(  # a leaf's is never read
                add,
                map(position.get, zip(feature, value, strict=True), repeat(0)),
                map(mul, nodes.default_left, repeat(len(splits))),
            )
        )
        number, groups, leaves = _number_leaves(internal, value, sizes)
        self._step, self._low = _step(leaves)
        self._groups = [(a, b, _tables(self._step, leaves[a:b])) for a, b in groups]
        self.bound = _bound(self.base, leaves, self._step)
        cuts = list(accumulate(sizes, initial=0))
        self._trees = [  # per tree: left, right (as XGBoost wrote them), condition, leaf number
            (nodes.left[a:b], nodes.right[a:b], cond[a:b], number[a:b])
            for a, b in zip(cuts, cuts[1:], strict=False)
        ]

    def predict(self, columns: Sequence[Sequence[float]]) -> Prediction:
        """Every tree's leaf value for every row; `columns[f]` holds feature f of each row."""
        if len(columns) != self.n_features:
            raise ValueError(
                f"Trees.predict: {len(columns)} feature columns, the model has "
                f"{self.n_features}; pass one column per feature, in the model's order"
            )
        rows = len(columns[0]) if columns else 0
        if any(len(c) != rows for c in columns):
            raise ValueError("Trees.predict: feature columns of different lengths; one per row")
        numbers = self._walk(columns, rows) if rows else [b"" for _ in self._groups]
        return Prediction(self, numbers, rows)

    def _walk(self, columns: Sequence[Sequence[float]], rows: int) -> list[bytes]:
        """Per group of trees, its trees' leaf numbers: a byte per row, tree after tree."""
        everyone = int.from_bytes(bytes([1]) * rows, "little")
        masks = self._masks(columns, rows, everyone)
        out = []
        for first, end, _ in self._groups:
            numbers = []
            for left, right, cond, number in self._trees[first:end]:
                leaves = 0  # each row's leaf number, a byte each
                g, m = 0, everyone
                pending: list[tuple[int, int]] = []  # (node, rows) yet to walk
                while True:
                    c = left[g]
                    if c < 0:  # a leaf
                        leaves |= m * number[g]
                        if not pending:
                            break
                        g, m = pending.pop()
                        continue
                    go_left = m & masks[cond[g]]
                    if go_left == m:
                        g = c
                    elif go_left:
                        pending.append((right[g], m ^ go_left))
                        g, m = c, go_left
                    else:
                        g = right[g]
                numbers.append(leaves.to_bytes(rows, "little"))
            out.append(b"".join(numbers))
        return out

    def _masks(self, columns: Sequence[Sequence[float]], rows: int, everyone: int) -> list[int]:
        """The rows that go left at each condition (see the class docstring), as row masks."""
        right_nan: list[int] = []  # the thresholds' masks where a missing value goes right
        left_nan: list[int] = []  # and where it goes left
        for f, thresholds in enumerate(self._thresholds):
            if not thresholds:
                continue
            column = columns[f]
            first = column[0]
            if first == first and column.count(first) == rows:  # one value, not NaN: a layer's
                k = bisect_right(thresholds, float32([first])[0])
                part = [0] * k + [everyone] * (len(thresholds) - k)
                right_nan += part
                left_nan += part
                continue
            part, nan = _column_masks(column, set(column), thresholds)
            right_nan += part
            left_nan += [m | nan for m in part] if nan else part
        return right_nan + left_nan


class Prediction:
    """The leaves of a batch of rows (`Trees.predict`): per group of trees, each tree's leaf
    numbers, a byte per row; a row's bytes, group after group, are its leaves in XGBoost's order
    of addition."""

    def __init__(self, trees: Trees, numbers: list[bytes], rows: int):
        self.rows = rows
        self._trees = trees
        self._numbers = numbers
        self.bound = trees.bound

    def margin(self, row: int) -> float:
        """The row's margin as XGBoost computes it: base_score, then each tree's leaf, float32."""
        acc = array("f", [self._trees.base])
        n = self.rows
        for (_, _, (values, _, _)), numbers in zip(self._trees._groups, self._numbers, strict=True):
            for v in map(values.__getitem__, numbers[row::n]):
                acc[0] += v  # float64 sum of two float32 values (exact), stored rounded to float32
        return acc[0]

    def margins(self) -> list[float]:
        """Every row's margin (`margin`)."""
        return [self.margin(r) for r in range(self.rows)]

    def sums(self) -> list[float]:
        """Each row's approximate sum of leaves: within `Trees.bound` of its margin minus
        base_score (~1.5 us a row of 250 trees, against `margin`'s ~15).

        Each leaf is its tree's smallest leaf plus a count of steps (`_step`); the counts' low
        and high bytes are summed per row in 16-bit fields of Python ints, one int for the even
        rows' bytes and one for the odd rows', flushed to lists every _FLUSH trees (below a
        field's overflow)."""
        n = self.rows
        if not n:
            return []
        field = int.from_bytes(b"\xff\x00" * n, "little")  # the low byte of every 16-bit field
        counts = [0] * (2 * n)  # the low bytes' sums, then the high bytes'
        lo_even = lo_odd = hi_even = hi_odd = 0
        since = 0
        for (_, _, (_, lo, hi)), numbers in zip(self._trees._groups, self._numbers, strict=True):
            low, high = numbers.translate(lo), numbers.translate(hi)
            for a in range(0, len(numbers), n):
                if since == _FLUSH:
                    _flush(counts, n, lo_even, lo_odd, hi_even, hi_odd)
                    lo_even = lo_odd = hi_even = hi_odd = since = 0
                x = int.from_bytes(low[a : a + n], "little")
                lo_even += x & field
                lo_odd += (x >> 8) & field
                x = int.from_bytes(high[a : a + n], "little")
                hi_even += x & field
                hi_odd += (x >> 8) & field
                since += 1
        _flush(counts, n, lo_even, lo_odd, hi_even, hi_odd)
        low_sum, step = self._trees._low, self._trees._step
        return [low_sum + step * (c + 256 * h) for c, h in zip(counts[:n], counts[n:], strict=True)]

    def best(self) -> tuple[int, float]:
        """(row, margin) of the smallest margin, the first such row on a tie: XGBoost's pick.

        Only the rows whose approximate sum (`sums`) is within twice the bound of the smallest
        can be it; only they are summed in float32."""
        if not self.rows:
            raise ValueError("Prediction.best: no rows to choose from")
        approx = self.sums()
        cut = min(approx) + 2 * self.bound
        margin, row = min((self.margin(r), r) for r, a in enumerate(approx) if a <= cut)
        return row, margin


# Trees whose byte sums a 16-bit field holds: 257 * 255 = 65535.
_FLUSH = 257


def _flush(counts: list[int], n: int, *fields: int) -> None:
    """Adds the 16-bit fields of (low even, low odd, high even, high odd) to `counts` (the low
    bytes' sums of the n rows, then the high bytes')."""
    for k, acc in enumerate(fields):
        if acc:
            half = array("H", acc.to_bytes(2 * n, "little"))  # fields are little-endian 16-bit
            if sys.byteorder == "big":
                half.byteswap()
            start = (k // 2) * n + k % 2
            counts[start : (k // 2 + 1) * n : 2] = map(
                add, counts[start : (k // 2 + 1) * n : 2], half[: len(range(k % 2, n, 2))]
            )


def _column_masks(
    column: Sequence[float], seen: set[float], thresholds: list[float]
) -> tuple[list[int], int]:
    """(the rows left of each threshold, the rows of NaN) for a column of several values.

    A row's class is the number of the column's distinct float32 values below its own; the
    rows left of a threshold are those of a class below the number of values under it, one mask
    for all thresholds between two neighbouring values."""
    values = sorted(x for x in seen if x == x)
    rounded = float32(values)
    distinct = sorted(set(rounded))
    if len(distinct) == len(values):
        klass = dict(zip(values, range(len(values)), strict=True))
    else:  # values that round to one float32 value share a class
        rank = {x: i for i, x in enumerate(distinct)}
        klass = {v: rank[r] for v, r in zip(values, rounded, strict=True)}
    few = len(distinct) < _CLASSES  # classes fit a byte, 255 for NaN
    nan = 0
    if len(values) < len(seen):
        classes: Any = [klass.get(x, max(_CLASSES, len(distinct))) for x in column]
        nan = _rows_of(classes, lambda c: c >= len(distinct))
        if few:
            classes = bytes(classes)
    elif few:
        classes = bytes(map(klass.__getitem__, column))
    else:
        classes = list(map(klass.__getitem__, column))
    part: list[int] = []
    # The thresholds up to upto[j] (and from the previous one) have the classes below j under.
    upto = [bisect_right(thresholds, x) for x in distinct] + [len(thresholds)]
    for j, end in enumerate(upto):
        run = end - len(part)
        if run:
            if few:
                mask = int.from_bytes(classes.translate(_BELOW[j]), "little")
            else:  # many values in one batch: the mask row by row
                mask = _rows_of(classes, lambda c, j=j: c < j)
            part += [mask] * run
    return part, nan


def _rows_of(classes: Sequence[int], keep: Any) -> int:
    """The row mask of the rows whose class `keep` accepts."""
    return int.from_bytes(bytes(1 if keep(c) else 0 for c in classes), "little")


def _number_leaves(
    internal: list[bool], value: list[float], sizes: list[int]
) -> tuple[list[int], list[tuple[int, int]], list[list[float]]]:
    """(each leaf's number in its group, the groups as (first tree, end tree), each tree's leaf
    values in node order): leaves numbered in node order, from 0 again where the next tree's
    would pass 256."""
    leaf = [not x for x in internal]
    starts = list(accumulate(sizes, initial=0))
    per_tree = [leaf[a : a + n].count(True) for a, n in zip(starts, sizes, strict=False)]
    if max(per_tree) > MAX_LEAVES:
        t = next(t for t, n in enumerate(per_tree) if n > MAX_LEAVES)
        raise ModelFormatError(
            f"booster tree {t} has {per_tree[t]} leaves; spio's evaluator reads trees of at "
            f"most {MAX_LEAVES} (max_depth <= 8): retrain with `spio tune train`"
        )
    values = list(compress(value, leaf))
    groups = []
    first, done, count = 0, 0, 0  # the group's first tree, the leaves before it and in it
    restart = []  # per tree: the leaves before its group
    for t, n in enumerate(per_tree):
        if count + n > MAX_LEAVES:
            groups.append((first, t))
            first, done, count = t, done + count, 0
        restart.append(done)
        count += n
    groups.append((first, len(per_tree)))
    before = accumulate(leaf, initial=0)  # leaves before each node: a leaf's number, globally
    group_start = chain.from_iterable(map(repeat, restart, sizes))
    numbers = list(map(sub, before, group_start))  # map stops after the last node
    cuts = list(accumulate(per_tree, initial=0))
    return numbers, groups, [values[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


# Steps of a leaf above its tree's smallest leaf fit 16 bits (`_step`).
_COUNTS = 2**16 - 1


def _step(leaves: list[list[float]]) -> tuple[float, float]:
    """(the step of `Prediction.sums`, the trees' smallest leaves summed): the smallest power of
    two in which every tree's leaves span at most _COUNTS steps. A power of two, so a leaf's
    distance in steps is exact but for its rounding to a whole step."""
    widest = max((max(t) - min(t) for t in leaves), default=0.0)
    step = 2.0 ** math.ceil(math.log2(widest / _COUNTS)) if widest > 0 else 1.0
    return step, math.fsum(map(min, leaves))


def _tables(step: float, leaves: list[list[float]]) -> tuple[list[float], bytes, bytes]:
    """A group's lookup and translate tables, by leaf number: the leaf's value, and the low and
    high byte of its whole steps above its tree's smallest leaf (`_step`)."""
    values = list(chain.from_iterable(leaves))
    scale = 1 / step  # a power of two: exact
    counts = [round((v - low) * scale) for t in leaves for low in (min(t),) for v in t]
    pad = MAX_LEAVES - len(values)
    raw = array("H", counts + [0] * pad).tobytes()  # 16-bit counts, the machine's byte order
    first, second = raw[0::2], raw[1::2]
    return values + [0.0] * pad, *(
        (first, second) if sys.byteorder == "little" else (second, first)
    )


def _bound(base: float, leaves: list[list[float]], step: float) -> float:
    """How far a row's approximate sum of leaves (`Prediction.sums`) can be from its float32
    margin minus base_score.

    Every partial sum is below `reach`, |base| plus each tree's largest |leaf| (plus the float32
    sums' own drift), so below 2**e; a float32 addition is off by at most half an ulp there,
    2**(e - 25), once per tree and once for the base. A leaf's whole steps are off by at most
    half a step, and a float64 operation by half an ulp, 2**(e - 53): each leaf's distance to its
    tree's smallest, the sum of the smallest leaves and the final addition."""
    reach = abs(base) + sum(max(map(abs, tree)) for tree in leaves)
    e = math.frexp(reach)[1]
    n = len(leaves)
    if reach + (n + 1) * 2.0 ** (e - 24) >= 2.0**e:
        e += 1
    return (n + 1) * 2.0 ** (e - 25) + n * step / 2 + (n + 2) * 2.0 ** (e - 53)
