"""`spio tune collect`: measure (params, config) samples of a kernel family on a GPU.

Params come from the family's `sample_params` (realistic layer shapes plus random ones); every
valid config of a shape is compiled in parallel (through the disk cache), then timed with CUDA
events, L2 flushed, median. Before a shape's first timing the GPU runs its first config for
SHAPE_WARMUP_MS (clocks drop while the host compiles; without it the first configs of a shape
read slow, with a shrinking excess); after all of them, the RECHECK fastest are timed again and
keep the lower median (interference only ever adds time), which steadies the fast end the models
rank. Rows are appended per shape, so an interrupted run loses at most one shape and a rerun
skips what is already measured. `--device all` runs one worker process per GPU.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from spio.kernels.kernel_def import KernelDef
from spio.tune.dataset import Sample, append, read
from spio.tune.features import to_dict

REPS = 15
WARMUP_MS = 5.0
SHAPE_WARMUP_MS = 50.0
RECHECK = 5


def recheck_fastest(
    latency_us: list[float], remeasure: Callable[[int], float], count: int = RECHECK
) -> list[float]:
    """latency_us with the `count` fastest entries replaced by min(first, remeasure(i)): a second
    timing of the configs the models must rank right, keeping the lower (interference can only
    make a timing too slow)."""
    out = list(latency_us)
    for i in sorted(range(len(out)), key=out.__getitem__)[:count]:
        out[i] = min(out[i], remeasure(i))
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

    if kdef.sample_params is None or kdef.make_runner is None:
        raise ValueError(f"{kdef.name}: the family defines no sample_params/make_runner to collect")
    torch.cuda.set_device(ordinal)
    dev = device_attributes(ordinal)
    done = {s.pair_key() for s in read(out, kdef.name, dev.name)}
    rng = random.Random(seed * 1000 + ordinal)
    deadline = time.monotonic() + 60 * minutes
    written = 0
    bar = _bar(minutes, progress, f"{kdef.name} on GPU {ordinal}")
    while time.monotonic() < deadline:
        params = kdef.sample_params(rng)
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
        rows = []
        timed = []  # the config of each row
        warm = False
        for cfg in todo:
            try:
                run = kdef.make_runner(params, cfg)
            except OutOfResources:
                continue
            if not warm:  # clocks back up after the compile pause
                bench(run, warmup_ms=SHAPE_WARMUP_MS, reps=1)
                warm = True
            us = bench(run, warmup_ms=WARMUP_MS, reps=REPS).median_ms * 1e3
            rows.append(Sample(kdef.name, dev.name, dev.arch, to_dict(params), to_dict(cfg), us))
            timed.append(cfg)
            del run
            if time.monotonic() > deadline:
                break

        def remeasure(i: int, params=params, timed=timed) -> float:
            run = kdef.make_runner(params, timed[i])
            return bench(run, warmup_ms=WARMUP_MS, reps=REPS).median_ms * 1e3

        latency = recheck_fastest([r.latency_us for r in rows], remeasure)
        rows = [replace(r, latency_us=t) for r, t in zip(rows, latency, strict=True)]
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
