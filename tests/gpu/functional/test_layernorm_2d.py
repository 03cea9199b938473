"""torch.ops.spio.layernorm_2d on the GPU: the op and the layer against fp64 references, autograd,
opcheck, torch.compile(fullgraph=True), determinism, layouts, fallbacks and errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from spio.errors import FallbackDisabledError
from spio.functional import layernorm_2d
from spio.kernels import layernorm_2d as k
from spio.layers import LayerNorm2d
from spio.settings import override
from spio.testing import assert_close, tolerance

pytestmark = pytest.mark.gpu

# (N, C, H, W): N·H·W of 1, 7 and 1000+, docs/baseline.md's ConvNeXt stages scaled down, C up
# to 4096.
SHAPES = [
    (1, 8, 1, 1),
    (1, 96, 7, 1),
    (2, 64, 23, 23),
    (3, 768, 7, 7),
    (2, 4096, 3, 5),
    (4, 128, 28, 28),
]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _inputs(shape, dtype, seed, wdtype=None, requires_grad=False):
    g = torch.Generator("cuda").manual_seed(seed)
    c = shape[1]
    x = (3 + torch.randn(shape, generator=g, device="cuda", dtype=torch.float64)).to(dtype)
    x = x.to(memory_format=torch.channels_last)
    wdtype = wdtype or dtype
    w = torch.randn(c, generator=g, device="cuda").to(wdtype)
    b = torch.randn(c, generator=g, device="cuda").to(wdtype)
    dy = torch.randn(shape, generator=g, device="cuda").to(dtype)
    if requires_grad:
        for t in (x, w, b):
            t.requires_grad_(True)
    return x, w, b, dy


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_backward_vs_fp64(shape, dtype, seed):
    x, w, b, dy = _inputs(shape, dtype, seed, requires_grad=True)
    y = layernorm_2d(x, w, b)
    assert y.is_contiguous(memory_format=torch.channels_last) and y.dtype == dtype
    dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    ref_y, _, _ = k.reference(x.detach(), w.detach(), b.detach(), 1e-6)
    ref_dx, ref_dw, ref_db = k.reference_backward(x, dy, w, 1e-6)
    c, m = shape[1], shape[0] * shape[2] * shape[3]
    where = f"{shape} {dtype} seed={seed}"
    assert_close(y, ref_y, tolerance(dtype, c), f"{where} y")
    assert_close(dx, ref_dx, tolerance(dtype, c, c=8.0), f"{where} dx")
    assert_close(dw, ref_dw, tolerance(dtype, m), f"{where} dweight")
    assert_close(db, ref_db, tolerance(dtype, m), f"{where} dbias")


def test_matches_fallback_autograd(seed):
    """spio's kernels and the PyTorch fallback give the same values and gradients."""
    x, w, b, dy = _inputs((2, 192, 9, 9), torch.float32, seed, requires_grad=True)
    got = layernorm_2d(x, w, b)
    got_grads = torch.autograd.grad(got, (x, w, b), dy)
    xc, wc, bc = (t.detach().cpu().requires_grad_(True) for t in (x, w, b))
    want = layernorm_2d(xc, wc, bc)
    want_grads = torch.autograd.grad(want, (xc, wc, bc), dy.cpu())
    tol = tolerance(torch.float32, 192 * 81)
    assert_close(got, want, tol, "y")
    for name, a, e in zip(("dx", "dweight", "dbias"), got_grads, want_grads, strict=True):
        assert_close(a, e, tol, name)


def test_mixed_fp32_weight(seed):
    x, w, b, _ = _inputs((2, 96, 5, 5), torch.bfloat16, seed, wdtype=torch.float32)
    ref, _, _ = k.reference(x, w, b, 1e-6)
    assert_close(layernorm_2d(x, w, b), ref, tolerance(torch.bfloat16, 96), "bf16 x, fp32 w")


def test_non_channels_last_and_no_affine(seed):
    x, _, _, _ = _inputs((2, 64, 6, 5), torch.float16, seed)
    y = layernorm_2d(x.contiguous())
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, layernorm_2d(x))
    ref, _, _ = k.reference(x, None, None, 1e-6)
    assert_close(y, ref, tolerance(torch.float16, 64), "no affine")


def test_deterministic_grads(seed):
    x, w, b, dy = _inputs((8, 256, 14, 14), torch.float16, seed, requires_grad=True)
    first = torch.autograd.grad(layernorm_2d(x, w, b), (x, w, b), dy)
    second = torch.autograd.grad(layernorm_2d(x, w, b), (x, w, b), dy)
    for name, a, e in zip(("dx", "dweight", "dbias"), first, second, strict=True):
        assert torch.equal(a, e), f"{name} is not bitwise reproducible"


def test_opcheck_cuda(seed):
    x, w, b, dy = _inputs((2, 64, 5, 3), torch.float16, seed, requires_grad=True)
    torch.library.opcheck(torch.ops.spio.layernorm_2d.default, (x, w, b, 1e-6))
    xd, wd, bd = (t.detach() for t in (x, w, b))
    _, mean, rstd = torch.ops.spio.layernorm_2d(xd, wd, bd, 1e-6)
    torch.library.opcheck(
        torch.ops.spio.layernorm_2d_backward.default, (dy, xd, mean, rstd, wd, bd)
    )


def test_torch_compile_fullgraph(seed):
    x, w, b, dy = _inputs((2, 128, 8, 8), torch.bfloat16, seed, requires_grad=True)

    def f(x, w, b):
        return layernorm_2d(x, w, b).float().square().sum()

    compiled = torch.compile(f, fullgraph=True)
    got = compiled(x, w, b)
    got_grads = torch.autograd.grad(got, (x, w, b))
    want = f(x, w, b)
    want_grads = torch.autograd.grad(want, (x, w, b))
    # Inductor may sum the loss in another order than eager: compare with a tolerance.
    tol = tolerance(torch.bfloat16, 128 * 8 * 8 * 2)
    assert_close(got, want, tol, "compiled loss")
    for name, a, e in zip(("dx", "dweight", "dbias"), got_grads, want_grads, strict=True):
        assert_close(a, e, tol, f"compiled {name}")


def test_new_batch_size_does_not_compile(seed):
    """M is a runtime argument and configs are selected at M's power-of-two bucket: after one
    call in each of the buckets 128, 256 and 2048 rows (49 an image), other batch sizes in them
    run with compiles forbidden and load no kernel."""
    from spio.kernels.loader import default_function_cache

    _, w, b, _ = _inputs((2, 96, 7, 7), torch.float16, seed)
    for n in (2, 5, 33):
        layernorm_2d(_inputs((n, 96, 7, 7), torch.float16, seed)[0], w, b)
    loaded = len(default_function_cache())
    with override(assert_no_compile=True):
        for n in (4, 30, 24, 2):
            x2, _, _, _ = _inputs((n, 96, 7, 7), torch.float16, seed)
            layernorm_2d(x2, w, b)
    assert len(default_function_cache()) == loaded
    torch.cuda.synchronize()


def test_c_not_multiple_of_8_falls_back(seed):
    x, w, b, _ = _inputs((2, 12, 5, 5), torch.float32, seed)
    want = F.layer_norm(x.permute(0, 2, 3, 1), (12,), w, b, 1e-6).permute(0, 3, 1, 2)
    assert_close(layernorm_2d(x, w, b), want, tolerance(torch.float32, 12), "C=12 fallback")
    with override(disable_fallback=True), pytest.raises(FallbackDisabledError, match="C = 12"):
        layernorm_2d(x, w, b)


def test_device_mismatch():
    x = torch.randn(1, 8, 2, 2, device="cuda")
    with pytest.raises(ValueError, match="weight is on cpu"):
        layernorm_2d(x, torch.ones(8))


def test_layer_drop_in(seed):
    layer = LayerNorm2d(96).cuda().half()
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x, _, _, _ = _inputs((4, 96, 14, 14), torch.float16, seed)
    want = F.layer_norm(
        x.permute(0, 2, 3, 1).float(), (96,), layer.weight.float(), layer.bias.float(), 1e-6
    ).permute(0, 3, 1, 2)
    assert_close(layer(x), want, tolerance(torch.float16, 96), "LayerNorm2d")


def test_cuda_graph_capture(seed):
    x, w, b, _ = _inputs((4, 64, 14, 14), torch.float16, seed)
    want = layernorm_2d(x, w, b)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layernorm_2d(x, w, b)  # warm on the side stream
        with torch.cuda.graph(graph, stream=stream):
            out = layernorm_2d(x, w, b)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)
