"""spio.functional.conv2d_gw8 / spio.layers.Conv2dGw8 on a GPU: forward and autograd against an
fp64 reference of the same quantized tensors, opcheck on CUDA, torch.compile(fullgraph=True),
CUDA-graph capture, autocast, memory-format conversion, and the layer built from nn.Conv2d."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from spio.functional import conv2d_gw8
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.layers import Conv2dGw8
from spio.testing import assert_close, tolerance

pytestmark = pytest.mark.gpu

CL = torch.channels_last


def _inputs(seed, n=4, c=32, h=15, w=17, r=3, s=3, dtype=torch.float16, bias=True):
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, device="cuda").to(dtype).contiguous(memory_format=CL)
    wt = torch.randn(c, 8, r, s, generator=g, device="cuda").to(dtype)
    b = torch.randn(c, generator=g, device="cuda").to(dtype) if bias else None
    return x, wt, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("r, s, padding", [(3, 3, None), (5, 3, (0, 1)), (7, 7, 3), (1, 1, 0)])
def test_forward_and_backward(dtype, r, s, padding, seed):
    x, wt, b = _inputs(seed, r=r, s=s, dtype=dtype)
    pads = (
        (r // 2, s // 2)
        if padding is None
        else (padding, padding)
        if isinstance(padding, int)
        else padding
    )
    _check_against_fp64(x, wt, b, padding, pads, 1, seed)


def _check_against_fp64(x, wt, b, padding, pads, stride, seed):
    """conv2d_gw8(x, wt, b, padding, stride) forward and backward against F.conv2d in float64 on
    the same values: y, dx, dw, db within tolerances derived from each sum's depth. Returns the
    spio leaves, y and the dy it used."""
    dtype, (r, s) = x.dtype, wt.shape[2:]
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, wt, b))
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, wt, b))
    y = conv2d_gw8(xs, ws, bs, padding, stride)
    y_ref = F.conv2d(xr, wr, br, stride=stride, padding=pads, groups=x.shape[1] // 8)
    assert y.shape == y_ref.shape and y.is_contiguous(memory_format=CL) and y.dtype == dtype
    assert_close(y, y_ref, tolerance(dtype, depth=8 * r * s), f"forward seed={seed}")
    g = torch.Generator("cuda").manual_seed(seed + 1)
    dy = torch.randn(y.shape, generator=g, device="cuda").to(dtype).contiguous(memory_format=CL)
    y.backward(dy)
    y_ref.backward(dy.double())
    n, c, p, q = y.shape
    assert_close(xs.grad, xr.grad, tolerance(dtype, depth=8 * r * s), f"dx seed={seed}")
    assert_close(ws.grad, wr.grad, tolerance(dtype, depth=n * p * q), f"dw seed={seed}")
    assert_close(bs.grad, br.grad, tolerance(dtype, depth=n * p * q), f"db seed={seed}")
    return (xs, ws, bs), y, dy


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "hw, r, stride", [((15, 17), 3, 2), ((16, 16), 3, 2), ((13, 12), 5, (2, 1)), ((9, 9), 1, 2)]
)
def test_strided_forward_and_backward(dtype, hw, r, stride, seed):
    """Stride 2 through the op (eager path and dispatcher) against float64: y, dx, dw, db."""
    x, wt, b = _inputs(seed, h=hw[0], w=hw[1], r=r, s=r, dtype=dtype)
    (xs, ws, bs), y, dy = _check_against_fp64(x, wt, b, r // 2, r // 2, stride, seed)
    with _Through():  # the dispatcher's path (torch.compile's): the same bits
        leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
        y2 = conv2d_gw8(*leaves, r // 2, stride)
        y2.backward(dy)
    assert torch.equal(y2, y)
    for a, e in zip((t.grad for t in leaves), (xs.grad, ws.grad, bs.grad), strict=True):
        assert torch.equal(a, e)


def test_strided_layers_of_a_model_are_replaced_and_match(seed):
    """transform takes stride-2 group convs: a module with one matches its PyTorch twin."""
    import copy

    from spio.layers import transform

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4), nn.ReLU())
    model = model.cuda().half().to(memory_format=CL)
    twin = copy.deepcopy(model)
    report = transform(twin)
    assert [kind for _, kind in report.replaced] == ["Conv2dGw8"]
    x = torch.randn(4, 32, 15, 15, device="cuda").half().contiguous(memory_format=CL)
    assert_close(twin(x), model(x).double(), tolerance(torch.float16, depth=72), f"seed={seed}")


def test_wgrad_is_deterministic(seed):
    x, wt, b = _inputs(seed, n=16, c=64, h=28, w=28)
    dy = torch.randn(16, 64, 28, 28, device="cuda").half().contiguous(memory_format=CL)
    runs = [torch.ops.spio.conv2d_gw8_wgrad(x, dy, [3, 3], [1, 1], True) for _ in range(3)]
    for gw, gb in runs[1:]:
        assert torch.equal(gw, runs[0][0]) and torch.equal(gb, runs[0][1])


class _Through(torch.utils._python_dispatch.TorchDispatchMode):
    """A no-op dispatch mode: the ops go through the dispatcher (the path torch.compile takes)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _path_and_ops(x, wt, b, dy, stride=1, path="eager"):
    """(dx, dw, db) from the autograd of `path` (eager: the forward plan's backward; dispatcher:
    the registered one, conv2d_gw8_backward) and from the gradient ops called one by one."""
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, wt, b))
    if path == "eager":
        conv2d_gw8(xs, ws, bs, 1, stride).backward(dy)
    else:
        with _Through():
            y = conv2d_gw8(xs, ws, bs, 1, stride)
        y.backward(dy)
    dx = torch.ops.spio.conv2d_gw8_dgrad(dy, wt, list(x.shape[2:]), [1, 1], [stride, stride])
    dw, db = torch.ops.spio.conv2d_gw8_wgrad(x, dy, [3, 3], [1, 1], True, False, [stride] * 2)
    return (xs.grad, ws.grad, bs.grad), (dx, dw, db)


@pytest.mark.parametrize("hw, stride", [(14, 1), (28, 2), (28, 1), (56, 2), (130, 1)])
def test_backward_fuses_where_the_rule_says(hw, stride, seed):
    """C64 N32: where the rule takes the selected fused config (`wgrad.may_fuse`, `fuses`: at
    14 output rows always; at 28 with row chunks, or whole images where they fill the GPU),
    one kernel writes dx, dw and db, the same bits on the eager and the dispatcher path and
    from run to run, close to the gradient ops' (which sum in another order) and to fp64;
    where it does not (130 columns: no fused config), the backward gives the ops' bits."""
    import importlib

    from spio.select import op_config

    m = importlib.import_module("spio.functional.conv2d_gw8")
    x, wt, b = _inputs(seed, n=32, c=64, h=hw, w=hw)
    dy = torch.randn(32, 64, hw // stride, hw // stride, device="cuda").half()
    dy = dy.contiguous(memory_format=CL)
    eager, ops = _path_and_ops(x, wt, b, dy, stride, "eager")
    again, _ = _path_and_ops(x, wt, b, dy, stride, "eager")
    traced, _ = _path_and_ops(x, wt, b, dy, stride, "dispatcher")
    plans = [  # this layer's wgrad plans (the cache is the process's: other tests' are there)
        plan
        for plan in m._WGRAD.values()
        if (plan.p.n, plan.p.c, plan.p.h, plan.p.stride) == (32, 64, hw, (stride, stride))
    ]
    assert plans
    for plan in plans:  # what the rule says of the config selected for the layer
        fused = wg.may_fuse(plan.p, plan.dev)
        fused = fused and wg.fuses(plan.p, op_config(wg.WGRAD_DGRAD, plan.p, plan.dev), plan.dev)
        assert bool(plan._fused) == fused, plan
    fuses = bool(plans[0]._fused)
    if hw in (14, 130):
        assert fuses == (hw == 14), "at 14 output rows every fused config fuses; at 130, none"
    xd, wd, bd = (t.detach().double() for t in (x, wt, b))
    want = torch.autograd.grad(F.conv2d(xd.requires_grad_(), wd.requires_grad_(),
                                        bd.requires_grad_(), stride=stride, padding=1, groups=8),
                               (xd, wd, bd), dy.double())  # fmt: skip
    depth = {"dx": 8 * 9, "dw": 32 * (hw // stride) ** 2, "db": 32 * (hw // stride) ** 2}
    for e, a, t, o, r, name in zip(eager, again, traced, ops, want, depth, strict=True):
        assert torch.equal(e, a), f"{name}: differs from run to run, seed={seed}"
        assert torch.equal(e, t), f"{name}: eager and dispatcher differ, seed={seed}"
        assert_close(e, r, tolerance(torch.float16, depth=depth[name]), f"{name} seed={seed}")
        if not fuses:
            assert torch.equal(e, o), f"{name}: not the ops' bits, seed={seed}"


def test_cuda_graph_capture_of_the_eager_backward(seed):
    """The fused backward (C64 14x14 N16) captured: the replay gives the eager bits."""
    x, wt, b = _inputs(seed, n=16, c=64, h=14, w=14)
    dy = torch.randn(16, 64, 14, 14, device="cuda").half().contiguous(memory_format=CL)
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, wt, b))

    def step():
        for t in (xs, ws, bs):
            t.grad = None
        conv2d_gw8(xs, ws, bs).backward(dy)
        return xs.grad, ws.grad, bs.grad

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    with torch.no_grad():
        xs.copy_(torch.randn_like(xs))
    graph.replay()
    torch.cuda.synchronize()
    captured = [t.clone() for t in static]
    fresh = step()
    for a, e in zip(captured, fresh, strict=True):
        assert torch.equal(a, e)


@pytest.mark.parametrize("path", ["eager", "dispatcher"])
@pytest.mark.parametrize("r, s, wdtype", [(3, 3, None), (5, 3, None), (3, 3, torch.float32)])
def test_channels_last_weight_is_read_and_written_in_place(path, r, s, wdtype, seed):
    """A channels_last weight (what module.to(memory_format=channels_last) leaves) runs without a
    copy: the same bits as the contiguous weight for y, dx, dw and db, and dw comes back
    channels_last (so autograd accumulates it without a copy either); float32 under autocast."""
    import contextlib

    x, wt, b = _inputs(seed, r=r, s=s)
    if wdtype is not None:
        wt, b = wt.to(wdtype), b.to(wdtype)
    g = torch.Generator("cuda").manual_seed(seed + 1)
    dy = torch.randn(x.shape[0], 32, 15 + 2 * (r // 2) - r + 1, 17 + 2 * (s // 2) - s + 1,
                     generator=g, device="cuda").half().contiguous(memory_format=CL)  # fmt: skip
    results = []
    for w in (wt.contiguous(), wt.contiguous(memory_format=CL)):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        leaves[1] = w.detach().clone(memory_format=torch.preserve_format).requires_grad_()
        amp = torch.autocast("cuda", dtype=torch.float16) if wdtype else contextlib.nullcontext()
        mode = _Through() if path == "dispatcher" else contextlib.nullcontext()
        with mode:
            with amp:
                y = conv2d_gw8(*leaves)
            y.backward(dy)
        results.append((y, *(t.grad for t in leaves)))
    (y0, dx0, dw0, db0), (y1, dx1, dw1, db1) = results
    assert dw1.is_contiguous(memory_format=CL) and not dw1.is_contiguous()
    assert dw0.is_contiguous()
    for name, a, e in (("y", y1, y0), ("dx", dx1, dx0), ("dw", dw1, dw0), ("db", db1, db0)):
        assert torch.equal(a, e), f"{name} differs with a channels_last weight, seed={seed}"


def test_non_channels_last_input_is_converted(seed):
    x, wt, b = _inputs(seed)
    y = conv2d_gw8(x.contiguous(), wt, b)
    torch.testing.assert_close(y, conv2d_gw8(x, wt, b), rtol=0, atol=0)
    assert y.is_contiguous(memory_format=CL)


def test_opcheck_cuda(seed):
    x, wt, b = _inputs(seed, n=2, c=16, h=9, w=7)
    args = (x.requires_grad_(), wt.requires_grad_(), b.requires_grad_(), [1, 1])
    torch.library.opcheck(torch.ops.spio.conv2d_gw8.default, args)
    dy = torch.randn(2, 16, 9, 7, device="cuda").half().contiguous(memory_format=CL)
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8_dgrad.default, (dy, wt.detach(), [9, 7], [1, 1])
    )
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8_wgrad.default, (x.detach(), dy, [3, 3], [1, 1], True)
    )
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8_backward.default, (dy, x.detach(), wt.detach(), [1, 1], True)
    )


def test_reduce_overhead_backward_gives_the_eager_bits(seed):
    """torch.compile(mode="reduce-overhead"): the compiled backward calls conv2d_gw8_backward,
    whose fused kernel CUDA-graph trees record (C64 14x14 N16); the replays give the eager
    bits."""
    x, wt, b = _inputs(seed, n=16, c=64, h=14, w=14)
    dy = torch.randn(16, 64, 14, 14, device="cuda").half().contiguous(memory_format=CL)
    compiled = torch.compile(lambda x, w, b: conv2d_gw8(x, w, b), mode="reduce-overhead")
    leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
    conv2d_gw8(*leaves).backward(dy)
    want = [t.grad.clone() for t in leaves]
    for step in range(4):  # warm-up, recording, replays
        for t in leaves:
            t.grad = None
        compiled(*leaves).backward(dy)
        for t, w_ in zip(leaves, want, strict=True):
            assert torch.equal(t.grad, w_), f"step {step} seed={seed}"


def test_torch_compile_fullgraph(seed):
    x, wt, b = _inputs(seed)
    layer = Conv2dGw8(32, 3).cuda().half()

    def f(x):
        return torch.relu(layer(x)) + conv2d_gw8(x, wt, b)

    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x))


def test_cuda_graph_capture(seed):
    x, wt, b = _inputs(seed)
    dy = torch.randn(4, 32, 15, 17, device="cuda").half().contiguous(memory_format=CL)

    def step():
        y = conv2d_gw8(x, wt, b)
        dx = torch.ops.spio.conv2d_gw8_dgrad(dy, wt, [15, 17], [1, 1])
        dw, db = torch.ops.spio.conv2d_gw8_wgrad(x, dy, [3, 3], [1, 1], True)
        return y, dx, dw, db

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager = step()  # compiles and loads every kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    fresh = step()
    for a, e in zip(static, fresh, strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    assert not torch.equal(eager[0], fresh[0])  # the replay used the new input


def test_autocast_casts_float32(seed):
    x, wt, b = _inputs(seed, dtype=torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = conv2d_gw8(x, wt, b)
    assert y.dtype == torch.bfloat16
    want = F.conv2d(
        x.bfloat16().double(), wt.bfloat16().double(), b.bfloat16().double(), padding=1, groups=4
    )
    assert_close(y, want, tolerance(torch.bfloat16, depth=72), "autocast")


def test_float32_without_autocast_is_an_error():
    x, wt, b = _inputs(0, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"dtype must be one of .*float16.*autocast"):
        conv2d_gw8(x, wt, b)


def test_mismatched_devices():
    x, wt, b = _inputs(0)
    with pytest.raises(ValueError, match="is on cpu"):
        conv2d_gw8(x, wt.cpu(), b)


def test_layer_from_conv2d(seed):
    torch.manual_seed(seed)
    conv = nn.Conv2d(64, 64, (5, 3), padding=(2, 1), groups=8).cuda().half()
    layer = Conv2dGw8.from_conv2d(conv)
    x = torch.randn(8, 64, 20, 20, device="cuda").half().contiguous(memory_format=CL)
    want = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=(2, 1), groups=8)
    assert_close(layer(x), want, tolerance(torch.float16, depth=8 * 15), "from_conv2d")
