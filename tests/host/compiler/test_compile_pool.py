"""compile_many(): parallel compiles, hits without a pool, one failing job, de-duplication."""

from __future__ import annotations

import pytest

from spio.compiler import CompileJob, compile, compile_many
from spio.errors import CompileError, CompileForbiddenError
from spio.settings import override


def test_parallel_compiles_match_serial_ones(tiny, disk):
    jobs = [CompileJob(tiny(i), "sm_80") for i in range(4)]
    images = compile_many(jobs, workers=2, progress=False, cache=disk)
    assert len(images) == 4 and len(set(images)) == 4
    assert disk.stats().compiles == 4
    for job, image in zip(jobs, images, strict=True):
        assert compile(job.source, job.arch, cache=None) == image


def test_hits_are_answered_without_compiling(tiny, disk):
    jobs = [CompileJob(tiny(i), "sm_80") for i in range(3)]
    first = compile_many(jobs, workers=2, progress=False, cache=disk)
    with override(assert_no_compile=True):
        assert compile_many(jobs, workers=2, progress=False, cache=disk) == first
    assert disk.stats().compiles == 3 and disk.stats().hits == 3


def test_duplicate_jobs_compile_once(tiny, disk):
    jobs = [CompileJob(tiny("dup"), "sm_80")] * 3 + [CompileJob(tiny("dup"), "sm_90")]
    images = compile_many(jobs, workers=2, progress=False, cache=disk)
    assert images[0] == images[1] == images[2] != images[3]
    assert disk.stats().compiles == 2


def test_one_failing_job_raises_its_error_after_the_others_are_cached(tiny, broken, disk):
    jobs = [
        CompileJob(tiny(1), "sm_80"),
        CompileJob(broken, "sm_80", name="broken.cu"),
        CompileJob(tiny(2), "sm_80"),
    ]
    with pytest.raises(CompileError) as info:
        compile_many(jobs, workers=2, progress=False, cache=disk)
    err = info.value
    assert err.name == "broken.cu" and err.error_lines() == [4]  # crossed the process boundary
    assert disk.stats().compiles == 2
    with override(assert_no_compile=True):
        compile_many([jobs[0], jobs[2]], workers=2, progress=False, cache=disk)


def test_serial_path_and_no_cache(tiny, broken):
    images = compile_many([CompileJob(tiny(5), "sm_80")] * 2, workers=1, cache=None)
    assert images[0] == images[1]
    with pytest.raises(CompileError):
        compile_many([CompileJob(broken, "sm_80")], workers=1, cache=None)


def test_assert_no_compile_before_any_work(tiny, disk):
    with override(assert_no_compile=True), pytest.raises(CompileForbiddenError):
        compile_many([CompileJob(tiny(9), "sm_80")], workers=2, cache=disk)


def test_progress_bar(tiny, disk, capsys):
    jobs = [CompileJob(tiny(("bar", i)), "sm_80") for i in range(6)]
    compile_many(jobs, workers=1, progress=True, cache=disk)
    assert "spio: compiling kernels" in capsys.readouterr().err


def test_bad_jobs_and_workers(tiny):
    with pytest.raises(TypeError, match=r"jobs\[0\] must be a CompileJob"):
        compile_many([tiny()])
    with pytest.raises(ValueError, match="workers must be a positive int"):
        compile_many([CompileJob(tiny())], workers=0)
    with pytest.raises(ValueError, match="arch="):
        compile_many([CompileJob(tiny(), "sm_1")])  # validated in the parent, before any pool


def test_nice_workers(tiny, disk, monkeypatch):
    """nice=N: the pool's workers start by raising their niceness by N (compiles beside timing
    yield the CPU); the images are the same; nice=0 leaves the pool as it was."""
    import spio.compiler.pool as pool

    made = []

    class Recording(pool.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pool, "ProcessPoolExecutor", Recording)
    jobs = [CompileJob(tiny(("nice", i)), "sm_80") for i in range(2)]
    images = compile_many(jobs, workers=2, progress=False, cache=None, nice=3)
    assert made[-1]["initializer"] is pool._niced and made[-1]["initargs"] == (3,)
    assert images == compile_many(jobs, workers=2, progress=False, cache=None)
    assert made[-1]["initargs"] == (0,)
    with pytest.raises(ValueError, match="nice must be a non-negative int"):
        compile_many(jobs, nice=-1)
