"""Dev (untracked): cProfile of compiled regnetx_002 spio steps: where the op path's host time goes."""
import cProfile, importlib, io, pstats, time
import torch
from spio.bench.model_pair import build_pair, timm_model
from spio.bench.train_step import batch, train_step
cm = importlib.import_module("spio.functional.conv2d_gw8")
builds = {"fwd": 0}
orig = cm._forward_plan
def counting(*a, **k):
    builds["fwd"] += 1
    return orig(*a, **k)
cm._forward_plan = counting
dev = torch.device("cuda")
pair = build_pair("regnetx_002", timm_model("regnetx_002"), dev)
x, y = batch(256, 1000, dev)
step = train_step(pair.spio, x, y, dtype="fp16", mode="compile")
for _ in range(8):
    step()
torch.cuda.synchronize()
b0 = builds["fwd"]
print("plans:", len(cm._FORWARD), len(cm._DGRAD), len(cm._WGRAD), "fwd builds during warm-up", b0)
pr = cProfile.Profile(); pr.enable()
for _ in range(10):
    step()
torch.cuda.synchronize()
pr.disable()
print("fwd plan builds during 10 timed steps:", builds["fwd"] - b0)
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print("\n".join(s.getvalue().splitlines()[:45]))
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumtime").print_stats("spio", 20)
print("\n".join(s.getvalue().splitlines()[:40]))
