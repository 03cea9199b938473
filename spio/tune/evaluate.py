"""Honest evaluation of a performance model: regret of its top-1 pick on layers it never saw.

Samples are split into folds **by layer** (issue 6: "no shape in both train and test"). A layer is
the params' integer dimensions without the batch-like one (`BATCH_FIELDS`: conv n, layernorm m,
matmul m, each a launch argument that one layer runs at many values of). So the same layer at
another batch size, dtype, bias or B layout never trains the model that is tested on it. Each fold
is predicted by a model trained on the others.

Regret is still measured per full params (a "shape"): the model ranks the configs measured for
it; regret = measured time of its top-1 / best measured time; top-5 hit = the best measured
config is among its 5 best predictions. `split="params"` folds by full params instead: the split
before, where the same layer at another batch size or dtype could be in the training folds.

That regret is only as honest as the measured set: a shape with a few sampled configs can look
perfect. So shapes whose every config of the family's current space (`configs(params, device)`)
was measured are also reported apart (`complete`): there the model ranks the whole space, as
the selector does, and the regret is against the true best of the space; beside it, the regret
of `SPIO_AUTOTUNE`'s choice (the fastest measured of the `AUTOTUNE_K` candidates that
`Selector.autotune` measures, `spio.tune.rank.autotune_candidates`), so the data says what
autotuning buys.

`as_selected=True` ranks each shape as the op selects its config: with the features of the
family's selection params (`KernelDef.select_key`, e.g. conv2d_gw8's batch bucket, the
layernorm families' row bucket) instead of the shape's own, and scores the pick at the
shape. The default ranks every shape at itself: the model's quality alone. The autotune column
then takes the candidates ranked as selected but the fastest of them at the shape, where
`SPIO_AUTOTUNE` measures them at the selection params: a lower bound of what autotune runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spio.kernels.kernel_def import KernelDef
from spio.tune.dataset import Sample
from spio.tune.features import DEVICE_FEATURES, device_features, features, from_dict, to_dict
from spio.tune.model import PerfModel
from spio.tune.rank import autotune_candidates

Split = Literal["layer", "params"]
SPLITS: tuple[Split, ...] = ("layer", "params")

# The batch-like field of each family's params (by params class name): a launch argument, so one
# layer runs at many values of it. Families not listed fold on all their integer fields.
BATCH_FIELDS = {"Conv2dGw8Params": "n", "LayerNorm2dParams": "m", "MatmulParams": "m"}
AUTOTUNE_K = 5  # what SPIO_AUTOTUNE measures (spio.select.selector.TOP_K; select is above tune)


@dataclass(frozen=True, slots=True)
class Report:
    kernel: str
    device: str
    shapes: int  # held-out full params, one regret each
    groups: int  # what the folds split: layers (split "layer") or full params (split "params")
    samples: int
    regret_median: float
    regret_p90: float
    regret_max: float
    top5_hit_rate: float
    split: Split = "layer"
    # Over the held-out shapes with every config of the space measured: how many, and the
    # regret against the space's best (median, p90, max); None when there are none.
    complete: int = 0
    complete_regret: tuple[float, float, float] | None = None
    autotune_regret: tuple[float, float, float] | None = None  # AUTOTUNE_K candidates measured
    # Set when one given model ranked every shape (no folds, nothing trained): where it came from.
    fixed_model: str | None = None
    as_selected: bool = False  # each shape ranked at the op's selection params (select_key)
    # The complete shapes of largest pick regret, worst first (`evaluate(worst_shapes=N)`).
    worst: tuple[CompleteShape, ...] = ()
    pooled: tuple[str, ...] = ()  # the GPUs whose samples the folds' models trained on (`pool`)

    def __str__(self) -> str:
        folds = f"of {self.groups} layers" if self.split == "layer" else "(folded by full params)"
        if self.fixed_model is not None:
            head = (
                f"{self.kernel} on {self.device}: {self.shapes} shapes of {self.groups} layers, "
                f"{self.samples} samples, ranked by {self.fixed_model}"
            )
        else:
            head = (
                f"{self.kernel} on {self.device}: {self.shapes} held-out shapes {folds}, "
                f"{self.samples} samples"
            )
        if self.pooled:
            head += f" of {', '.join(self.pooled)}, pooled with device features"
        if self.as_selected:
            head += ", ranked as the op selects (select_key)"
        text = (
            f"{head}\n"
            f"  top-1 regret among measured configs: median {self.regret_median:.3f}x, "
            f"p90 {self.regret_p90:.3f}x, max {self.regret_max:.3f}x;  top-5 hit rate "
            f"{self.top5_hit_rate:.0%}"
        )
        if self.complete_regret is None:
            return text + "\n  no held-out shape has every config of the space measured"
        med, p90, worst = self.complete_regret
        text += (
            f"\n  against the whole space ({self.complete} shapes with every config measured): "
            f"median {med:.3f}x, p90 {p90:.3f}x, max {worst:.3f}x"
        )
        if self.autotune_regret is not None:
            med, p90, worst = self.autotune_regret
            text += (
                f"\n  {_autotune_label(self.as_selected)}: median {med:.3f}x, p90 {p90:.3f}x, "
                f"max {worst:.3f}x"
            )
        return text + describe_worst(self.worst)


def describe_worst(shapes: tuple[CompleteShape, ...]) -> str:
    """Lines naming each shape of `Report.worst`: its pick's and autotune's regret, where the
    model ranked the space's best config, and the two configs (empty for none)."""
    if not shapes:
        return ""
    text = "\n  worst complete shapes (pick regret, autotune regret, the best config's rank):"
    for c in shapes:
        best = min(range(len(c.times)), key=c.times.__getitem__)
        text += (
            f"\n    {c.pick_regret:.3f}x, {c.autotune_regret:.3f}x, best ranked "
            f"{c.ranked.index(best) + 1} of {len(c.configs)}: {c.shape}"
            f"\n      best {c.configs[best]} {c.times[best]:.2f} µs; pick "
            f"{c.configs[c.ranked[0]]} {c.times[c.ranked[0]]:.2f} µs"
        )
    return text


def _autotune_label(as_selected: bool) -> str:
    """The head of a report's autotune line. As selected, the op measures its candidates at the
    selection params, not at the shape: the fastest at the shape is a lower bound of what it
    runs."""
    bound = ", a lower bound" if as_selected else ""
    return (
        f"with SPIO_AUTOTUNE (fastest of its {AUTOTUNE_K} candidates at the shape{bound}), "
        "same shapes"
    )


def layer_key(params: dict[str, Any], batch_field: str | None) -> str:
    """The layer that `params` (a sample's params dict) describe: its integer dimensions
    without `batch_field`. dtype, bias and layout flags are left out on purpose: a layer's fp16
    and bf16 (or biased, or B-transposed) variants time alike, so one in training would leak the
    other's answer."""
    dims = {k: v for k, v in params.items() if type(v) is int and k != batch_field}
    return json.dumps(dims, sort_keys=True)


def batch_field(kdef: KernelDef) -> str | None:
    """The family's batch-like params field (`BATCH_FIELDS`), or None."""
    return BATCH_FIELDS.get(kdef.params_type.__name__)


def group_key(kdef: KernelDef, sample: Sample, split: Split = "layer") -> str:
    """What the folds split on for `sample`: its layer, or its full params, both from the params
    with every field the params type has now (`canonical_params`)."""
    if split not in SPLITS:
        raise ValueError(f"evaluate: split={split!r}; expected one of {SPLITS}")
    params = canonical_params(kdef, sample.shape_key())
    if split == "params":
        return json.dumps(params, sort_keys=True)
    return layer_key(params, batch_field(kdef))


def canonical_params(kdef: KernelDef, shape_key: str) -> dict[str, Any]:
    """A sample's params (`Sample.shape_key`) rebuilt through the params type, its defaults
    filled in: samples collected before a field was added (conv2d_gw8's stride_h, stride_w,
    dilate_h, dilate_w, pad_h_end, pad_w_end) name the same layer as new ones with the default
    value, so mixed old and new data can't put one layer in two folds."""
    return dict(_canonical(kdef.params_type, shape_key))


@functools.lru_cache(maxsize=65536)
def _canonical(params_type: type, shape_key: str) -> dict[str, Any]:
    return to_dict(from_dict(params_type, json.loads(shape_key)))


def shape_of(kdef: KernelDef, sample: Sample) -> str:
    """A sample's full params as a key, its defaults filled in (`canonical_params`): a stride-1
    conv layer collected before the stride fields existed is the same shape as one after."""
    return json.dumps(canonical_params(kdef, sample.shape_key()), sort_keys=True)


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    """(median, p90, max) of values (p90: the nearest-rank element at 0.9)."""
    v = sorted(values)
    return statistics.median(v), v[min(len(v) - 1, int(round(0.9 * (len(v) - 1))))], v[-1]


def _config_key(kdef: KernelDef, config: dict[str, Any]) -> str | None:
    """A sample's config as the family's config type writes it now (defaults filled in), or
    None when the type refuses it (a config of an older space)."""
    try:
        return json.dumps(to_dict(from_dict(kdef.config_type, config)), sort_keys=True)
    except (TypeError, ValueError):
        return None


def _space_indices(kdef: KernelDef, shape: str, idx: list[int], samples: list[Sample], device):
    """The indices of idx whose configs are the family's space for the shape, when every config
    of the space is among them (one index per config); else None."""
    params = from_dict(kdef.params_type, json.loads(shape))
    space = {json.dumps(to_dict(c), sort_keys=True) for c in kdef.configs(params, device)}
    chosen: dict[str, int] = {}
    for i in idx:
        key = _config_key(kdef, samples[i].config)
        if key in space and (
            key not in chosen or samples[i].latency_us < samples[chosen[key]].latency_us
        ):
            chosen[key] = i
    return list(chosen.values()) if space and len(chosen) == len(space) else None


def _rows_as_selected(
    kdef: KernelDef, samples: list[Sample], idx: list[int], device: Any, device_terms: bool
) -> list[dict[str, float]]:
    """Feature rows of one shape's samples idx at the params the op selects the shape's config
    for (`KernelDef.select_key`; the shape itself without one)."""
    chosen = kdef.selection(from_dict(kdef.params_type, samples[idx[0]].params))
    terms = device_features(device) if device_terms else {}
    return [
        features(kdef, chosen, from_dict(kdef.config_type, samples[i].config), device) | terms
        for i in idx
    ]


def shape_indices(kdef: KernelDef, samples: list[Sample]) -> dict[str, list[int]]:
    """shape key (`shape_of`) -> the indices of its samples, in sample order."""
    by_shape: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_shape[shape_of(kdef, s)].append(i)
    return by_shape


def train_without(
    kdef: KernelDef,
    samples: list[Sample],
    rows: list[dict[str, float]],
    by_shape: dict[str, list[int]],
    held: set[str],
    rounds: int | None = None,
    seed: int = 0,
) -> PerfModel | None:
    """A fold's model: trained (with training seed `seed`) on the samples of every shape not in
    `held` (None if none)."""
    idx = [i for k, shape_idx in by_shape.items() if k not in held for i in shape_idx]
    if not idx:
        return None
    kwargs = {} if rounds is None else {"rounds": rounds}
    return PerfModel.train(
        kdef.name,
        samples[0].device,
        samples[0].arch,
        [rows[i] for i in idx],
        [samples[i].latency_us for i in idx],
        seed=seed,
        **kwargs,
    )


def fold_of(key: str, folds: int) -> int:
    """The fold of a group key: a stable hash, so every run and tool splits alike."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % folds


def pooled_rows(
    kdef: KernelDef, samples: list[Sample], pool: Mapping[str, Any]
) -> list[dict[str, float]]:
    """Each sample's features on its own GPU (`pool`: device name -> DeviceAttributes), followed
    by that GPU's DEVICE_FEATURES: the rows of a model trained on several GPUs' samples."""
    rows: list[dict[str, float]] = [{}] * len(samples)
    by_device: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_device[s.device].append(i)
    for name, idx in by_device.items():
        own = feature_rows(kdef, [samples[i] for i in idx], pool[name], device_terms=True)
        for i, row in zip(idx, own, strict=True):
            rows[i] = row
    return rows


def feature_rows(
    kdef: KernelDef, samples: list[Sample], device: Any, device_terms: bool = False
) -> list[dict[str, float]]:
    """Recomputes features from stored params/config with the family's current code; with
    `device_terms`, the device's DEVICE_FEATURES after them (a pooled model's rows)."""
    terms = device_features(device) if device_terms else {}
    return [
        features(
            kdef,
            from_dict(kdef.params_type, s.params),
            from_dict(kdef.config_type, s.config),
            device,
        )
        | terms
        for s in samples
    ]


def folds_by_group(
    kdef: KernelDef, samples: list[Sample], folds: int, split: Split = "layer"
) -> dict[int, list[str]]:
    """fold -> the shape keys (full params) tested in it; a group's shapes share one fold."""
    out: dict[int, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for s in samples:
        k = shape_of(kdef, s)
        if k not in seen:
            seen.add(k)
            out[fold_of(group_key(kdef, s, split), folds)].append(k)
    return dict(out)


@dataclass(frozen=True, slots=True)
class CompleteShape:
    """A held-out shape whose every config of the space was measured, as its fold's model saw it:
    `configs` the space, `times` each one's measured µs, `ranked` the model's order (indices into
    configs, its pick first) and `tried` autotune's candidates (indices)."""

    shape: str  # canonical params JSON (`shape_of`)
    configs: tuple[Any, ...]
    times: tuple[float, ...]
    ranked: tuple[int, ...]
    tried: tuple[int, ...]

    @property
    def pick_regret(self) -> float:
        return self.times[self.ranked[0]] / min(self.times)

    @property
    def autotune_regret(self) -> float:
        return min(self.times[j] for j in self.tried) / min(self.times)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """What `held_out` found: each held-out shape's top-1 regret among its measured configs,
    how many shapes had their best measured config in the model's top 5, and the complete
    shapes in detail."""

    regrets: tuple[float, ...]
    hits: int
    complete: tuple[CompleteShape, ...]
    groups: int


def held_out(
    kdef: KernelDef,
    samples: list[Sample],
    device: Any,
    folds: int = 5,
    rounds: int | None = None,
    split: Split = "layer",
    model: PerfModel | None = None,
    as_selected: bool = False,
    seed: int = 0,
    pool: Mapping[str, Any] | None = None,
) -> HeldOut:
    """Ranks every shape with a model that never saw its layer (each fold's, trained on the
    others with training seed `seed`), or with `model` alone (e.g. another GPU's, as
    `find_model` falls back to it: nothing is trained and the samples need not come from its
    GPU); with `as_selected`, at the params the op selects the shape's config for (the module
    docstring). With `pool` (device name -> DeviceAttributes of every GPU among the samples),
    the folds' models train on every GPU's samples with DEVICE_FEATURES, as `spio tune train
    --pool-for` does, a layer held out on all of them, and only `device`'s shapes are scored."""
    if not samples:
        raise ValueError(f"evaluate: no samples for {kdef.name}")
    if pool is not None and model is not None:
        raise ValueError("evaluate: pool trains the folds' models; model ranks with one model")
    groups = {group_key(kdef, s, split) for s in samples}
    if len(groups) < 2 and model is None:
        what = "layers" if split == "layer" else "shapes"
        raise ValueError(f"evaluate: {kdef.name} needs samples of at least 2 {what}, got 1")
    folds = 1 if model is not None else min(folds, len(groups))
    terms = pool is not None or (model is not None and model.feature_names[-1] in DEVICE_FEATURES)
    if pool is not None:
        rows = pooled_rows(kdef, samples, pool)
    elif terms:  # a pooled model ranks one GPU's samples
        rows = feature_rows(kdef, samples, device, device_terms=True)
    else:
        rows = feature_rows(kdef, samples, device)
    by_shape = shape_indices(kdef, samples)
    if model is not None:
        tested = {0: list(by_shape)}
    else:
        tested = folds_by_group(kdef, samples, folds, split)
    regrets: list[float] = []
    complete: list[CompleteShape] = []
    hits = 0
    for f in range(folds):
        test_shapes = tested.get(f, [])
        if not test_shapes:
            continue
        ranker = model or train_without(
            kdef, samples, rows, by_shape, set(test_shapes), rounds, seed
        )
        if ranker is None:
            continue
        for k in test_shapes:
            idx = by_shape[k]
            if pool is not None:  # only the scored GPU's samples of the shape
                idx = [i for i in idx if samples[i].device == device.name]
                if not idx:
                    continue
            measured = [samples[i].latency_us for i in idx]
            ranked_rows = (
                _rows_as_selected(kdef, samples, idx, device, terms)
                if as_selected
                else [rows[i] for i in idx]
            )
            predicted = ranker.predict_us(ranked_rows)
            order = sorted(range(len(idx)), key=lambda j: predicted[j])
            best = min(measured)
            regrets.append(measured[order[0]] / best)
            hits += any(measured[j] == best for j in order[:5])
            space = _space_indices(kdef, k, idx, samples, device)
            if space is not None:
                guess = ranker.predict_us(
                    _rows_as_selected(kdef, samples, space, device, terms)
                    if as_selected
                    else [rows[i] for i in space]
                )
                ranked = sorted(range(len(space)), key=lambda j: (guess[j], j))
                configs = [from_dict(kdef.config_type, samples[i].config) for i in space]
                at = {c: j for j, c in enumerate(configs)}
                tried = autotune_candidates([configs[j] for j in ranked], AUTOTUNE_K)
                complete.append(
                    CompleteShape(
                        k,
                        tuple(configs),
                        tuple(samples[i].latency_us for i in space),
                        tuple(ranked),
                        tuple(at[c] for c in tried),
                    )
                )
    return HeldOut(tuple(regrets), hits, tuple(complete), len(groups))


def evaluate(
    kdef: KernelDef,
    samples: list[Sample],
    device: Any,
    folds: int = 5,
    rounds: int | None = None,
    split: Split = "layer",
    model: PerfModel | None = None,
    as_selected: bool = False,
    seed: int = 0,
    worst_shapes: int = 0,
    pool: Mapping[str, Any] | None = None,
) -> Report:
    """Regret of the model's top-1 pick per shape, each fold ranked by a model trained on the
    others (`held_out`; with `model`, that one model ranks every shape; with `as_selected`, at
    the op's selection params; `seed`, the folds' training seed); `worst_shapes`: the report
    also keeps that many complete shapes of largest pick regret (`Report.worst`)."""
    if worst_shapes < 0:
        raise ValueError(f"evaluate: worst_shapes must be >= 0, got {worst_shapes}")
    h = held_out(kdef, samples, device, folds, rounds, split, model, as_selected, seed, pool)
    full = [c.pick_regret for c in h.complete]
    tuned = [c.autotune_regret for c in h.complete]
    median, p90, worst = _percentiles(list(h.regrets))
    return Report(
        kdef.name,
        samples[0].device if pool is None else device.name,
        len(h.regrets),
        h.groups,
        len(samples),
        median,
        p90,
        worst,
        h.hits / len(h.regrets),
        split,
        len(full),
        _percentiles(full) if full else None,
        _percentiles(tuned) if tuned else None,
        None if model is None else _provenance(model, samples[0].device),
        as_selected,
        tuple(sorted(h.complete, key=lambda c: -c.pick_regret)[:worst_shapes]),
        () if pool is None else tuple(sorted(pool)),
    )


@dataclass(frozen=True, slots=True)
class SeedSpread:
    """The same held-out evaluation with the folds' models trained under several seeds (the
    seed of XGBoost's row and column subsampling): each statistic's mean and range over them.

    A family's worst shapes are few, so its max regret can move with the training seed as much
    as with a change of data or rule (docs/tuning.md, "Twenty-seventh session"): compare recipes
    on the means and ranges, not on one seed's max."""

    reports: tuple[Report, ...]

    def __str__(self) -> str:
        first = self.reports[0]
        head = str(first).splitlines()[0]
        n = len(self.reports)
        text = f"{head}; {n} training seeds: mean (lowest-highest) of each statistic"

        def stat(values: list[float], pct: bool = False) -> str:
            mean = sum(values) / len(values)
            if pct:
                return f"{mean:.0%} ({min(values):.0%}-{max(values):.0%})"
            return f"{mean:.3f}x ({min(values):.3f}-{max(values):.3f})"

        def triple(get) -> str:
            rows = [get(r) for r in self.reports]
            return ", ".join(
                f"{name} {stat([row[i] for row in rows])}"
                for i, name in enumerate(("median", "p90", "max"))
            )

        text += (
            "\n  top-1 regret among measured configs: "
            + triple(lambda r: (r.regret_median, r.regret_p90, r.regret_max))
            + f";  top-5 hit rate {stat([r.top5_hit_rate for r in self.reports], pct=True)}"
        )
        if first.complete_regret is None:
            return text + "\n  no held-out shape has every config of the space measured"
        text += (
            f"\n  against the whole space ({first.complete} shapes with every config measured): "
        )
        text += triple(lambda r: r.complete_regret)
        if first.autotune_regret is not None:
            text += f"\n  {_autotune_label(first.as_selected)}: "
            text += triple(lambda r: r.autotune_regret)
        if first.worst:
            text += "\n  seed 0:" + describe_worst(first.worst).removeprefix("\n ")
        return text


def evaluate_seeds(
    kdef: KernelDef,
    samples: list[Sample],
    device: Any,
    seeds: int,
    folds: int = 5,
    as_selected: bool = False,
    worst_shapes: int = 0,
    pool: Mapping[str, Any] | None = None,
) -> SeedSpread:
    """`evaluate` with the folds' models trained under seeds 0 .. seeds - 1 (seed 0 is the
    shipped models' and `evaluate`'s default); `worst_shapes` are kept for seed 0's."""
    if seeds < 1:
        raise ValueError(f"evaluate: seeds must be >= 1, got {seeds}")
    return SeedSpread(
        tuple(
            evaluate(
                kdef,
                samples,
                device,
                folds,
                as_selected=as_selected,
                seed=seed,
                worst_shapes=worst_shapes if seed == 0 else 0,
                pool=pool,
            )
            for seed in range(seeds)
        )
    )


def _provenance(model: PerfModel, device: str) -> str:
    """How a fixed model relates to samples measured on `device`: another GPU's model never saw
    them; this GPU's may have (its training data is not known here)."""
    if model.device != device:
        return f"the {model.device} model (trained on another GPU's samples)"
    return f"the {model.device} model (this GPU's: it may have trained on these samples)"
