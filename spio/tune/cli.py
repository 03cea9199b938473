"""`spio tune {collect,train,eval,select}`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from spio.settings import settings


def _data_path(kernel: str) -> Path:
    return Path(settings().cache_dir) / "tune" / f"{kernel}.jsonl"


def _kernels(name: str) -> list[str]:
    from spio.kernels import KERNELS

    if name == "all":
        return [k for k, d in KERNELS.items() if d.sample_params is not None]
    if name not in KERNELS:
        raise SystemExit(f"spio tune: unknown kernel {name!r}; known: {sorted(KERNELS)}")
    return [name]


def _samples(kernel: str, data: list[str]) -> list:
    from spio.tune.dataset import read

    paths = [Path(p) for p in data] or [_data_path(kernel)]
    files = [f for p in paths for f in ([p] + sorted(p.parent.glob(p.name + ".gpu*")))]
    return [s for f in files for s in read(f, kernel)]


def _device_for(name: str):
    """Attributes of a named GPU model: the real one if present, else spio's table."""
    from spio.cuda import device_attributes, device_count, known_device

    for i in range(device_count()):
        if device_attributes(i).name == name:
            return device_attributes(i)
    return known_device(name)


def cmd_collect(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.collect import collect, collect_all_gpus

    for k in _kernels(a.kernel):
        out = Path(a.out) if a.out else _data_path(k)
        if a.device == "all":
            n = collect_all_gpus(k, a.minutes, out, a.seed, a.max_configs)
        else:
            n = collect(KERNELS[k], a.minutes, out, int(a.device), a.seed, a.max_configs)
        print(f"{k}: {n} new samples -> {out}")
    return 0


def cmd_train(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.evaluate import feature_rows
    from spio.tune.model import PerfModel
    from spio.tune.store import PACKAGE_MODELS, local_models_dir, model_path

    out_dir = PACKAGE_MODELS if a.ship else Path(a.out) if a.out else local_models_dir()
    for k in _kernels(a.kernel):
        by_device = defaultdict(list)
        for s in _samples(k, a.data):
            by_device[s.device].append(s)
        if not by_device:
            print(f"{k}: no samples (run `spio tune collect --kernel {k}` on a GPU first)")
            continue
        for device_name, samples in sorted(by_device.items()):
            dev = _device_for(device_name)
            model = PerfModel.train(
                k,
                device_name,
                samples[0].arch,
                feature_rows(KERNELS[k], samples, dev),
                [s.latency_us for s in samples],
            )
            path = model_path(out_dir, k, device_name)
            model.save(path)
            print(f"{k} on {device_name}: trained on {len(samples)} samples -> {path}")
    return 0


def cmd_eval(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.evaluate import evaluate

    for k in _kernels(a.kernel):
        by_device = defaultdict(list)
        for s in _samples(k, a.data):
            by_device[s.device].append(s)
        for device_name, samples in sorted(by_device.items()):
            print(evaluate(KERNELS[k], samples, _device_for(device_name), folds=a.folds))
    return 0


def cmd_select(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.kernels.select import Selector
    from spio.tune.features import from_dict

    kdef = KERNELS[_kernels(a.kernel)[0]]
    try:
        params = from_dict(kdef.params_type, json.loads(a.params))
    except (TypeError, ValueError) as e:
        fields = [f.name for f in dataclasses.fields(kdef.params_type)]
        raise SystemExit(
            f"spio tune select: --params for {kdef.name} needs the fields {fields}: {e}"
        ) from None
    dev = _device_for(a.device)
    start = time.perf_counter()
    ranked = Selector().ranked(kdef, params, dev)
    ms = (time.perf_counter() - start) * 1e3
    source = "model" if ranked[0][1] is not None else "heuristic (no model for this GPU)"
    print(
        f"{kdef.name} {params} on {dev.name} ({dev.arch}): {len(ranked)} configs, "
        f"ranked by {source} in {ms:.1f} ms"
    )
    for i, (cfg, us) in enumerate(ranked[: a.top]):
        pred = f"{us:9.1f} us" if us is not None else "        -"
        print(f"  {i + 1:3d}. {pred}  {cfg}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spio tune", description="performance models")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="measure samples on a GPU")
    c.add_argument("--kernel", required=True, help="registry name, or 'all'")
    c.add_argument("--minutes", type=float, default=10.0)
    c.add_argument("--device", default="0", help="GPU ordinal, or 'all' (one worker per GPU)")
    c.add_argument("--out", help="dataset file (default: <cache dir>/tune/<kernel>.jsonl)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--max-configs", type=int, default=None, help="configs sampled per shape")
    c.set_defaults(func=cmd_collect)
    t = sub.add_parser("train", help="fit one model per kernel and GPU")
    t.add_argument("--kernel", required=True)
    t.add_argument("--data", action="append", default=[], help="dataset file(s)")
    t.add_argument("--out", help="model directory (default: <cache dir>/models)")
    t.add_argument("--ship", action="store_true", help="write into the package (spio/tune/models)")
    t.set_defaults(func=cmd_train)
    e = sub.add_parser("eval", help="regret of the top-1 pick on held-out shapes")
    e.add_argument("--kernel", required=True)
    e.add_argument("--data", action="append", default=[])
    e.add_argument("--folds", type=int, default=5)
    e.set_defaults(func=cmd_eval)
    s = sub.add_parser("select", help="ranked configs for a layer (no GPU needed)")
    s.add_argument("--kernel", required=True)
    s.add_argument("--params", required=True, help="params as JSON, e.g. '{\"n\": 8, ...}'")
    s.add_argument("--device", default="NVIDIA H100 80GB HBM3", help="GPU name or model")
    s.add_argument("--top", type=int, default=10)
    s.set_defaults(func=cmd_select)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
