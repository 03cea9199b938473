"""Host time of config selection: a new shape (model prediction over every config) and a cached one.

Targets (issue 6): ≤ 5 ms for a new shape, ≤ 20 µs for a cached selection. Needs no GPU: the
device is taken from spio's table (`known_device`). Uses the shipped model of each family when
there is one (otherwise the heuristic, which the table says).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.select import Selector
from spio.tune.store import find_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="H100")
    ap.add_argument("--shapes", type=int, default=30)
    args = ap.parse_args(argv)
    dev = known_device(args.device)
    print(f"{'kernel':<22} {'source':<10} {'configs':>8} {'new shape ms':>13} {'cached us':>10}")
    for name, kdef in KERNELS.items():
        if kdef.sample_params is None:
            continue
        rng = random.Random(0)
        source = "model" if find_model(name, dev.name, dev.arch) else "heuristic"
        # A fresh, empty pick store: "new shape" times the model's ranking (plus writing the
        # pick), not a pick an earlier run saved on disk.
        sel = Selector(store_dir=Path(tempfile.mkdtemp(prefix="spio-bench-selection-")))
        new_ms, cached_us, n_cfg = [], [], []
        for _ in range(args.shapes):
            p = kdef.sample_params(rng)
            t0 = time.perf_counter()
            sel.select(kdef, p, dev)
            t1 = time.perf_counter()
            for _ in range(100):
                sel.select(kdef, p, dev)
            t2 = time.perf_counter()
            new_ms.append((t1 - t0) * 1e3)
            cached_us.append((t2 - t1) / 100 * 1e6)
            n_cfg.append(len(kdef.configs(p, dev)))
        print(
            f"{name:<22} {source:<10} {statistics.median(n_cfg):>8.0f} "
            f"{statistics.median(new_ms):>13.2f} {statistics.median(cached_us):>10.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
