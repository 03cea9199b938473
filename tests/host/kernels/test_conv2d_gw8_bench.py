"""The conv2d_gw8 benchmark's host-side parts: the grid, the summary of the targets, no-GPU exit."""

from __future__ import annotations

import pytest
import torch

from spio.bench import conv2d_gw8 as bench


def test_grid_is_baselines():
    full = bench.grid(quick=False)
    assert len(full) == 4 * 3 * 5
    assert (64, 56, 3, 1) in full and (512, 7, 7, 256) in full
    assert set(bench.grid(quick=True)) <= set(full)


def _row(which, k, n, vs_cudnn, vs_elem):
    return {
        "pass": which,
        "shape": f"k{k} N{n}",
        "k": k,
        "N": n,
        "spio_vs_cudnn": vs_cudnn,
        "spio_vs_elementwise": vs_elem,
    }


def test_summary_reports_geomean_and_slow_points():
    rows = [
        _row("fprop", 3, 32, 4.0, 0.9),
        _row("fprop", 3, 8, 1.0, 0.5),
        _row("fprop", 5, 1, 0.5, 0.1),
        _row("wgrad", 7, 128, 0.8, 0.2),
    ]
    lines = bench.summarize(rows)
    assert (
        "fprop: geomean speedup over cuDNN (N>=8) 2.00x; slower than cuDNN at 0 points" in lines[0]
    )
    assert "3x3 N>=32 worst spio/elementwise 90%" in lines[1]
    assert "slower than cuDNN at 1 points ['k7 N128']" in lines[2]


def test_main_without_gpu_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message; this machine has a CUDA GPU")
    assert bench.main(["--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_compile_jobs_cover_each_selected_variant_once():
    """The bench compiles every kernel it will launch up front: one job per distinct (family,
    layer variant, config), wgrad's reduction included; nothing for passes not asked for; and
    the compile-cache keys of the jobs are exactly those of what the timed launches load."""
    from spio.compiler.compile import prepare
    from spio.cuda import known_device
    from spio.kernels.loader import compile_job

    def key(job):
        return prepare(
            job.source, job.arch, options=job.options, headers=job.headers, name=job.name,
            ptx=job.ptx, scope=job.scope,
        ).key  # fmt: skip

    dev = known_device("H100")
    points = bench.grid(quick=True)
    jobs = bench.compile_jobs(points, ("fprop",), torch.float16, dev)
    assert 1 <= len(jobs) <= len(points)
    assert all(j.arch == dev.arch for j in jobs)
    both = bench.compile_jobs(points, ("fprop", "wgrad"), torch.float16, dev)
    assert len(jobs) < len(both) <= 3 * len(points)  # wgrad adds its kernel and its reduction
    sources = {j.name for j in both}
    assert sources == {"conv2d_gw8_fprop.cu", "conv2d_gw8_wgrad.cu", "conv2d_gw8_wgrad_reduce.cu"}
    every = bench.compile_jobs(points, bench.PASSES, torch.float16, dev)
    launched = {
        key(compile_job(kdef.spec(v, cfg, dev), dev.arch))
        for c, hw, k, n in points
        for which in bench.PASSES
        for kdef, v, cfg in bench.variants(bench.params(c, hw, k, n, torch.float16), which, dev)
    }
    assert {key(j) for j in every} == launched
    assert len(every) == len(launched), "the same kernel is compiled twice"
    # dgrad is its own variant of the fprop source (transposed weight), not a duplicate of fprop.
    fprop_keys = {key(j) for j in bench.compile_jobs(points, ("fprop",), torch.float16, dev)}
    dgrad_keys = {key(j) for j in bench.compile_jobs(points, ("dgrad",), torch.float16, dev)}
    assert fprop_keys.isdisjoint(dgrad_keys)
