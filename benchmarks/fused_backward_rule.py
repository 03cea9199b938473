"""Where the conv backward should fuse, and with which config: the fused kernel's every config
(a `spio tune collect` dataset of `conv2d_gw8_wgrad_dgrad`) against the two kernels the op runs
otherwise (dgrad + wgrad with their reduction, the op's selected configs), per layer.

    python benchmarks/fused_backward_rule.py shapes OUT.json        # the RegNet layers to collect
    spio tune collect --kernel conv2d_gw8_wgrad_dgrad --shapes OUT.json --out DATA.jsonl
    python benchmarks/fused_backward_rule.py sep DATA.jsonl SEP.csv  # on a GPU: dgrad + wgrad
    python benchmarks/fused_backward_rule.py table DATA.jsonl SEP.csv [--model FILE]

`sep` times the op's dgrad and wgrad (reduction included) of every layer of DATA as `spio tune
collect` timed the fused configs (`spio.timing.bench`, L2 flushed, the median of REPS, after
WARMUP_MS). `table` ranks each layer's fused configs with a model that never saw the layer (the
held-out folds of `spio tune eval`; or `--model`, a trained model), and prints per layer: sep,
the fused heuristic, the model's pick, the best fused config, and what each rule of
`wgrad.FUSE_*` would run.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

# Layers of regnetx_002 (batch 256) and regnety_004 (batch 128) that fuse by kernel size, and a
# few others (the thirty-seventh session's), each at its training batch and at SMALL_BATCH.
REGNET = [
    # (name, c, input h = w, stride, batch)
    ("x", 24, 56, 1, 256), ("x", 56, 28, 1, 256), ("x", 152, 14, 1, 256), ("x", 368, 7, 1, 256),
    ("y", 48, 56, 1, 128), ("y", 104, 28, 1, 128), ("y", 208, 14, 1, 128), ("y", 440, 7, 1, 128),
    ("-", 64, 56, 1, 128), ("-", 256, 14, 1, 256),
    ("x", 24, 112, 2, 256), ("x", 56, 56, 2, 256), ("x", 152, 28, 2, 256), ("x", 368, 14, 2, 256),
    ("y", 48, 112, 2, 128), ("y", 104, 56, 2, 128), ("y", 208, 28, 2, 128), ("y", 440, 14, 2, 128),
]  # fmt: skip
SMALL_BATCH = 32
REPS = 15  # as spio.tune.collect
WARMUP_MS = 5.0


def _layers():
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    out = []
    for _, c, hw, st, n in REGNET:
        for batch in (n, SMALL_BATCH):
            out.append(Conv2dGw8Params(n=batch, c=c, h=hw, w=hw, r=3, s=3, pad_h=1, pad_w=1,
                                       stride_h=st, stride_w=st))  # fmt: skip
    return out


def cmd_shapes(a) -> None:
    from spio.tune.features import to_dict

    Path(a.out).write_text(json.dumps([to_dict(p) for p in _layers()]) + "\n")
    print(f"{len(_layers())} layers -> {a.out}")


def _params(data: str):
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.tune.dataset import read
    from spio.tune.features import from_dict

    samples = read(Path(data), "conv2d_gw8_wgrad_dgrad")
    seen = {}
    for s in samples:
        seen.setdefault(json.dumps(s.params, sort_keys=True), s.params)
    return samples, [from_dict(Conv2dGw8Params, d) for d in seen.values()]


def cmd_sep(a) -> None:
    import torch

    from spio.cuda import device_attributes
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.kernels.conv2d_gw8 import tune as t
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
    from spio.kernels.loader import compile_specs
    from spio.select import op_config
    from spio.timing import bench
    from spio.tune.features import to_dict

    _, layers = _params(a.data)
    done = set()
    if Path(a.out).exists():  # a rerun times only the layers not yet in OUT
        with open(a.out) as f:
            done = {
                row["params"]
                for row in csv.DictReader(line for line in f if not line.startswith("#"))
            }
    layers = [p for p in layers if json.dumps(to_dict(p), sort_keys=True) not in done]
    dev = device_attributes(torch.cuda.current_device())
    picks = []
    specs = []
    for p in layers:
        dcfg = op_config(fp.DGRAD, replace(p, has_bias=False), dev)
        wcfg = op_config(wg.WGRAD, p, dev)
        picks.append((dcfg, wcfg))
        specs += [fp.DGRAD.spec(replace(p, has_bias=False), dcfg, dev), wg.WGRAD.spec(p, wcfg, dev),
                  rd.WGRAD_REDUCE.spec(p, rd.reduce_config(p, wcfg, dev), dev)]  # fmt: skip
    compile_specs(specs, dev.arch)  # in parallel, into the disk cache
    with open(a.out, "a", newline="") as f:
        out = csv.writer(f)
        if not done:
            out.writerow(["params", "dgrad_cfg", "wgrad_cfg", "dgrad_us", "wgrad_us", "sep_us"])
        for p, (dcfg, wcfg) in zip(layers, picks, strict=True):
            runs = (t.make_dgrad_runner(replace(p, has_bias=False), dcfg),
                    t.make_wgrad_runner(p, wcfg))  # fmt: skip
            us = [bench(r, warmup_ms=WARMUP_MS, reps=REPS).median_ms * 1e3 for r in runs]
            out.writerow([json.dumps(to_dict(p), sort_keys=True), repr(dcfg), repr(wcfg),
                          f"{us[0]:.2f}", f"{us[1]:.2f}", f"{sum(us):.2f}"])  # fmt: skip
            f.flush()
            print(f"{p}: dgrad {us[0]:.1f} + wgrad {us[1]:.1f} = {sum(us):.1f} us", flush=True)
            del runs
            torch.cuda.empty_cache()


def cmd_table(a) -> None:
    from spio.cuda import known_device
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.tune.evaluate import held_out
    from spio.tune.features import from_dict, to_dict
    from spio.tune.model import PerfModel

    samples, _ = _params(a.data)
    dev = known_device(samples[0].device)
    model = PerfModel.load(Path(a.model)) if a.model else None
    complete = held_out(wg.WGRAD_DGRAD, samples, dev, model=model).complete
    sep = {}
    with open(a.sep) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            sep[json.dumps(json.loads(row["params"]), sort_keys=True)] = float(row["sep_us"])
    print("layer | sep | heuristic | pick | best | sep/pick | rule | tasks/SM")
    totals = {"sep": 0.0, "pick": 0.0, "best": 0.0, "rule": 0.0, "oracle": 0.0}
    for shape in complete:
        p = from_dict(type(wg.WGRAD_DGRAD.examples()[0]), json.loads(shape.shape))
        s = sep.get(json.dumps(to_dict(p), sort_keys=True))
        if s is None:
            continue
        pick_cfg = shape.configs[shape.ranked[0]]
        pick = shape.times[shape.ranked[0]]
        best = min(shape.times)
        heur = wg.fused_heuristic(p, dev)
        heur_us = shape.times[shape.configs.index(heur)] if heur in shape.configs else float("nan")
        rule = wg.may_fuse(p, dev) and wg.fuses(p, pick_cfg, dev)
        tasks = p.n * wg.group_blocks(p, pick_cfg) / dev.sm_count
        totals["sep"] += s
        totals["pick"] += pick
        totals["best"] += best
        totals["rule"] += pick if rule else s
        totals["oracle"] += min(s, pick)
        verdict = "fuse" if rule else "sep"
        print(f"{p.n} C{p.c} {p.h}^2 s{p.stride_h} | {s:.1f} | {heur_us:.1f} | {pick:.1f} | "
              f"{best:.1f} | {s / pick:.3f} | {verdict} | {tasks:.1f}")  # fmt: skip
    print(" | ".join(f"{k} {v:.1f}" for k, v in totals.items()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shapes")
    s.add_argument("out")
    s.set_defaults(func=cmd_shapes)
    s = sub.add_parser("sep")
    s.add_argument("data")
    s.add_argument("out")
    s.set_defaults(func=cmd_sep)
    s = sub.add_parser("table")
    s.add_argument("data")
    s.add_argument("sep")
    s.add_argument("--model")
    s.set_defaults(func=cmd_table)
    a = ap.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    sys.exit(main())
