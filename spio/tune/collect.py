"""`spio tune collect`: measure (params, config) samples of a kernel family on a GPU.

Params come from the family's `sample_params` (realistic layer shapes plus random ones); every
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
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
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


def _precompile(kdef: KernelDef, params: Any, configs: list[Any], dev: Any) -> None:
    from spio.kernels.loader import compile_specs

    compile_specs([kdef.spec(params, c, dev) for c in configs], dev.arch)


def collect(
    kdef: KernelDef,
    minutes: float,
    out: Path,
    ordinal: int = 0,
    seed: int = 0,
    max_configs: int | None = None,
    progress: bool = True,
) -> int:
    """Measures samples for about `minutes`; returns how many new rows were written."""
    import torch

    from spio.cuda import device_attributes
    from spio.errors import OutOfResources
    from spio.timing import bench

    sample_params, make_runner = kdef.sample_params, kdef.make_runner
    if sample_params is None or make_runner is None:
        raise ValueError(f"{kdef.name}: the family defines no sample_params/make_runner to collect")
    torch.cuda.set_device(ordinal)
    dev = device_attributes(ordinal)
    done = {s.pair_key() for s in read(out, kdef.name, dev.name)}
    rng = random.Random(seed * 1000 + ordinal)
    deadline = time.monotonic() + 60 * minutes
    written = 0
    bar = _bar(minutes, progress, f"{kdef.name} on GPU {ordinal}")
    while time.monotonic() < deadline:
        params = sample_params(rng)
        configs = kdef.configs(params, dev)
        if max_configs is not None and len(configs) > max_configs:
            configs = rng.sample(configs, max_configs)
        todo = [
            c
            for c in configs
            if Sample(kdef.name, dev.name, dev.arch, to_dict(params), to_dict(c), 0.0).pair_key()
            not in done
        ]
        if not todo:
            continue
        _precompile(kdef, params, todo, dev)
        rows: list[Sample] = []
        timed: list[Any] = []  # the config of each row
        after_pause: list[int] = []  # rows timed right after a pause
        left = 0  # how many of the next rows are still "right after a pause"
        pause = True  # the compile above
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
            rows.append(Sample(kdef.name, dev.name, dev.arch, to_dict(params), to_dict(cfg), us))
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
    if bar is not None:
        bar.close()
    return written


def _bar(minutes: float, progress: bool, desc: str):
    from spio.settings import settings

    if not (progress and settings().progress):
        return None
    from tqdm import tqdm

    return tqdm(total=round(60 * minutes), desc=desc, unit="s")


def collect_all_gpus(
    kdef_name: str, minutes: float, out: Path, seed: int, max_configs: int | None
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
                (kdef_name, minutes, out.with_name(f"{out.name}.gpu{i}"), i, seed, max_configs)
                for i in range(n)
            ],
        )
    return sum(counts)


def _worker(
    kdef_name: str, minutes: float, out: Path, ordinal: int, seed: int, max_configs: int | None
) -> int:
    from spio.kernels import KERNELS

    return collect(KERNELS[kdef_name], minutes, out, ordinal, seed, max_configs, progress=False)
