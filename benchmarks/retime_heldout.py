"""The whole-space regret of `spio tune eval`, re-timed: every time it compares, repeated.

`spio tune eval` scores each family's complete held-out shapes (every config of the space in the
dataset) against the best config's recorded time. Each recorded time is one measurement, and the
collector re-timed only a shape's fastest configs (keeping the lower of two), so the best is
biased low and a pick timed once is biased high: the regret carries the noise of both. This
script re-times, on one GPU in one run, what that regret compares: for each complete held-out
shape the fold model's pick, autotune's candidates and the `--top` fastest recorded configs, in
`--rounds` rounds, each round in a fresh random order, L2 flushed (or not: `time --warm-l2`, the
operands resident where they fit, as a layer repeated alone runs); each config's time is its
median over the rounds, and the spread of the rounds is reported as the noise.

    python benchmarks/retime_heldout.py plan --out /tmp/plan.json          # host: folds, picks
    python benchmarks/retime_heldout.py time /tmp/plan.json --csv t.csv    # GPU (the data's kind)
    python benchmarks/retime_heldout.py score /tmp/plan.json t.csv         # host or GPU

The folds' models are trained with seed 0, as `spio tune eval` trains them; `plan --train-seed S`
trains them with S, so plans of several seeds, merged and timed once, give the re-timed spread
of `spio tune eval --seeds` (one `score` per seed's plan).

Two models compared in one run (e.g. a retrain before it ships): write a plan with each (the
datasets as each would ship), `merge` them into one plan of every shape's configs, `time` that,
and `score` each plan against the same CSV:

    python benchmarks/retime_heldout.py merge /tmp/old.json /tmp/new.json --out /tmp/both.json
    python benchmarks/retime_heldout.py score /tmp/old.json t.csv    # then /tmp/new.json

The twenty-third session's H100 timings (5 rounds, every family) and their plan:
`benchmarks/data/yardstick/heldout_retimed__nvidia-h100-80gb-hbm3.csv.gz` and
`heldout_retimed_plan.json.gz` (any of the three steps reads or writes a name ending in .gz
gzipped). The best is the fastest of the shape's re-timed configs in the CSV (those of every
plan timed into it), not of the whole space: a re-timed regret is a lower bound.

`plan` trains the folds exactly as `spio tune eval --data benchmarks/data/tune/<family>.jsonl.gz`
does (the shipped datasets, same folds and recipe), so its recorded regrets are eval's. Re-time
on the GPU kind the datasets were measured on (the plan names it; `time` refuses another): the
best recorded configs are that GPU's.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

TUNE = Path(__file__).resolve().parent / "data" / "tune"
# Every family with an H100 dataset here (the shipped models' data).
FAMILIES = tuple(sorted(path.name.removesuffix(".jsonl.gz") for path in TUNE.glob("*.jsonl.gz")))


def plan(
    kernels: list[str], top: int, folds: int, as_selected: bool = False, train_seed: int = 0
) -> list[dict]:
    """One entry per complete held-out shape: the configs to re-time and each one's roles
    (`as_selected`: the picks ranked as the op selects, `spio tune eval --as-selected`;
    `train_seed`: the folds' training seed, `spio tune eval --seeds`)."""
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import held_out
    from spio.tune.features import to_dict

    out = []
    for name in kernels:
        kdef = KERNELS[name]
        by_device = defaultdict(list)
        for s in read(TUNE / f"{name}.jsonl.gz", name):
            by_device[s.device].append(s)
        for device_name, samples in sorted(by_device.items()):
            dev = _device_for(device_name, "eval")
            h = held_out(kdef, samples, dev, folds=folds, as_selected=as_selected, seed=train_seed)
            for c in h.complete:
                fastest = sorted(range(len(c.times)), key=c.times.__getitem__)[:top]
                roles: dict[int, list[str]] = defaultdict(list)
                roles[c.ranked[0]].append("pick")
                for j in c.tried:
                    roles[j].append("tried")
                for j in fastest:
                    roles[j].append("fastest")
                chosen = sorted(roles)
                out.append(
                    {
                        "kernel": name,
                        "device": device_name,
                        "shape": json.loads(c.shape),
                        "configs": [to_dict(c.configs[j]) for j in chosen],
                        "roles": [roles[j] for j in chosen],
                        "recorded_us": [c.times[j] for j in chosen],
                        "recorded_pick_regret": c.pick_regret,
                        "recorded_autotune_regret": c.autotune_regret,
                        "train_seed": train_seed,
                    }
                )
    return out


def merge(plans: list[list[dict]]) -> list[dict]:
    """One plan holding, per (family, shape), the configs of every plan (first seen first, each
    once, with the roles and recorded time of its first plan): timed once, each plan scores
    against the same timings and the same best."""
    out: dict[tuple, dict] = {}
    for e in (e for p in plans for e in p):
        key = (e["kernel"], json.dumps(e["shape"], sort_keys=True))
        m = out.setdefault(key, {**e, "configs": [], "roles": [], "recorded_us": []})
        for c, r, t in zip(e["configs"], e["roles"], e["recorded_us"], strict=True):
            if c not in m["configs"]:
                m["configs"].append(c)
                m["roles"].append(r)
                m["recorded_us"].append(t)
    return list(out.values())


def _open(path: Path, mode: str = "rt"):
    """A text file, gzipped when its name ends in .gz."""
    return (
        gzip.open(path, mode, newline="") if path.suffix == ".gz" else path.open(mode, newline="")
    )


def read_plan(path: Path) -> list[dict]:
    with _open(path) as f:
        return json.load(f)


def read_times(csv_path: Path) -> dict[tuple, list[float]]:
    """(kernel, shape JSON, config JSON) -> its timings (µs), over every row of the CSV."""
    times: dict[tuple, list[float]] = defaultdict(list)
    with _open(csv_path) as f:
        for row in csv.DictReader(f):
            times[(row["kernel"], row["shape"], row["config"])].append(float(row["us"]))
    return times


def _keys(e: dict) -> list[tuple]:
    shape = json.dumps(e["shape"], sort_keys=True)
    return [(e["kernel"], shape, json.dumps(c, sort_keys=True)) for c in e["configs"]]


def time_plan(
    entries: list[dict], rounds: int, seed: int, csv_path: Path, flush_l2: bool = True
) -> None:
    """Times every entry's configs `rounds` times (each round in a fresh order); appends one
    CSV row per timing. An entry the CSV already holds `rounds` timings of every config of is
    skipped (a run picks up where a stopped one ended; a shape cut off mid-way is timed again,
    so `score` reads its rows twice: delete them first); a shape whose runner cannot be built on
    this GPU is skipped, named. `flush_l2=False` times every call with the L2 as the previous
    call left it (its operands resident where they fit), as a layer repeated alone runs; inside
    a training step only some of a pass's inputs are resident (docs/ops/conv2d_gw8.md,
    "Twenty-sixth session"); the collector and the default flush it. A CSV holds one L2 mode
    (its `l2` column; rows from before the column are flushed): `time` refuses to mix them."""
    import torch

    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.kernels import KERNELS
    from spio.kernels.loader import compile_specs
    from spio.timing import bench
    from spio.tune.collect import REPS, SHAPE_WARMUP_MS, WARMUP_MS
    from spio.tune.features import from_dict

    dev = device_attributes(0)
    wrong = {e["device"] for e in entries} - {dev.name}
    if wrong:
        raise SystemExit(
            f"retime: the plan's best configs were measured on {sorted(wrong)}; this is "
            f"{dev.name}: re-time on the GPU kind the datasets were measured on"
        )
    if csv_path.suffix == ".gz":
        raise SystemExit(
            f"retime: --csv {csv_path}: `time` appends plain CSV rows; write a .csv and gzip it "
            f"when done (score reads either)"
        )
    l2 = "flushed" if flush_l2 else "warm"
    new = not csv_path.exists() or csv_path.stat().st_size == 0
    with_l2 = True  # the column; a CSV from before it holds flushed timings without one
    if not new:
        with _open(csv_path) as f:
            reader = csv.DictReader(f)
            modes = {row.get("l2") or "flushed" for row in reader}
            with_l2 = "l2" in (reader.fieldnames or [])
        if not with_l2:
            modes.add("flushed")  # its rows, if any, were timed before the column: flushed
        if modes - {l2}:
            raise SystemExit(
                f"retime: {csv_path} holds timings with the L2 {'/'.join(sorted(modes))}; this run "
                f"times it {l2}: write them to another --csv"
            )
        done = read_times(csv_path)
        entries = [e for e in entries if not all(len(done[k]) >= rounds for k in _keys(e))]
    specs = []
    for e in entries:
        kdef = KERNELS[e["kernel"]]
        params = from_dict(kdef.params_type, e["shape"])
        specs += [kdef.spec(params, from_dict(kdef.config_type, c), dev) for c in e["configs"]]
    print(f"compiling {len(specs)} variants", flush=True)
    compile_specs(specs, dev.arch)
    rng = random.Random(seed)
    with csv_path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["kernel", "device", "shape", "config", "round", "us", "l2"])
        tail = [l2] if with_l2 else []
        for n, e in enumerate(entries):
            kdef = KERNELS[e["kernel"]]
            params = from_dict(kdef.params_type, e["shape"])
            try:
                runs = [kdef.make_runner(params, from_dict(kdef.config_type, c))
                        for c in e["configs"]]  # fmt: skip
            except (OutOfResources, torch.cuda.OutOfMemoryError) as err:
                print(f"skipped {e['kernel']} {e['shape']}: {err}", flush=True)
                continue
            bench(runs[0], warmup_ms=SHAPE_WARMUP_MS, reps=1)
            shape = json.dumps(e["shape"], sort_keys=True)
            for r in range(rounds):
                order = list(range(len(runs)))
                rng.shuffle(order)
                for j in order:
                    timing = bench(runs[j], warmup_ms=WARMUP_MS, reps=REPS, flush_l2=flush_l2)
                    us = timing.median_ms * 1e3
                    cfg = json.dumps(e["configs"][j], sort_keys=True)
                    w.writerow([e["kernel"], dev.name, shape, cfg, r, f"{us:.3f}", *tail])
            f.flush()
            del runs
            torch.cuda.empty_cache()
            print(f"{n + 1}/{len(entries)} {e['kernel']}", flush=True)


def _pct(values: list[float]) -> str:
    v = sorted(values)
    p90 = v[min(len(v) - 1, int(round(0.9 * (len(v) - 1))))]
    return f"{statistics.median(v):.3f} / {p90:.3f} / {v[-1]:.3f}"


def score(entries: list[dict], csv_path: Path) -> dict[str, dict]:
    """Per family: recorded and re-timed regret (median / p90 / max) of the pick and of
    autotune's choice, and the rounds' noise; prints them and each family's worst shapes."""
    times = read_times(csv_path)
    best_of: dict[tuple, float] = {}  # (family, shape JSON) -> its fastest re-timed config
    for (kernel, shape, _), ts in times.items():
        us = statistics.median(ts)
        best_of[kernel, shape] = min(us, best_of.get((kernel, shape), us))
    per: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    scored = 0
    counts: set[int] = set()
    for e in entries:
        keys = _keys(e)
        if not all(times.get(k) for k in keys):
            continue
        scored += 1
        counts.update(len(times[k]) for k in keys)
        med = [statistics.median(times[k]) for k in keys]
        best = best_of[keys[0][:2]]
        pick = next(j for j, r in enumerate(e["roles"]) if "pick" in r)
        tried = [j for j, r in enumerate(e["roles"]) if "tried" in r]
        d = per[e["kernel"]]
        d["pick"].append(med[pick] / best)
        d["autotune"].append(min(med[j] for j in tried) / best)
        d["recorded_pick"].append(e["recorded_pick_regret"])
        d["recorded_autotune"].append(e["recorded_autotune_regret"])
        d["noise"] += [max(times[k]) / min(times[k]) for k in keys]
        d["shapes"].append((med[pick] / best, min(med[j] for j in tried) / best, e["shape"]))
    print(f"{scored} of the plan's {len(entries)} entries timed, "
          f"{'/'.join(map(str, sorted(counts)))} rounds a config")  # fmt: skip
    for kernel, d in per.items():
        print(f"{kernel}: {len(d['pick'])} complete held-out shapes, median / p90 / max")
        print(f"  pick      recorded {_pct(d['recorded_pick'])}  re-timed {_pct(d['pick'])}")
        print(f"  autotune  recorded {_pct(d['recorded_autotune'])}  "
              f"re-timed {_pct(d['autotune'])}")  # fmt: skip
        print(f"  noise (max / min of a config's rounds) {_pct(d['noise'])}")
        for p, a, shape in sorted(d["shapes"], key=lambda t: -max(t[0], t[1]))[:3]:
            print(f"    worst: pick {p:.3f}, autotune {a:.3f}: {shape}")
    return per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="fold models, picks and candidates (host)")
    p.add_argument("--kernel", action="append", choices=FAMILIES, help="default: every family")
    p.add_argument("--top", type=int, default=5, help="fastest recorded configs to re-time")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--as-selected", action="store_true", help="rank as the op selects")
    p.add_argument(
        "--train-seed", type=int, default=0, help="the folds' training seed (default 0, shipped)"
    )
    t = sub.add_parser("time", help="re-time a plan (GPU)")
    t.add_argument("plan", type=Path)
    t.add_argument("--csv", type=Path, required=True)
    t.add_argument("--rounds", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--kernel", action="append", choices=FAMILIES, help="default: every family")
    t.add_argument("--warm-l2", action="store_true", help="do not flush the L2 before each call")
    g = sub.add_parser("merge", help="plans -> one plan of every shape's configs (host)")
    g.add_argument("plans", type=Path, nargs="+")
    g.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score", help="regret from a plan and its timings")
    s.add_argument("plan", type=Path)
    s.add_argument("csv", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "plan":
        entries = plan(a.kernel or list(FAMILIES), a.top, a.folds, a.as_selected, a.train_seed)
        with _open(a.out, "wt") as f:
            json.dump(entries, f, indent=0)
        print(f"{len(entries)} complete held-out shapes, "
              f"{sum(len(e['configs']) for e in entries)} configs to re-time")  # fmt: skip
    elif a.cmd == "time":
        entries = read_plan(a.plan)
        if a.kernel:
            entries = [e for e in entries if e["kernel"] in a.kernel]
        print(f"seed {a.seed}, {a.rounds} rounds", flush=True)
        time_plan(entries, a.rounds, a.seed, a.csv, flush_l2=not a.warm_l2)
    elif a.cmd == "merge":
        entries = merge([read_plan(path) for path in a.plans])
        with _open(a.out, "wt") as f:
            json.dump(entries, f, indent=0)
        print(
            f"{len(entries)} shapes, {sum(len(e['configs']) for e in entries)} configs to re-time"
        )
    else:
        score(read_plan(a.plan), a.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
