"""Host time of config selection: a new shape (model prediction over every config), a cached one,
and per process: the first selection of a fresh process (model load included) and a process that
finds its pick persisted.

Targets: ≤ 5 ms for a new shape, ≤ 20 µs cached, ≤ 50 ms for a fresh process's first selection,
≤ 5 ms for a persisted pick (neither with a numpy or XGBoost import). Needs no GPU: the device is
taken from spio's table (`known_device`). Uses the shipped model of each family when there is one
(otherwise the heuristic, which the table says). "rank ms" is the model's pick alone
(`spio.tune.rank.best`: configs, features, prediction), "new shape ms" the whole selection (the
basis and the pick's write included). `--processes N` runs each process-level row N times (fresh
Python processes; the import of spio itself is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.select import Selector
from spio.tune.rank import best
from spio.tune.store import find_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="H100")
    ap.add_argument("--shapes", type=int, default=30)
    ap.add_argument("--processes", type=int, default=3, help="runs of each process-level row")
    args = ap.parse_args(argv)
    dev = known_device(args.device)
    print(
        f"{'kernel':<22} {'source':<10} {'configs':>8} {'rank ms':>8} {'new shape ms':>13} "
        f"{'cached us':>10}"
    )
    for name, kdef in KERNELS.items():
        if kdef.sample_params is None:
            continue
        rng = random.Random(0)
        model = find_model(name, dev.name, dev.arch)
        source = "model" if model else "heuristic"
        # A fresh, empty pick store: "new shape" times the model's ranking (plus writing the
        # pick), not a pick an earlier run saved on disk.
        sel = Selector(store_dir=Path(tempfile.mkdtemp(prefix="spio-bench-selection-")))
        rank_ms, new_ms, cached_us, n_cfg = [], [], [], []
        for _ in range(args.shapes):
            p = kdef.sample_params(rng)
            if model is not None and kdef.derived_from is None:
                t = time.perf_counter()
                best(kdef, p, dev, model)
                rank_ms.append((time.perf_counter() - t) * 1e3)
            t0 = time.perf_counter()
            sel.select(kdef, p, dev)
            t1 = time.perf_counter()
            for _ in range(100):
                sel.select(kdef, p, dev)
            t2 = time.perf_counter()
            new_ms.append((t1 - t0) * 1e3)
            cached_us.append((t2 - t1) / 100 * 1e6)
            n_cfg.append(len(kdef.configs(p, dev)))
        ranked = f"{statistics.median(rank_ms):>8.2f}" if rank_ms else f"{'-':>8}"
        print(
            f"{name:<22} {source:<10} {statistics.median(n_cfg):>8.0f} {ranked} "
            f"{statistics.median(new_ms):>13.2f} {statistics.median(cached_us):>10.2f}"
        )
    if args.processes > 0:
        _process_rows(args.device, args.processes)
    return 0


# One selection in a fresh process: the ms it took and whether numpy / XGBoost got imported.
_ONE_SELECTION = """
import json, random, sys, time
from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.select import op_config
kdef = KERNELS[sys.argv[1]]
p = kdef.sample_params(random.Random(1))
t = time.perf_counter()
op_config(kdef, p, known_device(sys.argv[2]))
ms = (time.perf_counter() - t) * 1e3
print(json.dumps([ms, "numpy" in sys.modules, "xgboost" in sys.modules]))
"""


def _process_rows(device: str, runs: int) -> None:
    """Per family: a fresh process's first selection (empty cache dir: model load and ranking),
    then a new process that finds that pick persisted; medians over `runs` cache dirs, and the
    heavy modules either process imported."""
    print(
        f"\n{'kernel':<22} {'first in process ms':>20} {'persisted ms':>13} "
        f"{'numpy/xgboost imported':>24}"
    )
    for name, kdef in KERNELS.items():
        if kdef.sample_params is None or kdef.derived_from is not None:
            continue
        first: list[float] = []
        again: list[float] = []
        imported: dict[str, set[str]] = {"first": set(), "persisted": set()}
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="spio-bench-selection-") as d:
                env = {**os.environ, "SPIO_CACHE_DIR": d}
                for times, which in ((first, "first"), (again, "persisted")):
                    out = subprocess.run(
                        [sys.executable, "-c", _ONE_SELECTION, name, device],
                        env=env, capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    ms, numpy_in, xgb_in = json.loads(out.stdout.splitlines()[-1])
                    times.append(ms)
                    imported[which] |= {
                        m for m, on in (("numpy", numpy_in), ("xgboost", xgb_in)) if on
                    }
        said = "; ".join(
            f"{which}: {', '.join(sorted(mods)) or 'neither'}" for which, mods in imported.items()
        )
        print(
            f"{name:<22} {statistics.median(first):>20.1f} {statistics.median(again):>13.2f} "
            f"  {said}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
