"""Dev (untracked): host µs of each piece of an op call on a GPU, and the autograd floors."""
import cProfile, io, pstats, statistics, time
import torch
import torch.nn.functional as F
import spio.functional as sf
from spio.functional import _dispatch
import importlib
cm = importlib.import_module("spio.functional.conv2d_gw8")
lm = importlib.import_module("spio.functional.layernorm_2d")

CL = torch.channels_last


def host_us(fn, n=200, reps=9):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    s = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        s.append((time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(s)


def t(name, fn):
    print(f"{name:58s} {host_us(fn):7.2f} us", flush=True)


n, c, hw = 32, 128, 28
x = torch.randn(n, c, hw, hw, device="cuda").half().contiguous(memory_format=CL)
w = (torch.randn(c, 8, 3, 3, device="cuda") * 0.1).half()
b = torch.randn(c, device="cuda").half()
dy = torch.randn_like(x)
y = sf.conv2d_gw8(x, w, b)
plan = next(v for v in cm._FORWARD.values() if v is not cm._plans.DISPATCH)
size, stride = plan.size, plan.stride
raw = _dispatch.raw_stream
stream = raw(0)
key = cm._key(x, w, b, None, None)
print(torch.cuda.get_device_name(), torch.__version__)
t("x.add_(1) on 16 floats (PyTorch's tiny op)", (lambda z: lambda: z.add_(1))(torch.zeros(16, device="cuda")))
t("torch.empty_strided 4D fp16 CL", lambda: torch.empty_strided(size, stride, dtype=torch.float16, device=x.device))
t("torch.empty 1D", lambda: torch.empty(1024, dtype=torch.float32, device=x.device))
t("raw_stream(0)", lambda: raw(0))
t("untraced()", _dispatch.untraced)
t("autocast_dtype()", _dispatch.autocast_dtype)
t("conv _key()", lambda: cm._key(x, w, b, None, None))
t("conv _key() + dict get", lambda: cm._FORWARD.get(cm._key(x, w, b, None, None)))
t("FpropLaunch call (out reused)", lambda: plan.launch(y, x, w, b, stream))
t("bound Launch call (out reused)", lambda: plan.launch._launch((y, x, w, b, n), stream))
t("plan.forward", lambda: plan.forward(x, w, b))
t("conv2d_gw8 (no grad)", lambda: sf.conv2d_gw8(x, w, b))
t("F.conv2d (no grad)", lambda: F.conv2d(x, w, b, padding=1, groups=c // 8))


class Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b_):
        return torch.empty_strided(size, stride, dtype=torch.float16, device=a.device)

    @staticmethod
    def backward(ctx, g):
        return g, None


class IdentSave(Ident):
    @staticmethod
    def forward(ctx, a, b_):
        ctx.save_for_backward(a, b_)
        ctx.plan = plan
        return torch.empty_strided(size, stride, dtype=torch.float16, device=a.device)


xr = x.clone().requires_grad_()
wr = w.clone().requires_grad_()
br = b.clone().requires_grad_()
t("Function.apply, 1 alloc (x requires grad)", lambda: Ident.apply(xr, wr))
t("Function.apply, 1 alloc + save_for_backward(2)", lambda: IdentSave.apply(xr, wr))
t("conv2d_gw8 (requires grad)", lambda: sf.conv2d_gw8(xr, wr, br))
t("F.conv2d (requires grad)", lambda: F.conv2d(xr, wr, br, padding=1, groups=c // 8))


def fb(f, leaves):
    def call():
        f().backward(dy)
        for l in leaves:
            l.grad = None
    return call


t("Ident fwd+bwd (engine floor, 1 leaf)", fb(lambda: Ident.apply(xr, wr), [xr]))
t("x*2 fwd+bwd torch (1 leaf)", fb(lambda: xr * 2, [xr]))
t("conv2d_gw8 fwd+bwd", fb(lambda: sf.conv2d_gw8(xr, wr, br), [xr, wr, br]))
t("F.conv2d fwd+bwd", fb(lambda: F.conv2d(xr, wr, br, padding=1, groups=c // 8), [xr, wr, br]))
t("conv plan.backward (dx, dw, db) alone", lambda: plan.backward(dy, x, w, True, True, True))
t("conv plan.backward (dx) alone", lambda: plan.backward(dy, x, w, True, False, False))
t("torch.autograd.grad conv2d_gw8 (x only)", lambda: torch.autograd.grad(sf.conv2d_gw8(xr, w, b), xr, dy))

# layernorm
lw = torch.randn(c, device="cuda").half().requires_grad_()
lb = torch.randn(c, device="cuda").half().requires_grad_()
t("layernorm_2d (no grad)", lambda: sf.layernorm_2d(x, lw.detach(), lb.detach()))
t("layernorm_2d (requires grad)", lambda: sf.layernorm_2d(xr, lw, lb))
t("timm LN (requires grad)", lambda: F.layer_norm(xr.permute(0, 2, 3, 1), (c,), lw, lb, 1e-6).permute(0, 3, 1, 2))
t("layernorm_2d fwd+bwd", fb(lambda: sf.layernorm_2d(xr, lw, lb), [xr, lw, lb]))
t("timm LN fwd+bwd", fb(lambda: F.layer_norm(xr.permute(0, 2, 3, 1), (c,), lw, lb, 1e-6).permute(0, 3, 1, 2), [xr, lw, lb]))
lplan = next(v for v in lm._FORWARD.values() if v is not lm._plans.DISPATCH)
yy, st = lplan.forward_saving(x, lw.detach(), lb.detach())
m0 = st.data_ptr()
t("ln plan.forward_saving", lambda: lplan.forward_saving(x, lw.detach(), lb.detach()))
t("ln plan.backward alone", lambda: lplan.backward(dy, x, m0, m0 + 4 * lplan.m, lw.detach()))

for name, fn in (("layernorm_2d requires grad", lambda: sf.layernorm_2d(xr, lw, lb)),
                 ("conv2d_gw8 fwd+bwd", fb(lambda: sf.conv2d_gw8(xr, wr, br), [xr, wr, br]))):
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"==== cProfile {name} (2000 calls)")
    print("\n".join(s.getvalue().splitlines()[:34]))
