"""spio layers under data parallelism on two GPUs, launched the way users launch: one process per
GPU (torch.multiprocessing.spawn, NCCL). Skipped with a reason on fewer than two GPUs.

- DDP and FSDP2 (`fully_shard`) steps of a model with Conv2dGw8 and LayerNorm2d layers give the
  gradients and updated weights of one process on the whole batch, in bf16 and under AMP, eager
  and under torch.compile (tests/distributed_workers.py has the workers and the model);
- two processes compiling and loading the same new kernels at once into one disk cache leave a
  cache that a third process loads with compiles forbidden;
- two threads of one process run the ops on two GPUs at once, each with the other GPU current,
  and get the bits of a one-thread run.

NVLink multicast (NVLS) stays off (NCCL_NVLS_ENABLE=0): it can take a machine's GPUs out of
service for others. `scripts/gpu-session.sh multi` runs this file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import distributed_workers as dw
import pytest
import torch

from spio.testing import UNIT_ROUNDOFF, tolerance

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"),
]

WORLD = 2


@pytest.fixture(autouse=True)
def _nccl_env(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # inherited by the spawned workers


def _spawn(fn, *args) -> None:
    torch.multiprocessing.spawn(fn, args=(WORLD, *args), nprocs=WORLD, join=True)


def _tolerance(variant: str, depth: int) -> float:
    """Gradients of a batch split in two and averaged across ranks against one process's: the
    same terms summed in another order (and, for bf16, rounded per rank and by the reduction),
    plus PyTorch's own layers picking other algorithms at batch 4 than at 8."""
    dtype = torch.bfloat16 if variant == "bf16" else torch.float16
    return tolerance(dtype, depth=depth) + 4 * UNIT_ROUNDOFF[dtype]


@pytest.mark.parametrize(
    "strategy, variant, compile_",
    [
        ("ddp", "bf16", False),
        ("ddp", "amp", False),
        ("ddp", "amp", True),
        ("fsdp2", "bf16", False),
        ("fsdp2", "amp", False),
        ("fsdp2", "amp", True),
    ],
)
def test_data_parallel_step_matches_one_process(strategy, variant, compile_, seed, tmp_path):
    out = tmp_path / "rank0.pt"
    _spawn(dw.train_worker, str(tmp_path / "init"), seed, strategy, variant, compile_, str(out))
    got = torch.load(out)
    want = dw.one_process_step(seed, variant, torch.device("cuda", 0))
    assert got.keys() == want.keys()
    depth = dw.BATCH * 15 * 17  # the longest sum: a weight gradient over every pixel
    for name in want:
        where = f"{strategy} {variant} compile={compile_} {name} seed={seed}"
        scale = want[name].abs().max().item()
        if name.startswith("weight/"):  # w - lr * g: the gradient's error, scaled by lr
            err = (got[name] - want[name]).abs().max().item()
            g_scale = want["grad/" + name[7:]].abs().max().item()
            bound = (
                dw.LR * g_scale * _tolerance(variant, depth)
                + UNIT_ROUNDOFF[torch.bfloat16 if variant == "bf16" else torch.float32] * 2 * scale
            )
            assert err <= bound, f"{where}: max error {err:.3e} > {bound:.3e}"
        else:
            err = (got[name] - want[name]).abs().max().item() / max(scale, 1e-30)
            assert err <= _tolerance(variant, depth), f"{where}: relative error {err:.3e}"


def test_two_processes_share_one_disk_cache(seed, tmp_path, monkeypatch):
    """A fresh cache written by two processes at once (same kernels, one GPU each) is whole: no
    temporary files left, and a new process runs the same layers with compiles forbidden."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPIO_CACHE_DIR", str(cache))
    _spawn(dw.first_call_worker, str(tmp_path / "init"), seed, str(tmp_path))
    assert all((tmp_path / f"rank{r}.ok").read_text() == str(cache) for r in range(WORLD))
    leftovers = [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, f"temporary files left in the cache: {leftovers}"
    again = (
        "import torch; from spio.functional import conv2d_gw8, layernorm_2d\n"
        "x = torch.randn(3, 48, 11, 13, device='cuda').half()"
        ".contiguous(memory_format=torch.channels_last).requires_grad_()\n"
        "w = torch.randn(48, 8, 3, 3, device='cuda').half().requires_grad_()\n"
        "y = conv2d_gw8(x, w); y.backward(torch.randn_like(y))\n"
        "layernorm_2d(y.detach(), eps=1e-5); torch.cuda.synchronize()\n"
    )
    env = {**os.environ, "SPIO_ASSERT_NO_COMPILE": "1", "CUDA_VISIBLE_DEVICES": "1"}
    proc = subprocess.run([sys.executable, "-c", again], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"a third process compiled or failed:\n{proc.stderr[-3000:]}"


def test_two_threads_on_two_gpus(seed):
    """Each thread runs conv2d_gw8 fwd+bwd, layernorm_2d and matmul on its own GPU while the
    other GPU is its current device, 30 times, concurrently: every result equals a one-thread
    run's bits."""
    from spio.functional import conv2d_gw8, layernorm_2d, matmul

    def inputs(index):
        g = torch.Generator(f"cuda:{index}").manual_seed(seed)
        dev = f"cuda:{index}"
        x = torch.randn(8, 64, 14, 14, generator=g, device=dev).half()
        x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(64, 8, 3, 3, generator=g, device=dev).half()
        a = torch.randn(96, 64, generator=g, device=dev).half()
        return x, w, a

    def run(x, w, a):
        xs, ws = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = conv2d_gw8(xs, ws)
        y.backward(y.detach())
        z = layernorm_2d(y.detach(), eps=1e-6)
        c = matmul(a, a.t().contiguous())
        return [t.detach().clone() for t in (y, xs.grad, ws.grad, z, c)]

    data = [inputs(i) for i in range(WORLD)]
    expected = []
    for i in range(WORLD):
        with torch.cuda.device(i):
            expected.append(run(*data[i]))
    for i in range(WORLD):
        torch.cuda.synchronize(i)
    errors: list[str] = []

    def worker(i):
        try:
            with torch.cuda.device(1 - i):  # the other GPU is current: the ops follow the tensors
                for k in range(30):
                    got = run(*data[i])
                    torch.cuda.synchronize(i)
                    for name, a, e in zip(
                        ("y", "dx", "dw", "z", "c"), got, expected[i], strict=True
                    ):
                        if a.device.index != i or not torch.equal(a, e):
                            errors.append(f"thread {i} iteration {k}: {name} differs")
        except Exception as e:  # reported below: a thread's exception would be lost
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, "\n".join(errors[:10])
