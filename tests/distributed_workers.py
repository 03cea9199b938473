"""Worker processes of the two-GPU tests (tests/gpu/test_distributed.py): importable by name, so
`torch.multiprocessing.spawn` can start them (pytest imports test files under generated names).

Each training worker joins an NCCL process group of `world` processes (one GPU each, rank = GPU
index), builds the same small model with spio layers, wraps it for data parallelism (DDP or
FSDP2's `fully_shard`), optionally under torch.compile and/or AMP, takes one SGD step on its
shard of a fixed global batch and saves the full gradients and updated weights (rank 0).
`one_process_step` does the same step in one process on the whole batch: the reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from spio.layers import Conv2dGw8, LayerNorm2d

BATCH = 8  # global batch; each of 2 ranks takes 4 images
CLASSES = 10
LR = 0.1


def build_model(seed: int) -> nn.Module:
    """A small channels_last net with two Conv2dGw8 (with and without bias) and two LayerNorm2d
    between PyTorch layers (no BatchNorm: per-sample layers only, so data parallelism is exact
    in theory)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        Conv2dGw8(32, 3, bias=True),
        LayerNorm2d(32),
        nn.GELU(),
        Conv2dGw8(32, 5, bias=False),
        LayerNorm2d(32),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, CLASSES),
    )


def global_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(BATCH, 3, 15, 17, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return x, y


def _step(model: nn.Module, x, y, variant: str, run=None) -> None:
    """One SGD step; variant "bf16" (bf16 model and input) or "amp" (fp32 model, fp16 autocast)."""
    run = model if run is None else run  # (a compiled module has no truth value)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    if variant == "amp":
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.cross_entropy(run(x), y)
    else:
        loss = F.cross_entropy(run(x.to(torch.bfloat16)).float(), y)
    loss.backward()
    opt.step()


def _prepared(
    model: nn.Module, variant: str, device: torch.device, cl_weights: bool = True
) -> nn.Module:
    """On `device`, bf16 for the "bf16" variant; conv weights channels_last unless `cl_weights` is
    False (FSDP2 refuses non-contiguous parameters: "FSDP does not support non-contiguous
    parameters yet", torch 2.11-2.14)."""
    model = model.to(device)
    if cl_weights:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload, unused-ignore]
    return model.to(torch.bfloat16) if variant == "bf16" else model


def one_process_step(seed: int, variant: str, device: torch.device) -> dict[str, torch.Tensor]:
    """Gradients and updated weights of one step on the whole batch in this process."""
    model = _prepared(build_model(seed), variant, device)
    x, y = global_batch(seed)
    x = x.to(device).contiguous(memory_format=torch.channels_last)
    _step(model, x, y.to(device), variant)
    return _results(model)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2's sharded parameters and gradients) gathered, as float32 on the CPU."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().float().cpu()


def _results(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient and updated value (plain SGD leaves .grad as it was)."""
    out = {}
    for name, p in model.named_parameters():
        out[f"weight/{name}"] = _full(p)
        out[f"grad/{name}"] = _full(p.grad)
    return out


def train_worker(
    rank: int, world: int, init_file: str, seed: int, strategy: str, variant: str, compile_: bool,
    out: str, device_type: str = "cuda",
) -> None:  # fmt: skip
    """One rank of a data-parallel step; rank 0 writes {weight/*, grad/*} to `out`.
    `device_type` "cpu" (gloo, spio's CPU fallback) only checks the harness without GPUs."""
    import torch.distributed as dist

    if device_type == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device(device_type)
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model = _prepared(build_model(seed), variant, device, cl_weights=strategy != "fsdp2")
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [rank] if device_type == "cuda" else None
            wrapped: nn.Module = DistributedDataParallel(model, device_ids=ids)
        elif strategy == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for m in model:
                if isinstance(m, (Conv2dGw8, LayerNorm2d)):
                    fully_shard(m)
            wrapped = fully_shard(model)
        else:
            raise ValueError(f"train_worker: unknown strategy {strategy!r}")
        x, y = global_batch(seed)
        per = BATCH // world
        x = (
            x[rank * per : (rank + 1) * per]
            .to(device)
            .contiguous(memory_format=torch.channels_last)
        )
        y = y[rank * per : (rank + 1) * per].to(device)
        run = torch.compile(wrapped) if compile_ else wrapped
        _step(model, x, y, variant, run)
        results = _results(model)  # full_tensor() is a collective: every rank calls it
        if rank == 0:
            torch.save(results, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def first_call_worker(rank: int, world: int, init_file: str, seed: int, out_dir: str) -> None:
    """Both ranks run the same new layers' fwd+bwd at once (a barrier lines the first calls up),
    each compiling and loading on its own GPU into the one SPIO_CACHE_DIR; each checks its
    results against PyTorch in float64 and writes `rank<r>.ok`."""
    import torch.distributed as dist

    from spio.functional import conv2d_gw8, layernorm_2d
    from spio.testing import assert_close, tolerance

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator(device).manual_seed(seed)
        x = torch.randn(3, 48, 11, 13, generator=g, device=device).half()
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        w = (torch.randn(48, 8, 3, 3, generator=g, device=device) * 0.2).half().requires_grad_()
        dy = torch.randn(3, 48, 11, 13, generator=g, device=device).half()
        dist.barrier()
        y = conv2d_gw8(x, w)
        y.backward(dy)
        xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        yr = F.conv2d(xr, wr, padding=1, groups=6)
        yr.backward(dy.double())
        assert_close(y, yr, tolerance(torch.float16, depth=72), f"rank {rank} y")
        assert_close(x.grad, xr.grad, tolerance(torch.float16, depth=72), f"rank {rank} dx")
        dw_tol = tolerance(torch.float16, depth=3 * 11 * 13)
        assert_close(w.grad, wr.grad, dw_tol, f"rank {rank} dw")
        z = layernorm_2d(y.detach(), eps=1e-5)  # the layernorm kernels too
        zr = F.layer_norm(y.detach().double().permute(0, 2, 3, 1), (48,), eps=1e-5)
        assert_close(
            z, zr.permute(0, 3, 1, 2), tolerance(torch.float16, depth=48), f"rank {rank} z"
        )
        dist.barrier()
        Path(out_dir, f"rank{rank}.ok").write_text(os.environ.get("SPIO_CACHE_DIR", ""))
    finally:
        dist.destroy_process_group()
