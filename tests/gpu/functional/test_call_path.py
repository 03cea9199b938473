"""The ops' call path on a GPU: launch plans per call signature, the eager path and the dispatcher
path agreeing bit for bit, autocast with float32 parameters, a new batch size that compiles
nothing, and plans per device (a tensor on cuda:1 runs on GPU 1 whatever device is current)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from spio.functional import clear_plans, conv2d_gw8, layernorm_2d, matmul
from spio.settings import override
from spio.testing import assert_close, tolerance

pytestmark = pytest.mark.gpu

CL = torch.channels_last


class _Through(TorchDispatchMode):
    """A no-op dispatch mode: while it is active the ops go through the dispatcher."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _conv_inputs(seed, n=4, c=32, h=15, w=17, dtype=torch.float16, device="cuda"):
    g = torch.Generator(device).manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, device=device).to(dtype).contiguous(memory_format=CL)
    wt = (torch.randn(c, 8, 3, 3, generator=g, device=device) * 0.2).to(dtype)
    b = torch.randn(c, generator=g, device=device).to(dtype)
    dy = torch.randn(n, c, h, w, generator=g, device=device).to(torch.float16 if dtype ==
        torch.float32 else dtype).contiguous(memory_format=CL)  # fmt: skip
    return x, wt, b, dy


def _grads(fn, tensors, dy):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(dy)
    return y.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_eager_and_dispatcher_paths_agree_bitwise(dtype, seed):
    x, wt, b, dy = _conv_inputs(seed, dtype=dtype)
    eager = _grads(lambda x, w, b: conv2d_gw8(x, w, b), (x, wt, b), dy)
    with _Through():
        through = _grads(lambda x, w, b: conv2d_gw8(x, w, b), (x, wt, b), dy)
    assert torch.equal(eager[0], through[0])
    for a, e in zip(eager[1], through[1], strict=True):
        assert torch.equal(a, e)
    with torch.no_grad():
        assert torch.equal(conv2d_gw8(x, wt, b), eager[0])  # the inference path


def test_layernorm_eager_and_dispatcher_paths_agree_bitwise(seed):
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(3, 96, 9, 11, generator=g, device="cuda").half().contiguous(memory_format=CL)
    w = torch.randn(96, generator=g, device="cuda").half()
    b = torch.randn(96, generator=g, device="cuda").half()
    dy = torch.randn(x.shape, generator=g, device="cuda").half().contiguous(memory_format=CL)
    eager = _grads(lambda x, w, b: layernorm_2d(x, w, b), (x, w, b), dy)
    with _Through():
        through = _grads(lambda x, w, b: layernorm_2d(x, w, b), (x, w, b), dy)
    assert torch.equal(eager[0], through[0])
    for a, e in zip(eager[1], through[1], strict=True):
        assert torch.equal(a, e)
    with torch.no_grad():  # the inference path writes no statistics; y is the same
        assert torch.equal(layernorm_2d(x, w, b), eager[0])


def test_matmul_eager_and_dispatcher_paths_agree_bitwise(seed):
    g = torch.Generator("cuda").manual_seed(seed)
    a = torch.randn(40, 64, generator=g, device="cuda").half()
    bt = torch.randn(24, 64, generator=g, device="cuda").half()
    dy = torch.randn(40, 24, generator=g, device="cuda").half()
    eager = _grads(lambda a, b: matmul(a, b, b_transposed=True), (a, bt), dy)
    with _Through():
        through = _grads(lambda a, b: matmul(a, b, b_transposed=True), (a, bt), dy)
    assert torch.equal(eager[0], through[0])
    for got, want in zip(eager[1], through[1], strict=True):
        assert torch.equal(got, want)


def test_dispatcher_path_builds_each_plan_once(seed, monkeypatch):
    """The ops as torch.compile calls them (through the dispatcher, padding as a list): the second
    fwd+bwd with one signature builds no plan (a key mismatch between the lookup and the store
    once rebuilt the conv forward plan, with its selection, on every compiled call)."""
    import importlib

    # the modules (spio.functional's attributes of these names are the functions)
    conv_mod, ln_mod, mm_mod = (
        importlib.import_module(f"spio.functional.{name}")
        for name in ("conv2d_gw8", "layernorm_2d", "matmul")
    )

    clear_plans()
    built: list[str] = []

    def counting(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            built.append(f"{module.__name__}.{name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for module, names in (
        (conv_mod, ("_forward_plan", "_dgrad_plan", "_wgrad_plan")),
        (ln_mod, ("_Plan",)),
        (mm_mod, ("_Plan",)),
    ):
        for name in names:
            counting(module, name)
    x, wt, b, dy = _conv_inputs(seed)
    a = torch.randn(40, 64, device="cuda").half()
    bt = torch.randn(24, 64, device="cuda").half()
    calls = (
        (lambda x, w, b: conv2d_gw8(x, w, b), (x, wt, b), dy),
        (lambda x, w, b: layernorm_2d(x, w, b), (x, wt[:, 0, 0, 0].contiguous(), b), dy),
        (lambda a, b: matmul(a, b, b_transposed=True), (a, bt), torch.randn(40, 24,
            device="cuda").half()),
    )  # fmt: skip
    with _Through():
        for fn, tensors, grad in calls:
            _grads(fn, tensors, grad)
        first = list(built)
        for fn, tensors, grad in calls:
            _grads(fn, tensors, grad)
    torch.cuda.synchronize()
    assert first, "no plan was built: the spies are not on the op path"
    assert built == first, f"plans rebuilt on the second call: {built[len(first) :]}"


@pytest.mark.parametrize("amp", [torch.float16, torch.bfloat16])
def test_conv_autocast_reads_float32_parameters(amp, seed):
    """Under autocast float32 weight and bias go to the kernels as they are (no cast per call):
    the result is what autocast's cast gives, and the parameter gradients are float32."""
    x, wt, b, dy = _conv_inputs(seed, dtype=torch.float32)
    dy = dy.to(amp)
    leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
    with torch.autocast("cuda", dtype=amp):
        y = conv2d_gw8(*leaves)
    assert y.dtype == amp
    y.backward(dy)
    xs, ws, bs = leaves
    assert xs.grad.dtype == ws.grad.dtype == bs.grad.dtype == torch.float32
    refs = [t.detach().to(amp).double().requires_grad_() for t in (x, wt, b)]
    y_ref = F.conv2d(*refs, padding=1, groups=x.shape[1] // 8)
    y_ref.backward(dy.double())
    n, c, p, q = y.shape
    assert_close(y, y_ref, tolerance(amp, depth=72), f"y seed={seed}")
    assert_close(xs.grad, refs[0].grad, tolerance(amp, depth=72), f"dx seed={seed}")
    # The weight gradient is the fp32 sum, not rounded to amp: fp32 tolerance of that depth.
    dw_tol = tolerance(torch.float32, depth=n * p * q)
    assert_close(ws.grad, refs[1].grad, dw_tol, f"dw seed={seed}")
    assert_close(bs.grad, refs[2].grad, dw_tol, f"db seed={seed}")


def test_a_new_batch_size_compiles_nothing(seed):
    """After one batch size, others (larger, smaller, 1) run fwd+bwd with compiles forbidden and
    no kernel loaded (a warm disk cache would hide a compile; a new load shows a new variant),
    after one batch of each selection bucket that the later batches fall in (the conv's batch
    and the layernorm's rows rounded up to a power of two, at most 256 images and 2**17 rows)."""
    from spio.kernels.loader import default_function_cache

    clear_plans()

    def conv(n):
        x, wt, b, dy = _conv_inputs(seed, n=n, c=64, h=14, w=14)
        _grads(lambda x, w, b: conv2d_gw8(x, w, b), (x, wt, b), dy)

    def norm(n):
        x = torch.randn(n, 96, 14, 14, device="cuda").half().contiguous(memory_format=CL)
        w = torch.randn(96, device="cuda").half()
        _grads(lambda x, w, b: layernorm_2d(x, w, b), (x, w, w.clone()), torch.randn_like(x))

    for run, first, later in (
        (conv, (256, 64, 8, 1), (48, 7, 1, 200, 5, 33)),
        (norm, (64, 8, 1, 256), (48, 7, 1, 200)),  # 196 rows an image
    ):
        for n in first:
            run(n)
        loaded = len(default_function_cache())
        with override(assert_no_compile=True):
            for n in later:
                run(n)
        assert len(default_function_cache()) == loaded, f"{run.__name__}: a batch loaded a variant"
    torch.cuda.synchronize()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_plans_are_per_device(seed):
    """The same signature on cuda:0 and cuda:1, each called while the other device is current:
    each runs on its own GPU and matches the other."""
    results = []
    for index, current in ((0, 1), (1, 0)):
        x, wt, b, dy = _conv_inputs(seed, device=f"cuda:{index}")
        with torch.cuda.device(current):
            y, grads = _grads(lambda x, w, b: conv2d_gw8(x, w, b), (x, wt, b), dy)
            assert torch.cuda.current_device() == current
        assert y.device.index == index and all(g.device.index == index for g in grads)
        results.append((y.cpu(), [g.cpu() for g in grads]))
    (y0, g0), (y1, g1) = results
    assert torch.equal(y0, y1) and all(torch.equal(a, e) for a, e in zip(g0, g1, strict=True))
