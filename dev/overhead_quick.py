"""Quick GPU check (dev, untracked): host us per op call, spio vs torch, and no-compile on a new batch."""
import os, statistics, sys, time
import torch
import torch.nn.functional as F
import spio.functional as sf
from spio.settings import override

torch.backends.cudnn.benchmark = True
dev = "cuda"
CL = torch.channels_last


def host_us(fn, n=300, reps=7):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        samples.append((t1 - t) / n * 1e6)
    return statistics.median(samples), min(samples)


def graph_us(fn, reps=200):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay(); torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(reps):
        g.replay()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps * 1e3


rows = []
def row(name, fn_spio, fn_torch, graph=True):
    s = host_us(fn_spio); t = host_us(fn_torch)
    gs = graph_us(fn_spio) if graph else float("nan")
    gt = graph_us(fn_torch) if graph else float("nan")
    rows.append((name, s, t, gs, gt))
    print(f"{name:44s} spio {s[0]:6.1f} ({s[1]:5.1f})  torch {t[0]:6.1f} ({t[1]:5.1f})  graph spio {gs:7.1f} torch {gt:7.1f}", flush=True)


def conv_case(n, c, hw, grad, bwd, amp=False):
    dt = torch.float32 if amp else torch.float16
    x = torch.randn(n, c, hw, hw, device=dev, dtype=torch.float16).to(memory_format=CL)
    w = torch.randn(c, 8, 3, 3, device=dev, dtype=dt) * 0.1
    b = torch.randn(c, device=dev, dtype=dt)
    if grad:
        x.requires_grad_(); w.requires_grad_(); b.requires_grad_()
    gy = torch.randn(n, c, hw, hw, device=dev, dtype=torch.float16).to(memory_format=CL)
    def mk(f):
        def call():
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                y = f(x, w, b)
            if bwd:
                y.backward(gy)
                x.grad = w.grad = b.grad = None
        return call
    return mk(lambda x, w, b: sf.conv2d_gw8(x, w, b)), mk(lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=c // 8))


def ln_case(n, c, hw, grad, bwd):
    x = torch.randn(n, c, hw, hw, device=dev, dtype=torch.float16).to(memory_format=CL)
    w = torch.randn(c, device=dev, dtype=torch.float16)
    b = torch.randn(c, device=dev, dtype=torch.float16)
    if grad:
        x.requires_grad_(); w.requires_grad_(); b.requires_grad_()
    gy = torch.randn_like(x)
    def timm(x, w, b):
        return F.layer_norm(x.permute(0, 2, 3, 1), (c,), w, b, 1e-6).permute(0, 3, 1, 2)
    def mk(f):
        def call():
            y = f(x, w, b)
            if bwd:
                y.backward(gy)
                x.grad = w.grad = b.grad = None
        return call
    return mk(lambda x, w, b: sf.layernorm_2d(x, w, b, 1e-6)), mk(timm)


print(torch.cuda.get_device_name(), torch.__version__, flush=True)
row("conv fwd N128 C512 7x7", *conv_case(128, 512, 7, False, False))
row("conv fwd N128 C512 7x7 (requires grad)", *conv_case(128, 512, 7, True, False), graph=False)
row("conv fwd N128 C64 56x56", *conv_case(128, 64, 56, False, False))
row("conv fwd+bwd N32 C128 28x28", *conv_case(32, 128, 28, True, True), graph=False)
row("conv fwd+bwd N32 C128 28x28 AMP fp32 w", *conv_case(32, 128, 28, True, True, amp=True), graph=False)
row("ln fwd N128 C512 7x7", *ln_case(128, 512, 7, False, False))
row("ln fwd N128 C512 7x7 (requires grad)", *ln_case(128, 512, 7, True, False), graph=False)
row("ln fwd+bwd N32 C128 28x28", *ln_case(32, 128, 28, True, True), graph=False)
a = torch.randn(16, 4096, device=dev, dtype=torch.float16)
bt = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
row("matmul 16x4096x4096 (b_transposed)", lambda: sf.matmul(a, bt, b_transposed=True), lambda: F.linear(a, bt))
ar = a.clone().requires_grad_(); btr = bt.clone().requires_grad_(); g16 = torch.randn(16, 4096, device=dev, dtype=torch.float16)
def mm_bwd(f):
    def call():
        y = f(); y.backward(g16); ar.grad = btr.grad = None
    return call
row("matmul fwd+bwd 16x4096x4096", mm_bwd(lambda: sf.matmul(ar, btr, b_transposed=True)), mm_bwd(lambda: F.linear(ar, btr)), graph=False)

# ---- a new batch size compiles nothing ----
def fwd_bwd_conv(n):
    x = torch.randn(n, 64, 14, 14, device=dev, dtype=torch.float16).to(memory_format=CL).requires_grad_()
    w = (torch.randn(64, 8, 3, 3, device=dev, dtype=torch.float16) * 0.1).requires_grad_()
    b = torch.randn(64, device=dev, dtype=torch.float16).requires_grad_()
    sf.conv2d_gw8(x, w, b).sum().backward()
def fwd_bwd_ln(n):
    x = torch.randn(n, 96, 14, 14, device=dev, dtype=torch.float16).to(memory_format=CL).requires_grad_()
    w = torch.randn(96, device=dev, dtype=torch.float16).requires_grad_()
    sf.layernorm_2d(x, w, w.detach().clone().requires_grad_()).sum().backward()
def mm(n):
    sf.matmul(torch.randn(n, 512, device=dev, dtype=torch.float16), torch.randn(512, 512, device=dev, dtype=torch.float16))
for name, f in (("conv fwd+bwd", fwd_bwd_conv), ("layernorm fwd+bwd", fwd_bwd_ln), ("matmul", mm)):
    f(32); torch.cuda.synchronize()
    with override(assert_no_compile=True):
        for n in (48, 7, 1, 200):
            try:
                f(n); torch.cuda.synchronize()
                print(f"no-compile {name} N={n}: ok")
            except Exception as e:
                print(f"no-compile {name} N={n}: {type(e).__name__}: {str(e)[:200]}")
