"""What ranking the weight gradient at a fixed batch costs small batches: re-timing plans.

For held-out conv2d_gw8_wgrad layers at N <= 32 (each with at least 8 measured configs, a seeded
sample of them), the fold model (5 folds by layer, as `spio tune eval`) ranks the family's whole
space twice: with the features at the real N (plan `atN`) and at 64 images (plan `at64`, the
rule before the batch buckets, `spio.kernels.conv2d_gw8.wgrad.select_batch`). Each plan entry
holds that pick and the shape's 3 fastest recorded configs; `retime_heldout.py` merges, times
and scores them:

    python benchmarks/plan_wgrad_select_batch.py --shapes 60 --out /tmp/smalln
    python benchmarks/retime_heldout.py merge /tmp/smalln_atN.json /tmp/smalln_at64.json \
        --out /tmp/smalln.json
    python benchmarks/retime_heldout.py time /tmp/smalln.json --csv t.csv      # H100
    python benchmarks/retime_heldout.py score /tmp/smalln_at64.json t.csv      # then _atN

The twenty-fifth session's plans and H100 timings: `benchmarks/data/yardstick/select_rule/`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

TUNE = Path(__file__).resolve().parent / "data" / "tune"
NAME = "conv2d_gw8_wgrad"


def plans(shapes: int, seed: int, folds: int = 5) -> dict[str, list[dict]]:
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.tune.dataset import read
    from spio.tune.evaluate import feature_rows, folds_by_group, shape_of
    from spio.tune.features import from_dict, to_dict
    from spio.tune.model import PerfModel

    kdef = KERNELS[NAME]
    samples = [s for s in read(TUNE / f"{NAME}.jsonl", NAME) if s.device.startswith("NVIDIA H100")]
    dev = _device_for(samples[0].device, "plan")
    rows = feature_rows(kdef, samples, dev)
    by_shape: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_shape[shape_of(kdef, s)].append(i)
    small = sorted(k for k, idx in by_shape.items() if json.loads(k)["n"] <= 32 and len(idx) >= 8)
    random.Random(seed).shuffle(small)
    chosen = set(small[:shapes])
    tested = folds_by_group(kdef, samples, folds)
    out: dict[str, list[dict]] = {"atN": [], "at64": []}
    for f in range(folds):
        test = [k for k in tested.get(f, []) if k in chosen]
        if not test:
            continue
        held = set(tested[f])
        train = [i for k, idx in by_shape.items() if k not in held for i in idx]
        model = PerfModel.train(
            kdef.name,
            samples[0].device,
            samples[0].arch,
            [rows[i] for i in train],
            [samples[i].latency_us for i in train],
        )
        for k in test:
            p = from_dict(kdef.params_type, json.loads(k))
            space = kdef.configs(p, dev)
            fastest = sorted(by_shape[k], key=lambda i: samples[i].latency_us)[:3]
            fast = [from_dict(kdef.config_type, samples[i].config) for i in fastest]
            for rule, n in (("atN", p.n), ("at64", 64)):
                guess = model.predict_us([kdef.features(replace(p, n=n), c, dev) for c in space])
                pick = space[min(range(len(space)), key=lambda i: (guess[i], i))]
                cfgs = [pick] + [c for c in fast if c != pick]
                out[rule].append(
                    {
                        "kernel": NAME,
                        "device": samples[0].device,
                        "shape": json.loads(k),
                        "configs": [to_dict(c) for c in cfgs],
                        "roles": [["pick", "tried"]] + [["fastest"]] * (len(cfgs) - 1),
                        # the pick's time is not recorded (0.0): it may be unmeasured
                        "recorded_us": [0.0]
                        + [
                            samples[i].latency_us
                            for i, c in zip(fastest, fast, strict=True)
                            if c != pick
                        ],
                        "recorded_pick_regret": 0.0,
                        "recorded_autotune_regret": 0.0,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True, help="prefix: writes <out>_atN.json ...")
    a = ap.parse_args(argv)
    for rule, entries in plans(a.shapes, a.seed).items():
        path = a.out.with_name(f"{a.out.name}_{rule}.json")
        path.write_text(json.dumps(entries))
        print(f"{path}: {len(entries)} shapes, {sum(len(e['configs']) for e in entries)} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
