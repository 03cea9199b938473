"""compile_many(): many compiles in a process pool, cache hits answered without spawning.

The parent prepares every job (validation, @spio expansion, cache key), answers the hits from the
disk cache, de-duplicates the misses by key, and sends only the prepared misses (plain strings)
to `spawn` workers: fork is unsafe after CUDA or torch threads exist, and the workers need
nothing but NVRTC. Results are stored in the cache by the parent. A CompileError pickles, so it
crosses back from the worker intact.

As with any spawn pool, a script that calls compile_many at top level needs the usual
`if __name__ == "__main__":` guard (a spawned worker imports the main module).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from spio.compiler.cache import DiskCache, default_cache
from spio.compiler.compile import _UNSET, Prepared, build, forbid_compile, lookup, prepare, store
from spio.errors import CompileError
from spio.logs import logger
from spio.settings import settings

PROGRESS_MIN_JOBS = 4  # fewer compiles than this finish too fast for a progress bar to help


@dataclass(frozen=True, slots=True)
class CompileJob:
    """The arguments of one `compile(...)` call."""

    source: str
    arch: str = "sm_90"
    options: tuple[str, ...] = ()
    headers: Mapping[str, str] | None = None
    name: str = "kernel.cu"
    ptx: bool = False
    scope: Mapping[str, Any] | None = field(default=None, compare=False)


def compile_many(
    jobs: Sequence[CompileJob],
    workers: int | None = None,
    progress: bool | None = None,
    *,
    cache: DiskCache | None = _UNSET,
    nice: int = 0,
) -> list[bytes]:
    """Compiles every job (in parallel processes when there are several misses).

    Args:
        jobs: what to compile; results come back in the same order.
        workers: processes to use; default `settings().workers` (SPIO_WORKERS).
        progress: show a progress bar; default: when more than PROGRESS_MIN_JOBS compiles are
            needed and SPIO_PROGRESS is on.
        cache: as in `compile`; default `default_cache()`.
        nice: added to the worker processes' niceness (`os.nice`), so that compiles running
            beside latency-sensitive work (`spio tune collect --compile-ahead` timing kernels)
            yield the CPU to it; 0 leaves them as they are. Only workers are niced: with one
            worker (or one miss) the compile runs in the calling thread, as it is.

    Raises:
        CompileError: of the first failing job (in job order), after every other job finished
            and was cached; the other failures are logged.
    """
    for i, job in enumerate(jobs):
        if not isinstance(job, CompileJob):
            raise TypeError(
                f"compile_many: jobs[{i}] must be a CompileJob, got {type(job).__name__}"
            )
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"compile_many: workers must be a positive int or None, got {workers!r}")
    if not isinstance(nice, int) or nice < 0:
        raise ValueError(f"compile_many: nice must be a non-negative int, got {nice!r}")
    disk = default_cache() if cache is _UNSET else cache
    prepared = [
        prepare(
            j.source,
            j.arch,
            options=j.options,
            headers=j.headers,
            name=j.name,
            ptx=j.ptx,
            scope=j.scope,
        )
        for j in jobs
    ]
    results: list[bytes | None] = [None] * len(prepared)
    misses: dict[str, list[int]] = {}
    for i, p in enumerate(prepared):
        hit = lookup(p, disk) if disk is not None else None
        if hit is not None:
            results[i] = hit
        else:
            misses.setdefault(p.key, []).append(i)
    if not misses:
        return _filled(results)
    todo = [prepared[idx[0]] for idx in misses.values()]
    forbid_compile(todo[0])

    s = settings()
    n_workers = min(workers or s.workers, len(todo))
    show = progress if progress is not None else (s.progress and len(todo) > PROGRESS_MIN_JOBS)
    errors: dict[str, BaseException] = {}
    for p, outcome in _run(todo, n_workers, show, nice):
        if isinstance(outcome, BaseException):
            errors[p.key] = outcome
            continue
        if disk is not None:
            disk.record_compile()
            store(p, outcome, disk)
        for i in misses[p.key]:
            results[i] = outcome
    if errors:
        failed = [i for i, p in enumerate(prepared) if p.key in errors]
        for i in failed[1:]:
            logger("spio.compiler").error(
                "compile_many: job %d (%s) failed too: %s",
                i,
                prepared[i].name,
                errors[prepared[i].key],
            )
        first = errors[prepared[failed[0]].key]
        if len(failed) > 1 and isinstance(first, CompileError):
            logger("spio.compiler").error(
                "compile_many: %d of %d jobs failed; raising the first", len(failed), len(jobs)
            )
        raise first
    return _filled(results)


def _filled(results: list[bytes | None]) -> list[bytes]:
    """The images once every job has one (a None left would be a bug of compile_many)."""
    images = [r for r in results if r is not None]
    if len(images) != len(results):
        raise RuntimeError(f"compile_many: {len(results) - len(images)} jobs got no image")
    return images


def _run(
    todo: list[Prepared], n_workers: int, show: bool, nice: int = 0
) -> Iterator[tuple[Prepared, bytes | BaseException]]:
    """Yields (prepared, image or exception) as compiles finish."""
    bar = _progress_bar(len(todo)) if show else None
    try:
        if n_workers <= 1:
            for p in todo:
                yield p, _try_build(p)
                if bar is not None:
                    bar.update(1)
            return
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=n_workers, mp_context=ctx, initializer=_niced, initargs=(nice,)
        ) as pool:
            futures: dict[Future, Prepared] = {pool.submit(build, p): p for p in todo}
            for fut in as_completed(futures):
                exc = fut.exception()
                yield futures[fut], exc if exc is not None else fut.result()
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _niced(increment: int) -> None:
    """A worker's first act: its niceness raised by `increment` (0: left as it is)."""
    os.nice(increment)


def _try_build(p: Prepared) -> bytes | BaseException:
    try:
        return build(p)
    except Exception as e:  # reported by compile_many after the other jobs finish
        return e


def _progress_bar(total: int) -> Any:  # a tqdm bar
    from tqdm import tqdm

    return tqdm(total=total, desc="spio: compiling kernels", unit="kernel", leave=False)
