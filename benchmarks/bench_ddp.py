"""Data-parallel scaling of a timm model's training step, with and without spio, on 1 and 2 GPUs.

    python benchmarks/bench_ddp.py [--model regnetx_002] [--batch 256] [--steps 20] [--rounds 5]
                                   [--csv F]

For each side (PyTorch's model, and its copy after `spio.layers.transform`) and world size (1: the
model alone on GPU 0; 2: DistributedDataParallel, one process per GPU, NCCL, launched with
torch.multiprocessing.spawn): AMP fp16 with a GradScaler, SGD, channels_last, `--batch` random
224x224 images per GPU; 10 warm-up steps, then `--rounds` rounds of `--steps` steps, each timed
between two barriers. Reported: images/s over all GPUs (median round, lowest..highest), and
scaling = 2-GPU / 1-GPU throughput (target >= 1.8). NVLink
multicast stays off (NCCL_NVLS_ENABLE=0). Needs timm and two GPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

WARMUP = 10


def worker(rank: int, world: int, init: str, side: str, args: argparse.Namespace, out: str) -> None:
    import torch.distributed as dist

    from spio.bench.model_pair import timm_model
    from spio.bench.train_step import batch, train_step
    from spio.layers import transform

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    if world > 1:
        dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = timm_model(args.model)().to(device).to(memory_format=torch.channels_last)
    if side == "spio":
        transform(model)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[rank])
    x, y = batch(args.batch, 1000, device)
    step = train_step(model, x, y, dtype="fp16", mode="eager")
    for _ in range(WARMUP):
        step()
    rates = []
    for _ in range(args.rounds):
        torch.cuda.synchronize()
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        if world > 1:
            dist.barrier()
        rates.append(world * args.batch * args.steps / (time.perf_counter() - t0))
    if rank == 0:
        Path(out).write_text(f"{statistics.median(rates)} {min(rates)} {max(rates)}")
    if world > 1:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="regnetx_002")
    ap.add_argument("--batch", type=int, default=256, help="images per GPU")
    ap.add_argument("--steps", type=int, default=20, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    if torch.cuda.device_count() < 2:
        print("bench_ddp: needs two CUDA GPUs", file=sys.stderr)
        return 2
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("torch", "spio"):
            speed = {}
            for world in (1, 2):
                out = str(Path(tmp) / f"{side}{world}")
                init = str(Path(tmp) / f"init-{side}{world}")
                torch.multiprocessing.spawn(
                    worker, args=(world, init, side, args, out), nprocs=world, join=True
                )
                speed[world] = [float(v) for v in Path(out).read_text().split()]
            one, two = speed[1][0], speed[2][0]
            rows.append((side, one, two, two / one))
            print(
                f"{args.model} batch {args.batch}/GPU {side:>5}: 1 GPU {one:8.0f} img/s "
                f"({speed[1][1]:.0f}..{speed[1][2]:.0f}), 2 GPUs (DDP) {two:8.0f} img/s "
                f"({speed[2][1]:.0f}..{speed[2][2]:.0f}), scaling {two / one:.3f}",
                flush=True,
            )
    if args.csv:
        lines = ["model,batch,side,img_s_1gpu,img_s_2gpu,scaling"]
        lines += [f"{args.model},{args.batch},{s},{a:.1f},{b:.1f},{r:.4f}" for s, a, b, r in rows]
        args.csv.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
