"""`spio tune collect`: measure (params, config) samples of a kernel family on a GPU.

Params come from the family's `sample_params` (realistic layer shapes plus random ones), or from a
list (`spio tune collect --shapes FILE`: the layers a model has, a region the data misses); every
valid config of a shape is compiled in parallel (through the disk cache), then timed with
`spio.timing.bench` (CUDA events, L2 flushed, median of REPS). Rows are appended per shape, so an
interrupted run loses at most one shape and a rerun skips what is already measured. `--device
all` runs one worker process per GPU.

Slow first timings: the older datasets hold runs of rows 2-28x too slow right after a shape's
compile pause. Clocks dropping while the host compiles is a hypothesis (no clock was logged; SM
clocks span ~6x); host time leaking into timings that had no GPU spin before each call (now
`spio.timing.bench` has one) is the other explanation. So after every pause (the shape's compile, or
a `make_runner` call over PAUSE_S, i.e. a reduce variant compiled inside it) the next config first
runs `spio.timing.bench`'s warm-up for SHAPE_WARMUP_MS (about that much wall time: a host-bound call
issues calls the whole time, the GPU mostly idle); after the shape, the RECHECK_FIRST configs timed
after each pause and the RECHECK fastest are timed again, keeping the lower median (`timings` 2; a
re-time out of memory or resources keeps the first). The min of two medians reads ~0.5-1.5% low
against rows timed once (1-3% noise on a median of 15): see docs/tuning.md. On a resumed, partly
measured shape only the newly timed configs take part.

Which configs a shape measures: all of them, or with `max_configs` a uniform sample; with
`active` too (`spio tune collect --active`), the shipped or local model's top-ranked share of
that budget plus a uniform sample of the rest (`choose_configs`): the configs a pick comes from
get measured where the model is right and corrected where it is wrong, and the sample keeps the
rest of the space covered. Without a model for the GPU, a uniform sample.

Compile-ahead (the default; `spio tune collect --no-compile-ahead` turns it off): a background
thread compiles the next shape's variants (niced processes, AHEAD_NICE, two cores left to the
timing process) while this shape is timed, instead of compiling each shape before timing it with
the GPU idle. Measured on an H200 (thirty-fifth session, 5 listed wgrad shapes, 1197 configs,
fresh disk caches): 41.8 s without it, 22.4 and 23.5 s with it, against 24.0 s for the same
collection with every variant already cached, so the compile is wholly hidden; the timings agree
as two plain runs do (per config with / without: geomean 0.9996, |log ratio| median 1.0088 and
p90 1.0385; plain against plain: 0.9993, 1.0087, 1.0397). The background thread also prepares
the jobs in this process (the @spio expansion, about 0.5 ms of Python a variant), so it takes the
GIL from the timing loop now and then; `spio.timing.bench` queues a GPU spin before each timed
call, so a stall of the host shows in a timing only when it falls between the start event and
the call's last launch, and the median of REPS drops a rare one.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.tune.dataset import Sample, append, read
from spio.tune.features import to_dict

REPS = 15
WARMUP_MS = 5.0
SHAPE_WARMUP_MS = 50.0
PAUSE_S = 0.02  # a make_runner call longer than this compiled something: warm up again
RECHECK = 5  # the fastest configs of a shape, timed twice
RECHECK_FIRST = 8  # the configs timed right after each pause, timed twice
ACTIVE_TOP = 0.5  # with --active: the share of a shape's config budget taken from the model's top
AHEAD_NICE = 10  # compile-ahead's processes yield the CPU to the timing process


def choose_configs(
    configs: list[Any],
    max_configs: int | None,
    rng: random.Random,
    ranked: list[Any] | None = None,
    top_share: float = ACTIVE_TOP,
) -> list[Any]:
    """The configs one shape measures, in the order to time them: every config when max_configs
    is None or not below their count; without a ranking, `rng.sample(configs, max_configs)`;
    with `ranked` (the model's ranking of the same configs, fastest first), its first
    ceil(top_share * max_configs) and a uniform sample of the others up to max_configs, in a
    random order (so a drift in the GPU's clocks over a shape does not always land on the same
    configs)."""
    if max_configs is None or len(configs) <= max_configs:
        return list(configs)
    if ranked is None:
        return rng.sample(configs, max_configs)
    if not 0.0 <= top_share <= 1.0:
        raise ValueError(f"choose_configs: top_share must be in [0, 1], got {top_share}")
    if set(ranked) != set(configs):
        raise ValueError("choose_configs: `ranked` must order the same configs as `configs`")
    top = ranked[: math.ceil(top_share * max_configs)]
    chosen = set(top)
    rest = [c for c in configs if c not in chosen]
    picked = top + rng.sample(rest, max_configs - len(top))
    rng.shuffle(picked)
    return picked


def model_ranking(kdef: KernelDef, params: Any, dev: Any) -> list[Any] | None:
    """The configs of `params` fastest first as the model for `dev` predicts (the shipped or
    local one, as selection finds it), or None when there is none or its features no longer
    match the family's."""
    from spio.errors import ModelFormatError
    from spio.tune.rank import rank
    from spio.tune.store import find_model

    model = find_model(kdef.name, dev.name, dev.arch)
    if model is None:
        return None
    try:
        return [c for c, _ in rank(kdef, params, dev, model)]
    except ModelFormatError:
        return None


def recheck_fastest(
    latency_us: list[float],
    remeasure: Callable[[int], float],
    count: int = RECHECK,
    also: Iterable[int] = (),
    tolerate: tuple[type[BaseException], ...] = (),
) -> list[float]:
    """latency_us with the `count` fastest entries and those at the indices `also` replaced by
    min(first, remeasure(i)), each index re-timed once, in index order. A remeasure raising one
    of `tolerate` keeps the first timing. The lower of two timings: interference mostly adds
    time (a boost after idle could also make one too fast)."""
    out = list(latency_us)
    extra = set(also)
    if any(not 0 <= i < len(out) for i in extra):
        raise ValueError(
            f"recheck_fastest: `also` must index latency_us (0..{len(out) - 1}), "
            f"got {sorted(extra)}"
        )
    fastest = sorted(range(len(out)), key=out.__getitem__)[:count]
    for i in sorted(extra.union(fastest)):
        try:
            again = remeasure(i)
        except tolerate:
            continue
        out[i] = min(out[i], again)
    return out


def _precompile(
    kdef: KernelDef, params: Any, configs: list[Any], dev: Any, workers: int | None = None
) -> None:
    """Compiles the configs' variants into the disk cache; with `workers` (compile-ahead: beside
    the timing of another shape) in that many processes, niced by AHEAD_NICE."""
    from spio.kernels.loader import compile_specs

    specs = [kdef.spec(params, c, dev) for c in configs]
    compile_specs(specs, dev.arch, workers=workers, nice=0 if workers is None else AHEAD_NICE)


def _ahead_workers() -> int:
    """Compile-ahead's processes: SPIO_WORKERS, leaving two cores to the timing process."""
    from spio.settings import settings

    return max(1, min(settings().workers, (os.cpu_count() or 1) - 2))


def _plans(
    kdef: KernelDef,
    dev: Any,
    sample_params: Callable[[random.Random], Any],
    rng: random.Random,
    listed: Iterator[Any] | None,
    max_configs: int | None,
    active: bool,
) -> Iterator[tuple[Any, list[Any]]]:
    """(params, configs to measure) of each shape in collect's order: the listed params, else
    `sample_params`' (no end); `rng` is drawn in the same order whenever the plans are taken."""
    while True:
        params = sample_params(rng) if listed is None else next(listed, None)
        if params is None:
            return
        configs = kdef.configs(params, dev)
        if max_configs is not None and len(configs) > max_configs:
            ranked = model_ranking(kdef, params, dev) if active else None
            configs = choose_configs(configs, max_configs, rng, ranked)
        yield params, configs


def collect(
    kdef: KernelDef,
    minutes: float,
    out: Path,
    ordinal: int = 0,
    seed: int = 0,
    max_configs: int | None = None,
    progress: bool = True,
    active: bool = False,
    shapes: list[Any] | None = None,
    compile_ahead: bool = True,
) -> int:
    """Measures samples for about `minutes`; returns how many new rows were written. `active`:
    with max_configs, half the budget of each shape goes to the model's top-ranked configs
    (`choose_configs`). `shapes`: these params, in order, instead of `sample_params`'s (the
    layers a model has, or a region the data misses); it stops after the last, or says how many
    it did not reach when the time runs out first. `compile_ahead`: compile the next shape's
    variants in a background thread (processes niced by AHEAD_NICE, two cores left free) while
    this shape is timed, instead of before timing it with the GPU idle (module docstring)."""
    import torch

    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.timing import bench

    sample_params, make_runner = kdef.sample_params, kdef.make_runner
    if sample_params is None or make_runner is None:
        raise ValueError(f"{kdef.name}: the family defines no sample_params/make_runner to collect")
    listed = None if shapes is None else iter(shapes)
    torch.cuda.set_device(ordinal)
    dev = device_attributes(ordinal)
    done = {s.pair_key() for s in read(out, kdef.name, dev.name)}
    rng = random.Random(seed * 1000 + ordinal)
    deadline = time.monotonic() + 60 * minutes
    written = 0
    bar = _bar(minutes, progress, f"{kdef.name} on GPU {ordinal}")

    def unmeasured(params: Any, configs: list[Any]) -> list[Any]:
        return [
            c
            for c in configs
            if Sample(kdef.name, dev.name, dev.arch, to_dict(params), to_dict(c), 0.0).pair_key()
            not in done
        ]

    plans = _plans(kdef, dev, sample_params, rng, listed, max_configs, active)
    plan: tuple[Any, list[Any]] | None = None  # taken from `plans`, not yet measured
    compiling: Future[None] | None = None  # compile-ahead: compiling `plan`'s variants
    background = ThreadPoolExecutor(1, "spio-compile-ahead") if compile_ahead else None
    try:
        while time.monotonic() < deadline:
            plan = plan or next(plans, None)
            if plan is None:  # the listed shapes are done
                break
            (params, configs), plan = plan, None
            todo = unmeasured(params, configs)
            ahead, compiling = compiling, None
            if not todo:
                continue
            if ahead is not None:
                ahead.result()  # compiled while the last shape was timed (its errors raise here)
            else:
                _precompile(kdef, params, todo, dev)
            if background is not None:
                plan = next(plans, None)
                later = [] if plan is None else unmeasured(*plan)
                if plan is not None and later:
                    compiling = background.submit(
                        _precompile, kdef, plan[0], later, dev, _ahead_workers()
                    )
            rows: list[Sample] = []
            timed: list[Any] = []  # the config of each row
            after_pause: list[int] = []  # rows timed right after a pause
            left = 0  # how many of the next rows are still "right after a pause"
            pause = True  # a new shape: its compile above (or compiled ahead)
            for cfg in todo:
                t0 = time.perf_counter()
                try:
                    run = make_runner(params, cfg)
                except OutOfResources:
                    continue
                if pause or time.perf_counter() - t0 > PAUSE_S:
                    bench(run, warmup_ms=SHAPE_WARMUP_MS, reps=1)
                    pause, left = False, RECHECK_FIRST
                us = bench(run, warmup_ms=WARMUP_MS, reps=REPS).median_ms * 1e3
                if left:
                    after_pause.append(len(rows))
                    left -= 1
                rows.append(
                    Sample(kdef.name, dev.name, dev.arch, to_dict(params), to_dict(cfg), us)
                )
                timed.append(cfg)
                del run
                if time.monotonic() > deadline:
                    break
            retimed: set[int] = set()

            def remeasure(i: int, params=params, timed=timed, retimed=retimed) -> float:
                run = make_runner(params, timed[i])
                us = bench(run, warmup_ms=WARMUP_MS, reps=REPS).median_ms * 1e3
                retimed.add(i)
                return us

            latency = recheck_fastest(
                [r.latency_us for r in rows],
                remeasure,
                also=after_pause,
                tolerate=(OutOfResources, torch.cuda.OutOfMemoryError),
            )
            rows = [
                replace(r, latency_us=t, timings=2 if i in retimed else 1)
                for i, (r, t) in enumerate(zip(rows, latency, strict=True))
            ]
            written += append(out, rows)
            done.update(r.pair_key() for r in rows)
            if bar is not None:
                bar.n = min(60 * minutes, round(60 * minutes - (deadline - time.monotonic())))
                bar.set_postfix(samples=written)
                bar.refresh()
            torch.cuda.empty_cache()
    finally:
        if background is not None:
            background.shutdown(cancel_futures=True)  # waits for a compile already running
    if bar is not None:
        bar.close()
    if listed is not None and (left := (plan is not None) + sum(1 for _ in listed)):
        print(
            f"{kdef.name}: the time budget ran out with {left} listed shapes not reached (a "
            "rerun with more --minutes resumes: measured pairs are skipped)",
            file=sys.stderr,
        )
    return written


def _bar(minutes: float, progress: bool, desc: str):
    from spio.settings import settings

    if not (progress and settings().progress):
        return None
    from tqdm import tqdm

    return tqdm(total=round(60 * minutes), desc=desc, unit="s")


def collect_all_gpus(
    kdef_name: str,
    minutes: float,
    out: Path,
    seed: int,
    max_configs: int | None,
    active: bool = False,
    compile_ahead: bool = True,
) -> int:
    """One worker process per GPU, each appending to its own file `<out>.gpu<N>`."""
    import multiprocessing as mp

    import torch

    n = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    with ctx.Pool(n) as pool:
        counts = pool.starmap(
            _worker,
            [
                (
                    kdef_name,
                    minutes,
                    out.with_name(f"{out.name}.gpu{i}"),
                    i,
                    seed,
                    max_configs,
                    active,
                    compile_ahead,
                )  # fmt: skip
                for i in range(n)
            ],
        )
    return sum(counts)


def _worker(
    kdef_name: str,
    minutes: float,
    out: Path,
    ordinal: int,
    seed: int,
    max_configs: int | None,
    active: bool,
    compile_ahead: bool = True,
) -> int:
    from spio.kernels import KERNELS

    return collect(
        KERNELS[kdef_name],
        minutes,
        out,
        ordinal,
        seed,
        max_configs,
        progress=False,
        active=active,
        compile_ahead=compile_ahead,
    )
