"""Carveout samples for the strided input gradient: each offered pair timed in one run.

`fprop.CARVEOUT_CHOICES` adds to the dgrad space of a strided layer a variant of most cp.async
configs at a preferred shared-memory carveout (`fprop.carveout_offered`). The dataset holds the
driver's-choice twin of each, timed sessions earlier; a model that is to choose between the two
learns best from the pair timed side by side. So for every strided dgrad shape in a dataset,
this times, with `spio tune collect`'s method (`spio.tune.collect.collect`: the configs of a
shape compiled first, each timed as the median of REPS calls, L2 flushed, the fastest re-timed),
every offered carveout variant whose twin the dataset measured, right after that twin:

    python benchmarks/collect_carveout.py time benchmarks/data/tune/conv2d_gw8_dgrad.jsonl.gz \\
        --out /tmp/carveout.jsonl                                       # GPU (the data's kind)
    python benchmarks/collect_carveout.py merge benchmarks/data/tune/conv2d_gw8_dgrad.jsonl.gz \\
        /tmp/carveout.jsonl                                             # host

`merge` replaces the dataset's rows of the re-timed twins with their new times, appends the
variants' rows, and prints the twins' new time over their old one (the run-to-run spread of
the data, the bimodal configs' included). `time --shapes K` takes the first K shapes only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path


def _strided_shapes(path: Path, device: str) -> dict:
    """Each strided dgrad layer of the dataset (its params) and the configs it measured; rows
    written before a params field existed join their layer's later rows."""
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.tune.dataset import read
    from spio.tune.features import from_dict

    out: dict = {}
    for s in read(path, "conv2d_gw8_dgrad", device):
        if s.params.get("stride_h", 1) > 1 or s.params.get("stride_w", 1) > 1:
            params = from_dict(Conv2dGw8Params, s.params)
            out.setdefault(params, set()).add(json.dumps(s.config, sort_keys=True))
    return out


def _pairs(params, measured: set[str], dev) -> list:
    """The offered carveout variants of `params` whose twin was measured, each after its twin."""
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.tune.features import to_dict

    out = []
    for cfg in fp.DGRAD.configs(params, dev):
        if cfg.carveout == -1:
            continue
        twin = dataclasses.replace(cfg, carveout=-1)
        if json.dumps(to_dict(twin), sort_keys=True) in measured:
            out += [twin, cfg]
    return out


def cmd_time(a: argparse.Namespace) -> None:
    import torch

    from spio.cuda import device_attributes
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.tune.collect import collect

    dev = device_attributes(torch.cuda.current_device())
    shapes = _strided_shapes(Path(a.data), dev.name)
    if not shapes:
        raise SystemExit(f"{a.data}: no strided conv2d_gw8_dgrad rows measured on {dev.name}")
    params = sorted(shapes, key=repr)[: a.shapes]
    plan = {p: _pairs(p, shapes[p], dev) for p in params}
    print(f"{dev.name}: {len(params)} shapes, {sum(map(len, plan.values()))} configs", flush=True)
    kdef = dataclasses.replace(fp.DGRAD, configs=lambda p, _dev: plan[p])
    n = collect(kdef, a.minutes, Path(a.out), shapes=params, progress=False)
    print(f"wrote {n} rows to {a.out}")


def _key(kernel: str, device: str, params: dict, config: dict) -> tuple:
    """A row's (kernel, GPU, shape, config), each dataclass through from_dict/to_dict: rows
    written before a field existed match rows written after."""
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Config, Conv2dGw8Params
    from spio.tune.features import from_dict, to_dict

    p = to_dict(from_dict(Conv2dGw8Params, params))
    c = to_dict(from_dict(Conv2dGw8Config, config))
    return kernel, device, json.dumps(p, sort_keys=True), json.dumps(c, sort_keys=True)


def cmd_merge(a: argparse.Namespace) -> None:
    from spio.tune.dataset import append, read

    new = read(Path(a.new), "conv2d_gw8_dgrad")
    fresh = {_key(s.kernel, s.device, s.params, s.config): s for s in new}
    kept, ratios = [], []
    for line in Path(a.data).read_text().splitlines():
        row = json.loads(line)
        key = _key(row["kernel"], row["device"], row["params"], row["config"])
        if row["kernel"] == "conv2d_gw8_dgrad" and key in fresh:
            ratios.append(fresh[key].latency_us / row["latency_us"])
        else:
            kept.append(line)
    Path(a.data).write_text("".join(line + "\n" for line in kept))
    append(Path(a.data), new)
    ratios.sort()
    q = statistics.quantiles(ratios, n=20)
    print(
        f"{a.data}: {len(ratios)} twins re-timed, {len(new) - len(ratios)} variants added; "
        f"new / old time of the twins: median {statistics.median(ratios):.3f}, 5-95% "
        f"{q[0]:.3f}-{q[-1]:.3f}, min {ratios[0]:.3f}, max {ratios[-1]:.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(required=True)
    t = sub.add_parser("time", help="time the pairs on this GPU")
    t.add_argument("data", help="a conv2d_gw8_dgrad dataset (JSON lines)")
    t.add_argument("--out", required=True, help="rows written here (a rerun resumes)")
    t.add_argument("--shapes", type=int, default=None, help="the first K shapes only")
    t.add_argument("--minutes", type=float, default=60.0)
    t.set_defaults(func=cmd_time)
    m = sub.add_parser("merge", help="merge the timed rows into the dataset")
    m.add_argument("data")
    m.add_argument("new")
    m.set_defaults(func=cmd_merge)
    a = ap.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
