"""What a family's selection rule costs: re-timing plans of the picks of two or more rules.

The families select a layer's config at a bucketed size (`KernelDef.select_key`: conv2d_gw8 at
its batch's bucket, the layernorm families at their rows' bucket), not at the size the op runs.
For held-out layers whose batch-like field (the conv batch n, the layernorm rows m) is within
`--min-size`..`--max-size`, each with at least 8 measured configs (a seeded sample of `--shapes`
of them), the fold model (folds by layer, as `spio tune eval`) ranks the family's whole space
under each rule:

- `shape`: the features at the layer itself (the model's quality alone);
- `selected`: at the family's `select_key` (what the op runs today);
- `at<SIZE>` for each `--at SIZE`: at that fixed size (e.g. a rule before or after a change);
- `bucket<CAP>` for each `--bucket CAP`: at the size rounded up to a power of two, at most CAP.

Each plan entry holds that rule's pick and the layer's 3 fastest recorded configs;
`retime_heldout.py` merges, times and scores them:

    python benchmarks/plan_select_rule.py --kernel conv2d_gw8_wgrad --max-size 32 --at 64 \
        --out /tmp/smalln
    python benchmarks/retime_heldout.py merge /tmp/smalln_*.json --out /tmp/smalln.json
    python benchmarks/retime_heldout.py time /tmp/smalln.json --csv t.csv      # H100
    python benchmarks/retime_heldout.py score /tmp/smalln_at64.json t.csv      # each plan

In a plan the pick alone is "tried" and its recorded time is 0.0 (it may be unmeasured): the
"autotune" and "recorded" lines of `score` mean nothing here. The twenty-fifth session's wgrad
plans (`shape` and `at64`, made before wgrad's batch buckets, as `wgrad_smalln_atN` and
`_at64`) and their H100 timings: `benchmarks/data/yardstick/select_rule/`; the twenty-sixth
session's, every family's rules in one run (`scripts/gpu-session.sh select-rules`), in its
`rules26/`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

TUNE = Path(__file__).resolve().parent / "data" / "tune"


def plans(
    kernel: str,
    max_size: int,
    shapes: int,
    seed: int,
    at: list[int],
    folds: int = 5,
    min_size: int = 0,
    buckets: tuple[int, ...] = (),
) -> dict[str, list[dict]]:
    """Rule name -> its plan (one entry per chosen layer, in the same order in every plan)."""
    from spio.cli.tune import _device_for
    from spio.kernels import KERNELS
    from spio.kernels.kernel_def import pow2_bucket
    from spio.tune.dataset import read
    from spio.tune.evaluate import (
        batch_field,
        feature_rows,
        folds_by_group,
        shape_indices,
        train_without,
    )
    from spio.tune.features import from_dict, to_dict

    kdef = KERNELS[kernel]
    field = batch_field(kdef)
    if field is None:
        raise SystemExit(f"plan_select_rule: {kernel} has no batch-like field")
    samples = [
        s for s in read(TUNE / f"{kernel}.jsonl.gz", kernel) if s.device.startswith("NVIDIA H100")
    ]
    dev = _device_for(samples[0].device, "plan")
    rows = feature_rows(kdef, samples, dev)
    by_shape = shape_indices(kdef, samples)
    small = sorted(
        k
        for k, idx in by_shape.items()
        if min_size <= json.loads(k)[field] <= max_size and len(idx) >= 8
    )
    random.Random(seed).shuffle(small)
    chosen = set(small[:shapes])

    rules = {"shape": lambda p: p, "selected": lambda p: kdef.selection(p)}
    for size in at:
        rules[f"at{size}"] = lambda p, size=size: replace(p, **{field: size})
    for cap in buckets:
        rules[f"bucket{cap}"] = lambda p, cap=cap: replace(
            p, **{field: pow2_bucket(getattr(p, field), cap)}
        )
    tested = folds_by_group(kdef, samples, folds)
    out: dict[str, list[dict]] = {name: [] for name in rules}
    for f in range(folds):
        test = [k for k in tested.get(f, []) if k in chosen]
        if not test:
            continue
        model = train_without(kdef, samples, rows, by_shape, set(tested[f]))
        assert model is not None  # the other folds hold samples
        for k in test:
            p = from_dict(kdef.params_type, json.loads(k))
            space = kdef.configs(p, dev)
            fastest = sorted(by_shape[k], key=lambda i: samples[i].latency_us)[:3]
            fast = [from_dict(kdef.config_type, samples[i].config) for i in fastest]
            for name, rule in rules.items():
                ranked_at = rule(p)
                guess = model.predict_us([kdef.features(ranked_at, c, dev) for c in space])
                pick = space[min(range(len(space)), key=lambda i: (guess[i], i))]
                cfgs = [pick] + [c for c in fast if c != pick]
                out[name].append(
                    {
                        "kernel": kernel,
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
    ap.add_argument("--kernel", required=True, help="e.g. conv2d_gw8_wgrad, layernorm_2d_bwd")
    ap.add_argument("--max-size", type=int, required=True, help="largest batch (n) or rows (m)")
    ap.add_argument("--min-size", type=int, default=0, help="smallest batch (n) or rows (m)")
    ap.add_argument("--at", type=int, action="append", default=[], help="a fixed size to rank at")
    ap.add_argument(
        "--bucket", type=int, action="append", default=[], help="rank at the power-of-two bucket"
    )
    ap.add_argument("--shapes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True, help="prefix: writes <out>_<rule>.json")
    a = ap.parse_args(argv)
    chosen = plans(
        a.kernel, a.max_size, a.shapes, a.seed, a.at, min_size=a.min_size, buckets=tuple(a.bucket)
    )
    for rule, entries in chosen.items():
        path = a.out.with_name(f"{a.out.name}_{rule}.json")
        path.write_text(json.dumps(entries))
        print(f"{path}: {len(entries)} shapes, {sum(len(e['configs']) for e in entries)} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
