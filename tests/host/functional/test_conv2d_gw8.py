"""spio.functional.conv2d_gw8 and spio.layers.Conv2dGw8 on the CPU: the documented PyTorch
fallback vs F.conv2d, argument errors, opcheck, autograd, torch.compile, and from_conv2d."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from spio.errors import FallbackDisabledError
from spio.functional import conv2d_gw8
from spio.layers import Conv2dGw8
from spio.settings import override
from spio.testing import assert_close, tolerance

CL = torch.channels_last


def _inputs(seed, n=2, c=16, h=9, w=7, r=3, s=3, dtype=torch.float32, bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    wt = torch.randn(c, 8, r, s, generator=g).to(dtype)
    b = torch.randn(c, generator=g).to(dtype) if bias else None
    return x, wt, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape, padding",
    [
        ((2, 16, 9, 7, 3, 3), None),
        ((1, 8, 5, 11, 1, 7), (0, 3)),
        ((3, 24, 6, 6, 5, 2), 0),
        ((1, 32, 4, 4, 7, 7), 3),
    ],
)
def test_fallback_matches_conv2d(shape, padding, dtype, seed):
    n, c, h, w, r, s = shape
    x, wt, b = _inputs(seed, n, c, h, w, r, s, dtype)
    pads = (r // 2, s // 2) if padding is None else padding
    y = conv2d_gw8(x, wt, b, padding)
    want = F.conv2d(x.double(), wt.double(), b.double(), padding=pads, groups=c // 8)
    assert y.shape == want.shape
    assert y.is_contiguous(memory_format=CL)
    # One rounding to dtype plus a reduction of 8·R·S products (fp32 accumulation on the CPU).
    tol = tolerance(dtype, depth=8 * r * s)
    assert_close(y, want, tol, where=f"{shape} pad={padding} {dtype} seed={seed}")


@pytest.mark.parametrize("stride", [2, (2, 1), (1, 2)])
@pytest.mark.parametrize("hw", [(9, 7), (8, 10)])
def test_strided_op_autograd_and_layer_match_conv2d(stride, hw, seed):
    """Stride 2 on the CPU path (the op, its gradient ops and the layer) against F.conv2d in
    float64, odd and even sizes; the fake implementations agree (opcheck)."""
    h, w = hw
    x, wt, b = _inputs(seed, n=2, c=16, h=h, w=w, r=3, s=3, dtype=torch.float64)
    args = [t.float().requires_grad_() for t in (x, wt, b)]
    ref_args = [t.clone().requires_grad_() for t in (x, wt, b)]
    y = conv2d_gw8(*args, padding=1, stride=stride)
    want = F.conv2d(*ref_args, stride=stride, padding=1, groups=2)
    assert y.shape == want.shape
    g = torch.randn(want.shape, dtype=torch.float64)
    y.backward(g.float())
    want.backward(g)
    tol = tolerance(torch.float32, depth=2 * h * w)  # the longest sum: a weight gradient
    got = [y, *(t.grad for t in args)]
    for name, a, r in zip(("y", "dx", "dw", "db"), got, [want, *(t.grad for t in ref_args)],
                          strict=True):  # fmt: skip
        assert_close(a, r, tol, where=f"{name} stride={stride} {hw} seed={seed}")
    pair = (stride, stride) if isinstance(stride, int) else stride
    xs = x.float().to(memory_format=CL).requires_grad_()
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8.default, (xs, wt.float(), b.float(), [1, 1], list(pair))
    )
    conv = nn.Conv2d(16, 16, 3, stride=stride, padding=1, groups=2)
    layer = Conv2dGw8.from_conv2d(conv)
    assert layer.stride == pair and "stride" in repr(layer)
    torch.testing.assert_close(layer(x.float()), conv(x.float()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "stride, error, message",
    [(3, ValueError, "stride must be 1 or 2"), ((1, 2, 1), TypeError, "pair of ints"),
     ("2", TypeError, "pair of ints"), ((0, 1), ValueError, "1 or 2")],
)  # fmt: skip
def test_stride_errors(stride, error, message):
    x, wt, b = _inputs(0)
    with pytest.raises(error, match=message):
        conv2d_gw8(x, wt, b, stride=stride)
    with pytest.raises(error, match=message):
        Conv2dGw8(16, 3, stride=stride)


def test_fallback_disabled_raises():
    x, wt, b = _inputs(0)
    with override(disable_fallback=True), pytest.raises(FallbackDisabledError):
        conv2d_gw8(x, wt, b)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda x, w, b: (x.int(), w, b), TypeError, "input dtype"),
        (lambda x, w, b: (x, w.double(), b), TypeError, "weight must have input's dtype"),
        (lambda x, w, b: (x, w[:, :4], b), ValueError, "input channels per group"),
        (lambda x, w, b: (x, torch.randn(16, 8, 9, 9), b), ValueError, "exceeds 7x7"),
        (lambda x, w, b: (x[:, :12], w[:12], b[:12]), ValueError, "multiple of 8"),
        (lambda x, w, b: (x, w, b[:8]), ValueError, "bias must have shape"),
        (lambda x, w, b: (x, w, b.double()), TypeError, "bias must have input's dtype"),
        (lambda x, w, b: (x[0], w, b), ValueError, "4-D"),
        (lambda x, w, b: (x, w.to("meta"), b), ValueError, "is on meta"),
    ],
)
def test_argument_errors(change, error, message):
    x, wt, b = _inputs(0)
    with pytest.raises(error, match=message):
        conv2d_gw8(*change(x, wt, b))


def test_padding_errors():
    x, wt, b = _inputs(0, h=3, w=3, r=5, s=5)
    with pytest.raises(ValueError, match="increase the padding"):
        conv2d_gw8(x, wt, b, padding=0)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        conv2d_gw8(x, wt, b, padding=(-1, 2))
    with pytest.raises(TypeError, match="padding"):
        conv2d_gw8(x, wt, b, padding="same")


def test_opcheck(seed):
    x, wt, b = _inputs(seed)
    x = x.to(memory_format=CL).requires_grad_()
    wt.requires_grad_()
    b.requires_grad_()
    torch.library.opcheck(torch.ops.spio.conv2d_gw8.default, (x, wt, b, [1, 1]))
    torch.library.opcheck(torch.ops.spio.conv2d_gw8.default, (x, wt, None, [0, 2]))
    dy = torch.randn(2, 16, 9, 7).to(memory_format=CL)
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8_dgrad.default, (dy, wt.detach(), [9, 7], [1, 1])
    )
    for with_bias in (True, False):
        torch.library.opcheck(
            torch.ops.spio.conv2d_gw8_wgrad.default,
            (x.detach(), dy, [3, 3], [1, 1], with_bias),
        )
        torch.library.opcheck(
            torch.ops.spio.conv2d_gw8_backward.default,
            (dy, x.detach(), wt.detach(), [1, 1], with_bias),
        )


@pytest.mark.parametrize("stride", [1, 2])
def test_backward_op_is_the_two_gradient_ops(stride, seed):
    x, wt, b = _inputs(seed, n=2, c=16, h=9, w=7)
    x = x.to(memory_format=CL)
    dy = torch.randn(conv2d_gw8(x, wt, b, 1, stride).shape).to(memory_format=CL)
    dx, gw, gb = torch.ops.spio.conv2d_gw8_backward(dy, x, wt, [1, 1], True, False, [stride] * 2)
    assert torch.equal(dx, torch.ops.spio.conv2d_gw8_dgrad(dy, wt, [9, 7], [1, 1], [stride] * 2))
    want_w, want_b = torch.ops.spio.conv2d_gw8_wgrad(
        x, dy, [3, 3], [1, 1], True, False, [stride] * 2
    )
    assert torch.equal(gw, want_w) and torch.equal(gb, want_b)
    *_, gb = torch.ops.spio.conv2d_gw8_backward(dy, x, wt, [1, 1], False, False, [stride] * 2)
    assert gb.shape == (0,)


class _OpLog(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the spio ops called under it (the dispatcher path, as torch.compile takes)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "spio":
            self.ops.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "grads, ops",
    [("xwb", ["conv2d_gw8_backward"]), ("xw", ["conv2d_gw8_backward"]),
     ("xb", ["conv2d_gw8_backward"]), ("x", ["conv2d_gw8_dgrad"]),
     ("wb", ["conv2d_gw8_wgrad"]), ("b", ["conv2d_gw8_wgrad"])],
)  # fmt: skip
def test_registered_backward_runs_both_gradients_in_one_op(grads, ops, seed):
    """The autograd the dispatcher path registers: the combined op where the input gradient
    and a weight or bias gradient are both needed (on a GPU one fused kernel where the layer
    allows), else the one gradient op; the gradients as F.conv2d's."""
    x, wt, b = _inputs(seed, n=2, c=16, h=6, w=5, dtype=torch.float64)
    args = [t.clone().requires_grad_(k in grads) for t, k in zip((x, wt, b), "xwb", strict=True)]
    ref = [t.clone().requires_grad_(k in grads) for t, k in zip((x, wt, b), "xwb", strict=True)]
    g = torch.randn(2, 16, 6, 5, dtype=torch.float64)
    with _OpLog() as log:  # on the CPU the backward runs on this thread, under the mode
        torch.ops.spio.conv2d_gw8(*args, [1, 1]).backward(g)
    assert log.ops == ["conv2d_gw8", *ops]
    F.conv2d(*ref, padding=1, groups=2).backward(g)
    for t, r, k in zip(args, ref, "xwb", strict=True):
        if k in grads:
            assert_close(t.grad, r.grad, tolerance(torch.float64, depth=60), where=k)
        else:
            assert t.grad is None


def test_autograd_matches_conv2d(seed):
    x, wt, b = _inputs(seed, n=2, c=16, h=6, w=5, r=3, s=5, dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (x, wt, b)]
    ref_args = [t.clone().requires_grad_() for t in (x, wt, b)]
    g = torch.randn(2, 16, 6, 3, dtype=torch.float64)
    conv2d_gw8(args[0].float(), args[1].float(), args[2].float(), (1, 1)).double().backward(g)
    F.conv2d(*ref_args, padding=(1, 1), groups=2).backward(g)
    # float32 kernel path vs float64 reference: reductions of up to N·P·Q = 36 terms (weight grad).
    for a, r in zip(args, ref_args, strict=True):
        assert_close(a.grad, r.grad, tolerance(torch.float32, depth=36), where=f"seed={seed}")


def test_gradcheck_fallback():
    x, wt, b = _inputs(1, n=1, c=8, h=4, w=3, r=3, s=2, dtype=torch.float64)
    # float64 is not a kernel dtype; gradcheck the op itself (the CPU path runs PyTorch).
    args = tuple(t.requires_grad_() for t in (x, wt, b))
    assert torch.autograd.gradcheck(
        lambda x, w, b: torch.ops.spio.conv2d_gw8(x, w, b, [1, 0]), args
    )


def test_torch_compile_fullgraph(seed):
    x, wt, b = _inputs(seed)
    f = torch.compile(lambda x, w, b: conv2d_gw8(x, w, b) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(f(x, wt, b), conv2d_gw8(x, wt, b) * 2)


def test_layer_from_conv2d_matches(seed):
    torch.manual_seed(seed)
    conv = nn.Conv2d(32, 32, (3, 5), padding=(1, 2), groups=4)
    layer = Conv2dGw8.from_conv2d(conv)
    assert layer.weight is conv.weight and layer.bias is conv.bias
    x = torch.randn(2, 32, 7, 9)
    torch.testing.assert_close(layer(x), conv(x), rtol=1e-5, atol=1e-5)
    no_bias = Conv2dGw8.from_conv2d(nn.Conv2d(8, 8, 1, groups=1, bias=False))
    assert no_bias.bias is None and no_bias.kernel_size == (1, 1)


def test_layer_constructor():
    layer = Conv2dGw8(16, 3)
    assert layer.weight.shape == (16, 8, 3, 3) and layer.bias.shape == (16,)
    assert layer.padding == (1, 1)
    assert layer(torch.randn(1, 16, 5, 5)).shape == (1, 16, 5, 5)
    assert Conv2dGw8(16, (3, 5), padding=0, bias=False).bias is None
    with pytest.raises(ValueError, match="multiple of 8"):
        Conv2dGw8(12, 3)
    with pytest.raises(ValueError, match="kernel_size"):
        Conv2dGw8(16, 9)


@pytest.mark.parametrize(
    "conv, message",
    [
        (nn.Conv2d(16, 16, 3, groups=4), "group width must be 8"),
        (nn.Conv2d(16, 32, 3, groups=2), "out_channels"),
        (nn.Conv2d(16, 16, 3, stride=3, groups=2), "stride must be 1 or 2"),
        (nn.Conv2d(16, 16, 3, dilation=2, groups=2), "dilation must be 1"),
        (nn.Conv2d(16, 16, 9, groups=2), "kernel_size"),
        (nn.Conv2d(16, 16, 4, padding="same", groups=2), "even kernel"),
        (nn.Conv2d(16, 16, 3, padding=1, padding_mode="reflect", groups=2), "padding_mode"),
    ],
)
def test_from_conv2d_rejects(conv, message):
    with pytest.raises(ValueError, match=message):
        Conv2dGw8.from_conv2d(conv)


def test_from_conv2d_rejects_non_conv():
    with pytest.raises(TypeError, match="expected nn.Conv2d"):
        Conv2dGw8.from_conv2d(nn.Linear(8, 8))


def test_from_conv2d_rejects_a_parametrized_weight():
    # weight_norm makes conv.weight a Tensor computed at each forward from weight_g/weight_v;
    # sharing that snapshot would freeze the weight (it is no Parameter of the new layer).
    conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(16, 16, 3, padding=1, groups=2))
    with pytest.raises(TypeError, match="conv.weight must be an nn.Parameter"):
        Conv2dGw8.from_conv2d(conv)
    from spio.layers import transform

    model = nn.Sequential(conv)
    report = transform(model)
    assert report.skipped and "weight_norm" in report.skipped[0][1], report
    assert model[0] is conv


def test_from_conv2d_rejects_the_older_weight_norm_hook_and_names_its_remover():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the hook is deprecated in torch
        conv = nn.utils.weight_norm(nn.Conv2d(16, 16, 3, padding=1, groups=2))
    with pytest.raises(TypeError, match="conv.weight must be an nn.Parameter") as e:
        Conv2dGw8.from_conv2d(conv)
    assert "remove_weight_norm(conv, 'weight')" in str(e.value)
    assert "remove_parametrizations(conv, 'weight')" in str(e.value)
    nn.utils.remove_weight_norm(conv, "weight")  # the fix the message names works
    assert isinstance(Conv2dGw8.from_conv2d(conv), Conv2dGw8)
    # The bias: the message names it, and its remover takes that name.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        conv = nn.utils.weight_norm(nn.Conv2d(16, 16, 3, padding=1, groups=2), name="bias")
    with pytest.raises(TypeError, match="conv.bias must be an nn.Parameter") as e:
        Conv2dGw8.from_conv2d(conv)
    assert "remove_weight_norm(conv, 'bias')" in str(e.value)
    nn.utils.remove_weight_norm(conv, "bias")
    assert isinstance(Conv2dGw8.from_conv2d(conv), Conv2dGw8)


def test_wgrad_config_depends_on_the_layer_and_batch_bucket(tmp_path):
    """dweight's bits follow from the wgrad config (partial-sum count and order), so the op
    selects it for the layer at the batch's bucket (N rounded up to a power of two, at most
    SELECT_BATCH): every batch size runs the config a fresh process picks for its bucket,
    whichever batch size the process saw first, and all batches above 128 share one config.
    fprop selects at the batch's bucket too: a first call at one image does not fix the config
    of the training batches."""
    from spio.cuda import known_device
    from spio.kernels.conv2d_gw8.fprop import FPROP
    from spio.kernels.conv2d_gw8.params import SELECT_BATCH, Conv2dGw8Params, select_batch
    from spio.kernels.conv2d_gw8.wgrad import WGRAD
    from spio.select import default_selector, op_config
    from spio.settings import override

    dev = known_device("H100")
    assert [select_batch(n) for n in (1, 2, 3, 5, 8, 9, 32, 33, 64, 65, 256, 257, 65535)] == [
        1, 2, 4, 8, 8, 16, 32, 64, 64, 128, 256, 256, 256
    ]  # fmt: skip
    assert SELECT_BATCH == 256

    def layer(n):
        return Conv2dGw8Params(n=n, c=256, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)

    with override(cache_dir=tmp_path):  # picks persist: keep them out of the user's cache
        default_selector().clear()
        try:
            fresh = {n: op_config(WGRAD, layer(n), dev) for n in (256, 3)}
            default_selector().clear()
            assert op_config(WGRAD, layer(4), dev) == fresh[3]  # the small bucket first
            for n in (256, 129, 200, 1000):
                assert op_config(WGRAD, layer(n), dev) == fresh[256]
            assert op_config(WGRAD, layer(3), dev) == fresh[3]
            assert fresh[256] == default_selector().select(WGRAD, layer(SELECT_BATCH), dev)
            assert fresh[3] == default_selector().select(WGRAD, layer(4), dev)

            at_one = op_config(FPROP, layer(1), dev)  # a process's first call: one image
            big = op_config(FPROP, layer(200), dev)
            assert big == default_selector().select(FPROP, layer(SELECT_BATCH), dev)
            assert at_one == default_selector().select(FPROP, layer(1), dev)
            assert big != at_one  # the layer's small and large buckets differ here
            assert op_config(FPROP, layer(1000), dev) == big  # above the cap: one config
        finally:
            default_selector().clear()

    # ---- batch sizes: N = 0 and N above the GPU kernels' gridDim.y limit -------------------------


def _gpu_path(monkeypatch):
    """Routes the ops to their kernel path although the tensors are on the CPU: the batch checks
    (empty batch, N > 65535) come before anything touches a GPU, so they run here."""
    import sys

    mod = sys.modules["spio.functional.conv2d_gw8"]  # spio.functional.conv2d_gw8 is the function
    monkeypatch.setattr(mod, "use_fallback", lambda *tensors: False)


def _grads(f, x, wt, b, g):
    args = [t.clone().requires_grad_() for t in (x, wt, b)]
    y = f(*args)
    y.backward(g)
    return y, [a.grad for a in args]


@pytest.mark.parametrize("path", ["fallback", "kernel"])
def test_empty_batch_gives_empty_output_and_zero_grads(path, seed, monkeypatch):
    # F.conv2d returns an empty output for N = 0 and zero weight/bias gradients; so does spio, on
    # the CPU fallback and on the kernel path (which launches nothing).
    if path == "kernel":
        _gpu_path(monkeypatch)
    dtype = torch.bfloat16 if path == "kernel" else torch.float32
    x, wt, b = _inputs(seed, n=0, c=16, h=6, w=5, r=3, s=5, dtype=dtype)
    g = torch.randn(0, 16, 6, 3).to(dtype)
    y, (gx, gw, gb) = _grads(lambda x, w, b: conv2d_gw8(x, w, b, (1, 1)), x, wt, b, g)
    want, (wgx, wgw, wgb) = _grads(
        lambda x, w, b: F.conv2d(x, w, b, padding=(1, 1), groups=2), x, wt, b, g
    )
    assert y.shape == want.shape == (0, 16, 6, 3) and y.dtype == dtype
    assert y.is_contiguous(memory_format=CL)
    assert gx.shape == wgx.shape == x.shape
    assert torch.equal(gw, torch.zeros_like(wt)) and torch.equal(wgw, gw)
    assert torch.equal(gb, torch.zeros_like(b)) and torch.equal(wgb, gb)


def test_empty_batch_kernel_path_agrees_with_the_fake(seed, monkeypatch):
    # opcheck runs the real op next to its fake implementation (shapes, strides, dtypes) and
    # through autograd; with the kernel path forced, the real op is the empty-batch early return.
    _gpu_path(monkeypatch)
    x, wt, b = _inputs(seed, n=0, dtype=torch.bfloat16)
    x = x.to(memory_format=CL).requires_grad_()
    wt.requires_grad_()
    b.requires_grad_()
    torch.library.opcheck(torch.ops.spio.conv2d_gw8.default, (x, wt, b, [1, 1]))
    dy = torch.randn(0, 16, 9, 7).to(torch.bfloat16).to(memory_format=CL)
    torch.library.opcheck(
        torch.ops.spio.conv2d_gw8_dgrad.default, (dy, wt.detach(), [9, 7], [1, 1])
    )
    for with_bias in (True, False):
        torch.library.opcheck(
            torch.ops.spio.conv2d_gw8_wgrad.default, (x.detach(), dy, [3, 3], [1, 1], with_bias)
        )
        torch.library.opcheck(
            torch.ops.spio.conv2d_gw8_backward.default,
            (dy, x.detach(), wt.detach(), [1, 1], with_bias),
        )


def test_batch_above_the_gpu_limit_runs_on_the_cpu_fallback(seed):
    # 65536 images exceed the kernels' gridDim.y limit; PyTorch's convolution has no such limit,
    # so the fallback takes them (it used to raise before deciding where to run).
    x, wt, b = _inputs(seed, n=65536, c=8, h=2, w=2, r=1, s=1, dtype=torch.float32)
    y = conv2d_gw8(x, wt, b)
    want = F.conv2d(x.double(), wt.double(), b.double(), groups=1)
    assert_close(y, want, tolerance(torch.float32, depth=8), where=f"N=65536 seed={seed}")


def test_batch_above_the_gpu_limit_is_a_clear_error_on_the_kernel_path(seed, monkeypatch):
    _gpu_path(monkeypatch)
    x, wt, b = _inputs(seed, n=65536, c=8, h=2, w=2, r=1, s=1, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"N = 65536 exceeds 65535 .*gridDim\.y.*split the batch"):
        conv2d_gw8(x, wt, b)
    dy = torch.randn_like(x)
    with pytest.raises(ValueError, match="conv2d_gw8_dgrad: batch N = 65536 exceeds 65535"):
        torch.ops.spio.conv2d_gw8_dgrad(dy, wt, [2, 2], [0, 0])
    with pytest.raises(ValueError, match="conv2d_gw8_wgrad: batch N = 65536 exceeds 65535"):
        torch.ops.spio.conv2d_gw8_wgrad(x, dy, [1, 1], [0, 0], True)
    # At the limit the batch check passes (the kernel path then needs a GPU: not run here).
    from spio.functional.conv2d_gw8 import _gpu_batch

    assert _gpu_batch("conv2d_gw8", 65535) and not _gpu_batch("conv2d_gw8", 0)


def test_params_has_bias_must_be_a_bool():
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    with pytest.raises(TypeError, match="has_bias must be a bool, got str 'yes'"):
        Conv2dGw8Params(n=1, c=8, h=4, w=4, has_bias="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="has_bias must be a bool, got int"):
        Conv2dGw8Params(n=1, c=8, h=4, w=4, has_bias=1)  # type: ignore[arg-type]
    assert Conv2dGw8Params(n=1, c=8, h=4, w=4, has_bias=True).has_bias is True


def test_gradient_ops_check_their_tensors_against_the_layer(seed, monkeypatch):
    """Called directly, the gradient ops refuse a grad_output or weight that does not fit the
    layer their other arguments describe (the kernels would read past them), before any GPU."""
    _gpu_path(monkeypatch)
    x, wt, _ = _inputs(seed, n=2, c=16, h=9, w=7, r=3, s=3, dtype=torch.float16)
    dy = torch.randn(2, 16, 9, 7).half()
    with pytest.raises(ValueError, match=r"conv2d_gw8_dgrad: grad_output must have shape"):
        torch.ops.spio.conv2d_gw8_dgrad(dy, wt, [9, 9], [1, 1])  # dy is 9x7, the layer 9x9
    with pytest.raises(ValueError, match=r"conv2d_gw8_dgrad: weight must have shape"):
        torch.ops.spio.conv2d_gw8_dgrad(dy, wt[:8], [9, 7], [1, 1])
    with pytest.raises(ValueError, match=r"conv2d_gw8_wgrad: grad_output must have shape"):
        torch.ops.spio.conv2d_gw8_wgrad(x, dy[:, :, :8], [3, 3], [1, 1], True)
    with pytest.raises(ValueError, match=r"conv2d_gw8_wgrad: grad_output must have .*float16"):
        torch.ops.spio.conv2d_gw8_wgrad(x, dy.bfloat16(), [3, 3], [1, 1], True)


def test_gradient_ops_check_dtypes_dims_and_devices(seed, monkeypatch):
    """dgrad's weight is grad_output's dtype or float32 (another half type would be read as the
    wrong format); the activations are 4-D fp16/bf16. (That the tensors share a device needs two
    devices with kernels: not checked here.)"""
    _gpu_path(monkeypatch)
    _, wt, _ = _inputs(seed, n=2, c=16, h=9, w=7, r=3, s=3, dtype=torch.float16)
    dy = torch.randn(2, 16, 9, 7).half()
    with pytest.raises(TypeError, match=r"dgrad: weight must be torch.float16 .* or float32"):
        torch.ops.spio.conv2d_gw8_dgrad(dy, wt.bfloat16(), [9, 7], [1, 1])
    with pytest.raises(TypeError, match=r"dgrad: expected a 4-D float16 or bfloat16 tensor"):
        torch.ops.spio.conv2d_gw8_dgrad(dy.float(), wt, [9, 7], [1, 1])
    with pytest.raises(TypeError, match=r"wgrad: expected a 4-D float16 or bfloat16 tensor"):
        torch.ops.spio.conv2d_gw8_wgrad(dy[0], dy, [3, 3], [1, 1], True)


class _RecordingLaunch:
    """Stands in for the fused WgradLaunch: records the buffers a call passes."""

    workspace_floats = 12

    def __init__(self):
        self.calls = []

    def __call__(self, dw, db, workspace, x, dy, stream, dx, w):
        self.calls.append((dw, db, workspace, x, dy, stream, dx, w))


@pytest.mark.parametrize("weight_cl", [False, True])
def test_run_fused_passes_dx_and_only_a_weight_of_the_plans_dtype_and_layout(weight_cl):
    """`_WgradPlan.run_fused` (the backward's fused kernel, GPU-tested in
    tests/gpu/functional/test_conv2d_gw8.py) on the host with a recording launch: dx, dw and db
    of the plan's shapes, dtypes and layouts go to the launch; a weight of another dtype or
    layout, or a layer that does not fuse, gets None (the caller runs dgrad and wgrad)."""
    import importlib

    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    m = importlib.import_module("spio.functional.conv2d_gw8")
    p = Conv2dGw8Params(n=2, c=16, h=6, w=5, has_bias=True, weight_cl=weight_cl)
    plan = object.__new__(m._WgradPlan)
    launch = _RecordingLaunch()
    size = (p.n, p.c, p.h, p.w)
    plan.p, plan.c, plan.with_bias, plan.device = p, p.c, True, torch.device("cpu")
    plan.wdtype, plan.w_size = torch.float16, (p.c, 8, 3, 3)
    plan.w_stride = m._cl_stride(plan.w_size, CL if weight_cl else torch.contiguous_format)
    plan._fused = (launch, size, m._cl_stride(size), torch.float16)
    w = torch.zeros(p.c, 8, 3, 3, dtype=torch.float16)
    w = w.contiguous(memory_format=CL if weight_cl else torch.contiguous_format)
    x = dy = torch.zeros(size, dtype=torch.float16)
    dx, dw, db = plan.run_fused(x, dy, w, 7)
    ((cdw, cdb, ws, cx, cdy, stream, cdx, cw),) = launch.calls
    assert (cdw, cdb, cdx, cw, stream) == (dw, db, dx, w, 7) and ws.numel() == 12
    assert dx.shape == size and dx.is_contiguous(memory_format=CL) and dx.dtype == torch.float16
    assert dw.shape == (p.c, 8, 3, 3) and db.shape == (p.c,)
    assert dw.is_contiguous(memory_format=CL if weight_cl else torch.contiguous_format)
    other = w.contiguous(memory_format=torch.contiguous_format if weight_cl else CL)
    assert plan.run_fused(x, dy, other, 7) is None  # the other layout
    assert plan.run_fused(x, dy, w.float(), 7) is None  # the other dtype
    plan._fused = None
    assert plan.run_fused(x, dy, w, 7) is None  # a layer that does not fuse
    assert len(launch.calls) == 1
