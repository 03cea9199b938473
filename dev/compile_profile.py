"""Dev (untracked): where a compiled regnetx_002 step spends GPU and host time, torch vs spio."""
import time
from collections import Counter
import torch
from torch.profiler import ProfilerActivity, profile
from spio.bench.model_pair import build_pair, timm_model
from spio.bench.train_step import batch, train_step

dev = torch.device("cuda")
pair = build_pair("regnetx_002", timm_model("regnetx_002"), dev)
x, y = batch(256, 1000, dev)
for side, model in (("torch", pair.torch), ("spio", pair.spio)):
    torch._dynamo.reset()
    step = train_step(model, x, y, dtype="fp16", mode="compile")
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        step()
    host = (time.perf_counter() - t) / 10 * 1e3
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / 10 * 1e3
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    kern = Counter(); count = Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kern[e.name[:90]] += e.device_time / 3
            count[e.name[:90]] += 1 / 3
    total = sum(kern.values())
    print(f"== {side}: host {host:.2f} ms/step enqueue, wall {wall:.2f} ms/step, GPU {total/1e3:.2f} ms/step, {sum(count.values()):.0f} kernels/step")
    for name, us in kern.most_common(14):
        print(f"   {us:8.1f} us  x{count[name]:4.0f}  {name}")
    cpu = Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CPU and "spio" in e.name:
            cpu[e.name[:70]] += e.cpu_time / 3
    for name, us in cpu.most_common(8):
        print(f"   cpu {us:8.1f} us  {name}")
