"""Fits the Hopper matmul heuristic's cost model to every config's measured time, and scores it.

`spio.kernels.matmul_sm90.heuristic` picks, among HEURISTIC_CANDIDATES, the config of least
`predicted_us`: waves x (k tiles per CTA x A + B) per family, plus C per MB of fp32 partials + D
for split-K (see WAVE_COST_US there). This script fits A, B, C, D by least squares of the relative
error to the yardstick CSVs (`benchmarks/bench_matmul_sm90.py --configs-csv`: every config timed
at each shape, one file per GPU), prints them as the literals matmul_sm90.py holds, and scores
the picks against the best measured config of each shape:
  - held out: each shape left out of the fit in turn (on every GPU), the honest number, on
    kernel time and as called (each time floored at the host time of an eager call of its kind:
    the heuristic leaves host-bound products unsplit, which kernel time alone counts against it);
  - shipped: the constants in matmul_sm90.py (fitted on all shapes: in-sample).

    python benchmarks/fit_matmul_sm90.py            # fit, print, score
    python benchmarks/fit_matmul_sm90.py --check    # exit 1 unless the shipped constants refit
    python benchmarks/fit_matmul_sm90.py --tails \\
        benchmarks/data/sweeps/matmul_sm90_candidates57__nvidia-h200.csv

`--tails F` scores the shipped cost model with and without split tails on a file of
`bench_matmul_sm90.py --candidates` (the candidates and the tail configs timed in one run),
against the best of those (a tail config recorded where the shape has no tail ran the plain
variant: left out), and SPIO_AUTOTUNE's choice (the fastest of `matmul_sm90.ranked`). `--with G`
merges G (same GPU) into each F by shape first: the 57-shape H100 files with their 8 decode shapes
re-swept with the swapped configs,

    python benchmarks/fit_matmul_sm90.py \
        --tails benchmarks/data/sweeps/matmul_sm90_rebalanced57__nvidia-h100-80gb-hbm3.csv \
        --with benchmarks/data/sweeps/matmul_sm90_decode8__nvidia-h100-80gb-hbm3.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "sweeps"
PATTERN = "matmul_sm90_yardstick*__*.csv"
SIGNIFICANT = 4  # digits the shipped constants keep
# Rows without a "us" column (the yardstick's first files) give TFLOP/s to one decimal: below
# this the time is known to worse than 1% and the row is left out.
MIN_TFLOPS = 5.0


def load(paths: list[Path]) -> dict[str, dict[tuple[int, int, int], dict]]:
    """{device name: {(m, n, k): {config: µs}}} from the CSVs' fp16 rows (the device from the
    file name's slug: `<name>__<device slug>.csv`); rows timed too coarsely (MIN_TFLOPS) are left
    out (slow configs of tiny products: never a best nor a pick)."""
    from spio.cuda._known_devices import KNOWN
    from spio.kernels import matmul_sm90 as k90
    from spio.tune.store import slug

    by_slug = {slug(d.name): d.name for d in KNOWN}
    out: dict[str, dict[tuple[int, int, int], dict]] = {}
    for path in paths:
        name = by_slug[path.stem.split("__")[-1]]
        table: dict[tuple[int, int, int], dict] = defaultdict(dict)
        with path.open() as f:
            for r in csv.DictReader(f):
                m, n, k = (int(v) for v in r["shape"].split("x"))
                cfg = k90.MatmulSm90Config(
                    int(r["block_n"]), int(r["stages"]), cluster_m=int(r["cluster_m"]),
                    persistent=r["persistent"] == "True", split_k=int(r["split_k"]),
                    tail=r.get("tail") == "True", swap_ab=r.get("swap_ab") == "True",
                )  # fmt: skip
                if r["dtype"] != "float16":
                    continue  # the model is fitted to fp16 timings
                if r.get("us"):
                    table[(m, n, k)][cfg] = float(r["us"])
                elif float(r["tflops"]) >= MIN_TFLOPS:
                    table[(m, n, k)][cfg] = 2 * m * n * k / float(r["tflops"]) / 1e6
        out.setdefault(name, {}).update(table)  # a later file's shape replaces an earlier one's
    return out


def _device(name: str):
    from spio.cuda._known_devices import KNOWN

    return next(d for d in KNOWN if d.name == name)


def _params(shape: tuple[int, int, int]):
    from spio.kernels.matmul_params import MatmulParams

    return MatmulParams(*shape, "float16", "float16", b_transposed=True)


def _row(shape, cfg, dev, families) -> list[float]:
    """The cost model's terms: A and B of cfg's family, then C and D (split-K)."""
    from spio.kernels import matmul_sm90 as k90

    p = _params(shape)
    waves, k_tiles = k90.cost_terms(p, cfg, dev)
    row = [0.0] * (2 * len(families) + 2)
    i = families.index(k90.cost_family(cfg))
    row[2 * i], row[2 * i + 1] = waves * k_tiles, waves
    if cfg.split_k > 1:
        row[-2], row[-1] = k90.split_mb(p, cfg), 1.0
    return row


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


def fit(data, leave_out: tuple[int, int, int] | None = None):
    """(wave_cost, split_cost) fitted to every candidate's time at every shape but `leave_out`:
    least squares of each term row divided by its measured time against 1 (relative error),
    with C (µs per MB of partials) held at 0 where it would come out negative."""
    import numpy as np

    from spio.kernels import matmul_sm90 as k90

    families = sorted({k90.cost_family(c) for c in k90.HEURISTIC_CANDIDATES})
    rows, ones = [], []
    for name, table in data.items():
        dev = _device(name)
        for shape, times in table.items():
            if shape == leave_out:
                continue
            for cfg in k90.HEURISTIC_CANDIDATES:
                if cfg in times:
                    rows.append([v / times[cfg] for v in _row(shape, cfg, dev, families)])
                    ones.append(1.0)
    x, y = np.array(rows), np.array(ones)
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    if coef[-2] < 0:  # partials cannot make a split faster: C held at 0, the rest refitted
        keep = [i for i in range(x.shape[1]) if i != x.shape[1] - 2]
        coef = np.insert(np.linalg.lstsq(x[:, keep], y, rcond=None)[0], x.shape[1] - 2, 0.0)
    wave_cost = {f: (_round(coef[2 * i]), _round(coef[2 * i + 1])) for i, f in enumerate(families)}
    return wave_cost, (_round(coef[-2]), _round(coef[-1]))


def pick(shape, dev, wave_cost=None, split_cost=None):
    """The heuristic's pick with the given constants (default: the shipped ones)."""
    from spio.kernels import matmul_sm90 as k90

    p = _params(shape)
    if p.n <= 64:
        return k90.heuristic(p, dev)
    return k90.cost_pick(p, dev, wave_cost, split_cost, tails=False)  # the files time no tails


def summary(regrets: list[tuple[float, str, tuple]]) -> str:
    values = sorted(r for r, _, _ in regrets)
    p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
    worst = max(regrets)
    return (
        f"{len(values)} (GPU, shape) pairs: median {values[(len(values) - 1) // 2]:.3f}, "
        f"p90 {p90:.3f}, max {worst[0]:.3f} ({worst[1]}, {'x'.join(map(str, worst[2]))})"
    )


def score(data, held_out: bool, as_called: bool = False) -> list[tuple[float, str, tuple]]:
    """(pick's time / best config's time, device, shape) for every shape of every GPU: kernel
    times, or with `as_called` each time floored at the host time of an eager call of its kind
    (PLAIN_HOST_US, SPLIT_HOST_US: back-to-back calls take the larger of host and GPU time)."""
    from spio.kernels import matmul_sm90 as k90

    def cost(cfg, us: float) -> float:
        if not as_called:
            return us
        return max(us, k90.host_us(cfg))

    out = []
    shapes = sorted({s for table in data.values() for s in table})
    for shape in shapes:
        tables = fit(data, leave_out=shape) if held_out else (None, None)
        for name, table in data.items():
            if shape not in table:
                continue
            cfg = pick(shape, _device(name), *tables)
            times = table[shape]
            if cfg in times:
                best = min(cost(c, t) for c, t in times.items())
                out.append((cost(cfg, times[cfg]) / best, name, shape))
    return out


def _shapes(name: str, table: dict):
    """(params, shape, times) of every shape of one GPU's table, the tail rows of shapes without
    a split tail (they ran the plain variant) left out."""
    from spio.kernels import matmul_sm90 as k90

    dev = _device(name)
    for shape, times in table.items():
        p = _params(shape)
        yield (
            p,
            shape,
            {c: t for c, t in times.items() if not c.tail or k90.tail_plan(p, c, dev)[1] > 1},
        )


def tail_score(name: str, table: dict, tails: bool) -> list[tuple[float, str, tuple]]:
    """(pick's time / best time, device, shape) on one GPU's --candidates table, the heuristic
    with split tails or without (`cost_pick(tails=False)`); tail rows without a tail left out."""
    from spio.kernels import matmul_sm90 as k90

    dev = _device(name)
    out = []
    for p, shape, times in _shapes(name, table):
        cfg = k90.heuristic(p, dev) if p.n <= 64 else k90.cost_pick(p, dev, tails=tails)
        out.append((times[cfg] / min(times.values()), name, shape))
    return out


def heuristic_score(name: str, table: dict) -> tuple[list[tuple[float, str, tuple]], int]:
    """(`matmul_sm90.heuristic`'s pick / best, device, shape): the cost model's pick with split
    tails and `large_pick`, i.e. the op's config; shapes whose pick the table did not time are
    left out and counted (a --candidates file times no LARGE_PICK)."""
    from spio.kernels import matmul_sm90 as k90

    dev = _device(name)
    out, missing = [], 0
    for p, shape, times in _shapes(name, table):
        cfg = k90.heuristic(p, dev)
        if cfg not in times:
            missing += 1
            continue
        out.append((times[cfg] / min(times.values()), name, shape))
    return out, missing


def autotune_score(
    name: str, table: dict, as_called: bool = False
) -> tuple[list[tuple[float, str, tuple]], int]:
    """(SPIO_AUTOTUNE's pick / best, device, shape) on one GPU's --candidates table: autotune
    measures `ranked`'s configs and keeps the fastest on GPU time; with `as_called` that pick's
    time and every other are floored at their call's host time (PLAIN_HOST_US, SPLIT_HOST_US
    for split-K and tails), as `score` does. Also how many ranked configs the table did not time
    (left out; a shape with none timed is left out too)."""
    from spio.kernels import matmul_sm90 as k90

    def cost(c, us: float) -> float:
        if not as_called:
            return us
        return max(us, k90.host_us(c))

    dev = _device(name)
    out, missing = [], 0
    for p, shape, times in _shapes(name, table):
        ranked = k90.ranked(p, dev)
        timed = [c for c in ranked if c in times]
        missing += len(ranked) - len(timed)
        if not timed:
            continue
        won = min(timed, key=times.__getitem__)
        best = min(cost(c, t) for c, t in times.items())
        out.append((cost(won, times[won]) / best, name, shape))
    return out, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, action="append", help=f"default: {DATA}/{PATTERN}")
    ap.add_argument(
        "--check", action="store_true", help="exit 1 unless the shipped constants refit"
    )
    ap.add_argument(
        "--tails", type=Path, action="append", help="score split tails on a --candidates file"
    )
    ap.add_argument(
        "--with",
        dest="extra",
        type=Path,
        action="append",
        default=[],
        help="a file of the same GPU merged into each --tails file by shape (its shapes replace "
        "the file's: e.g. a decode sweep with the swapped configs)",
    )
    args = ap.parse_args(argv)
    from spio.kernels import matmul_sm90 as k90

    for path in args.tails or []:  # one file at a time: two runs of one GPU stay apart
        for name, table in load([path, *args.extra]).items():
            for tails in (False, True):
                what = f"{path.name}, the cost model, tails {'on' if tails else 'off'}:"
                print(what, summary(tail_score(name, table, tails)))
            regrets, missing = heuristic_score(name, table)
            print(f"{path.name}, the heuristic (tails and large_pick; {missing} shapes whose pick "
                  f"the file did not time):", summary(regrets) if regrets else "none")  # fmt: skip
            for as_called in (False, True):
                regrets, missing = autotune_score(name, table, as_called)
                print(f"{path.name}, SPIO_AUTOTUNE (fastest of `ranked`; {missing} ranked configs "
                      f"not in the file){', as called' if as_called else ''}:",
                      summary(regrets))  # fmt: skip
    if args.tails:
        return 0

    data = load(args.csv or sorted(DATA.glob(PATTERN)))
    wave_cost, split_cost = fit(data)
    if args.check:
        same = wave_cost == k90.WAVE_COST_US and split_cost == k90.SPLIT_COST_US
        print("shipped constants refit" if same else "shipped constants differ from the fit")
        return 0 if same else 1
    print("WAVE_COST_US = {")
    for fam, (a, b) in sorted(wave_cost.items(), reverse=True):
        print(f"    {fam}: ({a}, {b}),")
    print("}")
    print(f"SPLIT_COST_US = {split_cost}")
    print("held out (each shape left out of the fit), kernel time:", summary(score(data, True)))
    print("held out, as called (times floored at the host's):", summary(score(data, True, True)))
    print("shipped constants (in-sample), kernel time:", summary(score(data, False)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
