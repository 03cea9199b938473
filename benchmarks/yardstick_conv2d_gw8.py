"""The conv2d_gw8 models' picks scored against every config's measured time, off the datasets.

Reads sweep CSVs written by `benchmarks/sweep_conv2d_gw8.py --csv` (every config of a pass timed
at a few real layers; none of it is in the training datasets) and, for each pass and layer, ranks
that layer's configs with a model (the shipped one, or those in `--models`) for the params the
op selects for (`KernelDef.select_key`: the layer at its batch's bucket), and
prints its pick's measured time over the best measured: an independent check of a retrain before
it ships.

    python benchmarks/yardstick_conv2d_gw8.py                       # shipped models
    python benchmarks/yardstick_conv2d_gw8.py --models /tmp/models  # a candidate retrain

Training on the sweeps too (they are the layers real models have) makes them no longer
independent, so `--loo` scores that recipe honestly: for each layer, a model trained on the
`--data` datasets plus the sweep rows of every *other* layer, scored on the held-out layer.
`--export DIR` writes the sweep rows as dataset samples (DIR/<family>.jsonl) to train on.

    python benchmarks/yardstick_conv2d_gw8.py --loo --data new.jsonl --data old.jsonl
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "yardstick"
PASSES = ("fprop", "dgrad", "wgrad")


def read_sweeps(paths: list[Path]) -> dict[tuple, dict[str, float]]:
    """(pass, c, hw, k, n, stride) -> {config text: µs} over every row of the CSVs. The
    training data and the models are timed with the L2 flushed: a sweep's `--warm-l2` rows
    (its `l2` column) are refused, not mixed in."""
    out: dict[tuple, dict[str, float]] = defaultdict(dict)
    for path in paths:
        with path.open() as f:
            for r in csv.DictReader(f):
                if (r.get("l2") or "flushed") != "flushed":
                    raise ValueError(
                        f"{path}: a row timed with the L2 {r['l2']} (sweep --warm-l2); the "
                        f"yardstick and its samples are L2-flushed timings: sweep without it"
                    )
                key = (r["pass"], int(r["c"]), int(r["hw"]), int(r["k"]), int(r["n"]),
                       int(r.get("stride") or 1))  # fmt: skip
                out[key][r["config"]] = float(r["us"])
    return dict(out)


def regrets(sweeps: dict[tuple, dict[str, float]], models: Path | None, device: str) -> list[dict]:
    """One row per (pass, layer): the model's pick among the measured configs of the family's
    space, its time over the best of them."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.tune.model import PerfModel
    from spio.tune.store import model_path

    dev = known_device(device)
    rows = []
    loaded: dict[str, PerfModel] = {}
    for (which, c, hw, k, n, stride), times in sorted(sweeps.items()):
        kdef = KERNELS[f"conv2d_gw8_{which}"]
        if kdef.name not in loaded:
            path = None if models is None else model_path(models, kdef.name, dev.name)
            if path is not None and path.exists():
                loaded[kdef.name] = PerfModel.load(path)
            else:  # no candidate for this family: the shipped model
                loaded[kdef.name] = _shipped(kdef.name, dev)
        p = _layer_params(c, hw, k, n, stride)
        cfgs = [cfg for cfg in kdef.configs(p, dev) if str(cfg) in times]
        if not cfgs:
            continue
        # Ranked for the params the op selects for (the layer at its batch's bucket),
        # timed at the sweep's batch.
        sel = kdef.selection(p)
        guess = loaded[kdef.name].predict_us([kdef.features(sel, cfg, dev) for cfg in cfgs])
        pick = cfgs[min(range(len(cfgs)), key=lambda i: (guess[i], i))]
        best = min(times[str(cfg)] for cfg in cfgs)
        rows.append({"pass": which, "layer": f"C{c} {hw}^2 k{k} N{n} stride {stride}",
                     "configs": len(cfgs), "pick_us": times[str(pick)], "best_us": best,
                     "regret": times[str(pick)] / best})  # fmt: skip
    return rows


def _layer_params(c: int, hw: int, k: int, n: int, stride: int):
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    return Conv2dGw8Params(n=n, c=c, h=hw, w=hw, r=k, s=k, pad_h=k // 2, pad_w=k // 2,
                           has_bias=True, stride_h=stride, stride_w=stride)  # fmt: skip


def sweep_samples(sweeps: dict[tuple, dict[str, float]], device: str) -> dict[tuple, list]:
    """(pass, c, hw, k, n, stride) -> that layer's sweep rows as dataset samples (the configs of
    the family's current space that the sweep timed)."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.kernels.kernel_def import to_dict
    from spio.tune.dataset import Sample

    dev = known_device(device)
    out = {}
    for key, times in sorted(sweeps.items()):
        which, c, hw, k, n, stride = key
        kdef = KERNELS[f"conv2d_gw8_{which}"]
        p = _layer_params(c, hw, k, n, stride)
        out[key] = [
            Sample(kdef.name, dev.name, dev.arch, to_dict(p), to_dict(cfg), times[str(cfg)])
            for cfg in kdef.configs(p, dev)
            if str(cfg) in times
        ]
    return out


def leave_one_out(
    sweeps: dict[tuple, dict[str, float]], data: list[Path], device: str, tmp: Path
) -> list[dict]:
    """`regrets` of models that never saw the layer they are scored on: for each layer, trained
    on the `data` samples of its family plus the sweep samples of the family's other layers. A
    sample of the held-out layer at any batch size (a sweep row at another batch, or one a
    shipped dataset already holds) is left out too. A layer none of whose configs the family's
    space has now is skipped, as `regrets` skips it."""
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import feature_rows, group_key
    from spio.tune.model import PerfModel
    from spio.tune.store import model_path

    dev = known_device(device)
    extra = sweep_samples(sweeps, device)
    rows = []
    for key in sorted(sweeps):
        if not extra[key]:
            continue
        kdef = KERNELS[f"conv2d_gw8_{key[0]}"]
        held_out = group_key(kdef, extra[key][0])  # the layer, batch size left out
        samples = [s for path in data for s in read(path, kdef.name, dev.name)
                   if group_key(kdef, s) != held_out]  # fmt: skip
        samples += [s for other, ss in extra.items() if other[0] == key[0] for s in ss
                    if group_key(kdef, s) != held_out]  # fmt: skip
        model = PerfModel.train(
            kdef.name, dev.name, dev.arch, feature_rows(kdef, samples, dev),
            [s.latency_us for s in samples],
        )  # fmt: skip
        model.save(model_path(tmp, kdef.name, dev.name))
        rows += regrets({key: sweeps[key]}, tmp, device)
    return rows


def _shipped(kernel: str, dev):
    from spio.tune.store import find_model

    found = find_model(kernel, dev.name, dev.arch)
    if found is None:
        raise SystemExit(f"yardstick: no model of {kernel} for {dev.name}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--csv", type=Path, action="append", help="sweep CSVs (default: data/yardstick)"
    )
    ap.add_argument(
        "--models", type=Path, help="a directory of trained models (a family without one: shipped)"
    )
    ap.add_argument("--device", default="H100", help="known device the sweeps ran on")
    ap.add_argument(
        "--loo",
        action="store_true",
        help="score models trained on --data plus the other layers' sweep rows (not --models)",
    )
    ap.add_argument("--data", type=Path, action="append", default=[], help="datasets (--loo)")
    ap.add_argument("--export", type=Path, help="write the sweep rows as samples to this dir")
    a = ap.parse_args(argv)
    paths = a.csv or sorted(DATA.glob("conv2d_gw8_*.csv"))
    sweeps = read_sweeps(paths)
    if a.export is not None:
        from spio.tune.dataset import append

        for key, samples in sweep_samples(sweeps, a.device).items():
            append(a.export / f"conv2d_gw8_{key[0]}.jsonl", samples)
        print(f"yardstick: sweep samples written to {a.export}")
        return 0
    if a.loo:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            rows = leave_one_out(sweeps, a.data, a.device, Path(tmp))
    else:
        rows = regrets(sweeps, a.models, a.device)
    for which in PASSES:
        mine = [r for r in rows if r["pass"] == which]
        for r in mine:
            print(f"{which} {r['layer']:<28} {r['configs']:4d} configs  pick {r['pick_us']:8.1f} us"
                  f"  best {r['best_us']:8.1f} us  regret {r['regret']:.3f}")  # fmt: skip
        if mine:
            geo = math.exp(sum(math.log(r["regret"]) for r in mine) / len(mine))
            worst = max(r["regret"] for r in mine)
            print(f"{which}: {len(mine)} layers, regret geomean {geo:.3f}, max {worst:.3f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
