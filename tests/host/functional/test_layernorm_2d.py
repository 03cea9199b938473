"""spio.functional.layernorm_2d and spio.layers.LayerNorm2d on the CPU: the documented PyTorch
fallback against timm's formulation, autograd, opcheck, torch.compile, errors, the layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from spio.errors import FallbackDisabledError
from spio.functional import layernorm_2d
from spio.layers import LayerNorm2d
from spio.settings import override
from spio.testing import assert_close, tolerance


class TimmLayerNorm2d(nn.LayerNorm):
    """timm.layers.LayerNorm2d, written out: LayerNorm over the channels of NCHW."""

    def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


TimmLayerNorm2d.__name__ = "LayerNorm2d"  # what spio recognizes, as timm names it


def _timm(x, w, b, eps):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b, eps).permute(0, 3, 1, 2)


def _inputs(seed, shape, dtype, wdtype=None, affine=True):
    g = torch.Generator().manual_seed(seed)
    x = (3 + torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)
    x = x.to(memory_format=torch.channels_last)
    c = shape[1]
    wdtype = wdtype or dtype
    w = torch.randn(c, generator=g).to(wdtype) if affine else None
    b = torch.randn(c, generator=g).to(wdtype) if affine else None
    return x, w, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape", [(2, 96, 5, 3), (1, 3, 4, 4), (3, 8, 1, 1), (1, 768, 7, 7)])
def test_fallback_matches_timm(shape, dtype, seed):
    x, w, b = _inputs(seed, shape, dtype)
    y = layernorm_2d(x, w, b, eps=1e-6)
    want = _timm(x, w, b, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, want.contiguous(memory_format=torch.channels_last))


def test_fallback_stats_and_mixed_weight(seed):
    x, w, b = _inputs(seed, (2, 64, 3, 5), torch.bfloat16, wdtype=torch.float32)
    y, mean, rstd = torch.ops.spio.layernorm_2d(x, w, b, 1e-5)
    assert mean.shape == rstd.shape == (2, 3, 5) and mean.dtype == rstd.dtype == torch.float32
    xd = x.double()
    assert_close(mean, xd.mean(1), tolerance(torch.float32, 64), "mean")
    assert_close(
        rstd, (xd.var(1, unbiased=False) + 1e-5).rsqrt(), tolerance(torch.float32, 64), "rstd"
    )
    want = _timm(x.double(), w.double(), b.double(), 1e-5)
    assert_close(y, want, tolerance(torch.bfloat16, 64), "y")


def test_non_channels_last_input(seed):
    x, w, b = _inputs(seed, (2, 16, 4, 6), torch.float32)
    xc = x.contiguous()
    y = layernorm_2d(xc, w, b)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, layernorm_2d(x, w, b))


def test_no_affine_and_bias_only(seed):
    x, _, b = _inputs(seed, (2, 24, 3, 3), torch.float32)
    assert torch.equal(layernorm_2d(x), _timm(x, None, None, 1e-6))
    assert torch.equal(layernorm_2d(x, None, b), _timm(x, None, b, 1e-6))


def test_zero_size(seed):
    x = torch.empty(0, 16, 4, 4).to(memory_format=torch.channels_last)
    assert layernorm_2d(x, torch.ones(16), torch.zeros(16)).shape == (0, 16, 4, 4)


@pytest.mark.parametrize("affine", [True, False])
def test_backward_fallback_matches_autograd(affine, seed):
    x, w, b = _inputs(seed, (2, 40, 3, 5), torch.float32, affine=affine)
    params = [t.requires_grad_(True) for t in (x, w, b) if t is not None]
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 1))
    got = torch.autograd.grad(layernorm_2d(x, w, b), params, dy)
    want = torch.autograd.grad(_timm(x, w, b, 1e-6), params, dy)
    for name, a, e in zip(("dx", "dweight", "dbias"), got, want, strict=False):
        assert_close(a, e, tolerance(torch.float32, 40), name)


def test_gradcheck_float64(seed):
    x, w, b = _inputs(seed, (2, 8, 3, 2), torch.float64)
    for t in (x, w, b):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda *a: layernorm_2d(*a, eps=1e-5), (x, w, b))


@pytest.mark.parametrize("affine", [True, False])
def test_opcheck(affine, seed):
    x, w, b = _inputs(seed, (2, 16, 3, 3), torch.float32, affine=affine)
    for t in (x, w, b):
        if t is not None:
            t.requires_grad_(True)
    torch.library.opcheck(torch.ops.spio.layernorm_2d.default, (x, w, b, 1e-6))
    # The backward op itself is not differentiable (no double backward): plain tensors.
    w, b = (None if t is None else t.detach() for t in (w, b))
    y, mean, rstd = torch.ops.spio.layernorm_2d(x.detach(), w, b, 1e-6)
    torch.library.opcheck(
        torch.ops.spio.layernorm_2d_backward.default,
        (torch.randn_like(y), x.detach(), mean, rstd, w, b),
    )


def test_torch_compile_fullgraph(seed):
    x, w, b = _inputs(seed, (2, 32, 4, 4), torch.float32)
    fn = torch.compile(
        lambda x, w, b: layernorm_2d(x, w, b) * 2, fullgraph=True, backend="aot_eager"
    )
    assert torch.equal(fn(x, w, b), layernorm_2d(x, w, b) * 2)


def test_disable_fallback_raises():
    x = torch.randn(1, 8, 2, 2)
    with override(disable_fallback=True), pytest.raises(FallbackDisabledError, match="CUDA"):
        layernorm_2d(x)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.randn(2, 8, 3),), ValueError, "4-D"),
        ((torch.zeros(1, 8, 2, 2, dtype=torch.int32),), TypeError, "dtype must be"),
        ((torch.randn(1, 8, 2, 2), torch.ones(4)), ValueError, "weight must have shape"),
        ((torch.randn(1, 8, 2, 2), None, torch.ones(8, 1)), ValueError, "bias must have shape"),
        ((torch.randn(1, 8, 2, 2), torch.ones(8, dtype=torch.float16)), TypeError, "cast weight"),
        (
            (torch.randn(1, 8, 2, 2), torch.ones(8), torch.ones(8, dtype=torch.float64)),
            TypeError,
            "bias dtype",
        ),
        (("x",), TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        layernorm_2d(*args)


def test_bad_eps():
    with pytest.raises(ValueError, match="eps"):
        layernorm_2d(torch.randn(1, 8, 2, 2), eps=-1.0)
    with pytest.raises(TypeError, match="eps must be a float, got str"):
        layernorm_2d(torch.randn(1, 8, 2, 2), eps="a")
    with pytest.raises(TypeError, match="eps must be a float, got bool"):
        layernorm_2d(torch.randn(1, 8, 2, 2), eps=True)


# ---- the layer -----------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [True, False])
def test_layer_from_timm_module(affine, seed):
    m = TimmLayerNorm2d(48, eps=1e-5, affine=affine)
    if affine:
        with torch.no_grad():
            m.weight.normal_()
            m.bias.normal_()
    layer = LayerNorm2d.from_module(m)
    assert layer.eps == 1e-5 and layer.channels == 48
    if affine:
        assert layer.weight is m.weight and layer.bias is m.bias  # shared, not copied
    else:
        assert layer.weight is None and layer.bias is None
    x, _, _ = _inputs(seed, (2, 48, 5, 5), torch.float32)
    assert torch.equal(layer(x), m(x).contiguous(memory_format=torch.channels_last))


def test_layer_defaults_and_repr():
    layer = LayerNorm2d(16)
    assert torch.equal(layer.weight, torch.ones(16)) and torch.equal(layer.bias, torch.zeros(16))
    assert layer.eps == 1e-6 and "16" in repr(layer)
    assert LayerNorm2d(16, bias=False).bias is None
    again = LayerNorm2d.from_module(layer)
    assert again.weight is layer.weight


def test_layer_rejects_plain_layernorm():
    with pytest.raises(TypeError, match="plain\\s+nn.LayerNorm"):
        LayerNorm2d.from_module(nn.LayerNorm(16))
    with pytest.raises(ValueError, match="channels"):
        LayerNorm2d(0)


def test_kernel_limits_documented():
    """The shapes spio's kernels do not take (and so fall back on a GPU too), with reasons."""
    from spio.functional.layernorm_2d import _kernel_limit

    assert _kernel_limit(torch.empty(1, 16, 2, 2, dtype=torch.float16)) is None
    assert "C = 12" in _kernel_limit(torch.empty(1, 12, 2, 2))
    assert "C = 16392" in _kernel_limit(torch.empty(1, 16392, 1, 1))
    assert "float64" in _kernel_limit(torch.empty(1, 16, 2, 2, dtype=torch.float64))


def test_configs_depend_on_the_layer_and_row_bucket(tmp_path):
    """y's and dweight/dbias's bits follow from the forward and backward configs (row-sum and
    partial-sum order), so the op selects them for the layer at its rows' bucket (M rounded up
    to a power of two, at most SELECT_ROWS): after M = 196 the op runs M = 25088 with the config
    a fresh process picks for that bucket, every M of a bucket runs one config, and every M
    above SELECT_ROWS the one selected at SELECT_ROWS."""
    from spio.cuda import known_device
    from spio.kernels import layernorm_2d as k
    from spio.kernels.layernorm_2d_params import LayerNorm2dParams
    from spio.select import default_selector, op_config
    from spio.settings import override

    assert [k.select_rows(m) for m in (1, 2, 3, 196, 256, 257, 25088, 2**17, 2**17 + 1)] == [
        1, 2, 4, 256, 256, 512, 32768, 2**17, 2**17
    ]  # fmt: skip
    dev = known_device("H100")

    def layer(m):
        return LayerNorm2dParams(c=256, m=m)

    with override(cache_dir=tmp_path):  # picks persist: keep them out of the user's cache
        default_selector().clear()
        try:
            for kdef in (k.FWD, k.BWD):
                fresh = {m: op_config(kdef, layer(m), dev) for m in (25088, 196, 10**6)}
                default_selector().clear()
                assert op_config(kdef, layer(196), dev) == fresh[196]  # the small M first
                assert op_config(kdef, layer(25088), dev) == fresh[25088]
                assert op_config(kdef, layer(20000), dev) == fresh[25088]  # one bucket
                assert op_config(kdef, layer(200), dev) == fresh[196]
                assert fresh[25088] == default_selector().select(kdef, layer(32768), dev)
                assert fresh[10**6] == default_selector().select(kdef, layer(k.SELECT_ROWS), dev)
                assert op_config(kdef, layer(3 * 10**5), dev) == fresh[10**6]
        finally:
            default_selector().clear()


@pytest.mark.parametrize("under_compile, op_calls", [("pytorch", 0), ("spio", 1)])
def test_layer_steps_aside_under_compile(under_compile, op_calls, seed, monkeypatch):
    """Under torch.compile the layer runs spio's op (the default) or, with
    under_compile="pytorch", timm's permute + F.layer_norm; both compute what the eager layer
    computes."""
    import spio.layers.layernorm_2d as layer_module

    calls = []
    real = layer_module.layernorm_2d
    monkeypatch.setattr(
        layer_module, "layernorm_2d", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    layer = LayerNorm2d(32, eps=1e-5, under_compile=under_compile)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x, _, _ = _inputs(seed, (2, 32, 5, 5), torch.float32)
    eager = layer(x)
    calls.clear()
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(x)
    assert len(calls) == op_calls
    assert_close(compiled, eager.double(), tolerance(torch.float32, depth=32), "compiled layer")
    assert ("under_compile='pytorch'" in repr(layer)) == (under_compile == "pytorch")
    with pytest.raises(ValueError, match="under_compile must be one of"):
        LayerNorm2d(8, under_compile="inductor")
    assert LayerNorm2d.from_module(layer).under_compile == under_compile
