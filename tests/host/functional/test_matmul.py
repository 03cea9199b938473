"""spio.functional.matmul on the CPU: argument errors, the documented torch.matmul fallback,
opcheck, autograd and torch.compile (fullgraph) of torch.ops.spio.matmul."""

from __future__ import annotations

import pytest
import torch

from spio.errors import FallbackDisabledError
from spio.functional import matmul
from spio.settings import override
from spio.testing import assert_close, tolerance


def _inputs(seed, m, n, k, dtype, b_transposed, bias, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(*((n, k) if b_transposed else (k, n)), generator=g).to(dtype)
    c = torch.randn(n, generator=g).to(dtype) if bias else None
    for t in (a, b, c):
        if t is not None:
            t.requires_grad_(requires_grad)
    return a, b, c


def _reference(a, b, bias, b_transposed):
    bd = b.double()
    out = a.double() @ (bd.t() if b_transposed else bd)
    return out + bias.double() if bias is not None else out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m, n, k", [(1, 1, 8), (17, 40, 64), (33, 9, 24)])
@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_cpu_fallback_matches_fp64(seed, dtype, m, n, k, b_transposed, bias, out_dtype):
    a, b, c = _inputs(seed, m, n, k, dtype, b_transposed, bias)
    y = matmul(a, b, c, out_dtype=out_dtype, b_transposed=b_transposed)
    want_dtype = out_dtype or dtype
    assert y.dtype == want_dtype and y.shape == (m, n) and y.is_contiguous()
    # The fallback may accumulate in the operand dtype (CPU half matmul): depth-k in that dtype.
    tol = tolerance(want_dtype, depth=k, acc_dtype=dtype if out_dtype is None else torch.float32)
    # The rounding errors scale with the terms, not with the sum: where the terms cancel (a
    # 1 x 1 x 8 product with bias can sum to 1% of them) the bound relative to max|ref| grows by
    # that ratio (the sum's condition number).
    ref = _reference(a, b, c, b_transposed)
    terms = _reference(a.abs(), b.abs(), None if c is None else c.abs(), b_transposed)
    cond = max(1.0, terms.abs().max().item() / max(ref.abs().max().item(), 1e-30))
    assert_close(y, ref, tol * cond, where=f"seed={seed}")


def test_zero_k_gives_bias():
    a = torch.empty(3, 0, dtype=torch.float16)
    b = torch.empty(0, 5, dtype=torch.float16)
    c = torch.arange(5, dtype=torch.float16)
    assert torch.equal(matmul(a, b, c), c.expand(3, 5))


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((torch.randn(4, 8), torch.randn(8, 4)), {}, TypeError, r"a must be float16 or bfloat16"),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).bfloat16()),
            {},
            TypeError,
            r"b must have a's dtype",
        ),
        ((torch.randn(4, 8, 1).half(), torch.randn(8, 4).half()), {}, ValueError, r"a must be 2-D"),
        (
            (torch.randn(4, 8).half(), torch.randn(4, 8).half()),
            {},
            ValueError,
            r"b must be \(K, N\) with K = a.shape\[1\] = 8.*b_transposed=True",
        ),
        (
            (torch.randn(4, 12).half(), torch.randn(12, 4).half()),
            {},
            ValueError,
            r"multiple of 8.*pad .* to 16",
        ),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).half(), torch.randn(5).half()),
            {},
            ValueError,
            r"bias must have shape \(4,\)",
        ),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).half(), [0.0] * 4),
            {},
            TypeError,
            r"bias must be a torch.Tensor of shape \(4,\) or None, got list",
        ),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).half()),
            {"b_transposed": "yes"},
            TypeError,
            r"b_transposed must be a bool",
        ),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).half(), torch.randn(4)),
            {},
            TypeError,
            r"bias must be torch.float16",
        ),
        (
            (torch.randn(4, 8).half(), torch.randn(8, 4).half()),
            {"out_dtype": torch.bfloat16},
            TypeError,
            r"out_dtype must be None, torch.float16 or torch.float32",
        ),
        (([[1.0]], torch.randn(8, 4).half()), {}, TypeError, r"a must be a torch.Tensor"),
    ],
)
def test_bad_arguments(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        matmul(*args, **kwargs)


def test_disable_fallback_is_an_error():
    a, b, _ = _inputs(0, 4, 8, 8, torch.float16, False, False)
    with override(disable_fallback=True), pytest.raises(FallbackDisabledError, match="matmul"):
        matmul(a, b)


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_opcheck(seed, b_transposed, bias, out_dtype):
    a, b, c = _inputs(seed, 13, 24, 16, torch.bfloat16, b_transposed, bias, requires_grad=True)
    torch.library.opcheck(torch.ops.spio.matmul, (a, b, c, out_dtype, b_transposed))


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("m", [1, 13, 16])
def test_autograd_matches_fp64(seed, b_transposed, m):
    n, k = 24, 32
    a, b, c = _inputs(seed, m, n, k, torch.bfloat16, b_transposed, True, requires_grad=True)
    y = matmul(a, b, c, out_dtype=torch.float32, b_transposed=b_transposed)
    g = torch.randn(m, n, generator=torch.Generator().manual_seed(seed + 1))
    y.backward(g)
    a64, b64, c64 = (t.detach().double().requires_grad_() for t in (a, b, c))
    _reference(a64, b64, c64, b_transposed).backward(g.double())
    # Gradients round dC to bf16 and reduce over n (dA), m (dB) or m (dbias) terms.
    for got, want, depth in ((a.grad, a64.grad, n), (b.grad, b64.grad, m), (c.grad, c64.grad, m)):
        tol = tolerance(torch.bfloat16, depth=depth, acc_dtype=torch.bfloat16) * 2
        assert_close(got, want, tol, where=f"grad seed={seed}")


def test_torch_compile_fullgraph():
    a, b, c = _inputs(0, 9, 16, 24, torch.float16, True, True)

    @torch.compile(fullgraph=True, backend="eager")
    def f(a, b, c):
        return matmul(a, b, c, out_dtype=torch.float32, b_transposed=True) * 2

    tol = tolerance(torch.float32, depth=24)  # fp32 output of a K = 24 reduction
    assert_close(f(a, b, c), 2 * _reference(a, b, c, True), tol, where="compiled")


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("m, n", [(13, 13), (5, 21), (16, 8)])
def test_backward_feeds_the_kernel_reductions_of_multiples_of_8(monkeypatch, b_transposed, m, n):
    """The kernel path's backward pads the reduced dim (N for dA, M for dB) to a multiple of 8.

    The kernel is stood in for by a float64 matmul that enforces the kernel's K % 8 rule, so this
    runs on the CPU. dB's left operand (dCᵀ or Aᵀ) reaches the op as the transposed view of a
    contiguous tensor, not copied (the Hopper kernel reads it as it lies, `a_transposed`).
    """
    import importlib

    fm = importlib.import_module("spio.functional.matmul")  # the module, not the function
    lhs_strides: list = []

    def kernel(a, b, bias, out_dtype, bt):
        assert a.shape[1] % 8 == 0, f"kernel called with K = {a.shape[1]}"
        lhs_strides.append((tuple(a.shape), a.stride()))
        out = a.double() @ (b.double().t() if bt else b.double())
        return (out + bias.double() if bias is not None else out).to(out_dtype)

    monkeypatch.setattr(fm, "use_fallback", lambda *args: False)
    monkeypatch.setattr(fm, "_run_kernel", kernel)
    k = 16
    bf = torch.bfloat16
    a = torch.randn(m, k, dtype=bf, requires_grad=True)
    b = (
        torch.randn(n, k, dtype=bf) if b_transposed else torch.randn(k, n, dtype=bf)
    ).requires_grad_()
    y = fm.matmul(a, b, b_transposed=b_transposed)
    g = torch.randn(m, n, dtype=bf)
    y.backward(g)
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (a2 @ (b2.t() if b_transposed else b2)).backward(g.double())
    assert_close(a.grad, a2.grad, tolerance(bf, depth=n, acc_dtype=torch.float64), "dA")
    assert_close(b.grad, b2.grad, tolerance(bf, depth=m, acc_dtype=torch.float64), "dB")
    # The forward, dA, then dB: dB (rows, M8) reads a (M8, rows) tensor's transpose.
    rows, m8 = (n if b_transposed else k), m + (-m) % 8
    assert lhs_strides[-1] == ((rows, m8), (1, rows)), lhs_strides


@pytest.mark.parametrize("b_transposed", [True, False])
def test_plan_loads_its_kernel_on_the_tensors_gpu(monkeypatch, b_transposed):
    """The plan selects and loads (into the current CUDA context) inside
    torch.cuda.device(a.device): a tensor on cuda:1 while cuda:0 is current must not get a kernel
    loaded into GPU 0's context and filed under GPU 1 (on an H100 the Hopper kernel, B either
    way)."""
    import contextlib
    import importlib

    import spio.select
    from spio.cuda import known_device
    from spio.kernels import loader

    fm = importlib.import_module("spio.functional.matmul")  # the module, not the function
    current = {"device": "cuda:0"}
    loads = []

    @contextlib.contextmanager
    def device(d):
        before, current["device"] = current["device"], str(d)
        try:
            yield
        finally:
            current["device"] = before

    class Kernel:
        def bind(self, grid, **kw):
            return lambda args, stream: None

    class Cache:
        def get(self, kdef, params, cfg, dev):
            loads.append((kdef.name, current["device"]))
            return Kernel()

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(loader, "default_function_cache", lambda: Cache())
    monkeypatch.setattr(fm, "device_attributes", lambda index: known_device("H100"))
    monkeypatch.setattr(spio.select, "op_config", lambda kdef, p, dev: kdef.heuristic(p, dev))
    a = torch.empty(64, 64, dtype=torch.float16, device="meta")
    b = torch.empty(64, 64, dtype=torch.float16, device="meta")
    fm._Plan(a, b, None, torch.float16, b_transposed)
    # On an H100 the Hopper kernel serves B either way (a row-major B read N-major).
    assert loads == [("matmul_sm90", str(a.device))]


def _h100_plans(monkeypatch) -> tuple:
    """The matmul module with plans built as on an H100 (no GPU: loads are recorded, launches do
    nothing), and the list of configs the plans load."""
    import contextlib
    import importlib

    import spio.select
    from spio.cuda import known_device
    from spio.kernels import loader

    fm = importlib.import_module("spio.functional.matmul")
    cfgs: list = []

    class Cache:
        def get(self, kdef, params, cfg, dev):
            cfgs.append(cfg)
            return type("K", (), {"bind": lambda self, grid, **kw: lambda args, stream: None})()

    monkeypatch.setattr(loader, "default_function_cache", lambda: Cache())
    monkeypatch.setattr(fm, "device_attributes", lambda index: known_device("H100"))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    # The families' own picks: no persisted winner or SPIO_AUTOTUNE of this machine applies.
    monkeypatch.setattr(spio.select, "op_config", lambda kdef, p, dev: kdef.heuristic(p, dev))
    return fm, cfgs


@pytest.mark.parametrize("shape, strided, want", [((64, 72), True, True), ((64, 72), False, False),
                                                  ((60, 72), True, False)])  # fmt: skip
def test_plan_reads_a_transposed_view_as_it_lies(monkeypatch, shape, strided, want):
    """On an H100 an A that is the transposed view of a contiguous (K, M) tensor with M a
    multiple of 8 (dB's dCᵀ or Aᵀ) runs the Hopper kernel with `a_transposed`, so the plan copies
    nothing; a contiguous A, or M not a multiple of 8, keeps the (M, K) layout."""
    fm, cfgs = _h100_plans(monkeypatch)
    m, k = shape
    a = torch.empty(k, m, dtype=torch.float16, device="meta").t() if strided else \
        torch.empty(m, k, dtype=torch.float16, device="meta")  # fmt: skip
    b = torch.empty(64, k, dtype=torch.float16, device="meta")
    plan = fm._Plan(a, b, None, torch.float16, True)
    assert plan.a_t == want and cfgs[-1].a_transposed == want


def test_plan_runs_a_transposed_a_without_clusters(monkeypatch):
    """A transposed-view A runs without clusters even where the Hopper kernel's config has them
    (the heuristic's LARGE_PICK): the plan drops the cluster rather than fail."""
    from spio.kernels import matmul_sm90 as k90

    fm, cfgs = _h100_plans(monkeypatch)
    cluster = k90.MatmulSm90Config(256, 4, cluster_m=2)
    monkeypatch.setattr(fm, "kernel_choice", lambda p, dev: ("sm90", cluster))
    a = torch.empty(512, 1024, dtype=torch.float16, device="meta").t()  # (1024, 512), M-major
    b = torch.empty(512, 512, dtype=torch.float16, device="meta")
    plan = fm._Plan(a, b, None, torch.float16, True)
    want = k90.MatmulSm90Config(256, 4, raster=1, a_transposed=True)  # the loaded variant
    assert plan.a_t and cfgs == [want], cfgs


def test_split_plan_passes_its_workspace(monkeypatch):
    """At a decode shape on an H100 the plan runs a swapped split-K config
    (`matmul_sm90.heuristic`): it loads the main kernel and the sum, and each call allocates the
    fp32 (split_k x M x N) workspace as it allocates the output (on the current stream) and
    hands it to both launches with that stream; the main kernel runs C^T's problem."""
    import contextlib
    import importlib

    from spio.cuda import driver, known_device
    from spio.kernels import loader

    fm = importlib.import_module("spio.functional.matmul")
    loads, launched, allocated = [], [], []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def bind(self, grid, **kw):
            return lambda args, stream: launched.append((self.name, args, stream))

    class Cache:
        def get(self, kdef, params, cfg, dev):
            loads.append(kdef.name)
            return Kernel(kdef.name)

    def empty(size, dtype, device):
        allocated.append((tuple(size), dtype))
        return torch.empty(size, dtype=dtype, device="meta")

    monkeypatch.setattr(loader, "default_function_cache", lambda: Cache())
    monkeypatch.setattr(fm, "device_attributes", lambda index: known_device("H100"))
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: bytes(128))
    monkeypatch.setattr(fm, "_empty", empty)
    monkeypatch.setattr(fm, "raw_stream", lambda index: 7)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    a = torch.empty(16, 4096, dtype=torch.float16, device="meta")
    b = torch.empty(4096, 4096, dtype=torch.float16, device="meta")
    plan = fm._Plan(a, b, None, torch.float16, True)
    assert sorted(loads) == ["matmul_sm90", "matmul_splitk_reduce"]
    assert plan.workspace == (4 * 16 * 4096,)  # 32 tiles of C^T x 4 splits of 16 k tiles
    out = plan.forward(a, b, None)
    assert allocated == [((16, 4096), torch.float16), ((4 * 16 * 4096,), torch.float32)]
    (main, main_args, s1), (total, sum_args, s2) = launched
    assert (main, total, s1, s2) == ("matmul_sm90", "matmul_splitk_reduce", 7, 7)
    assert main_args[0] is sum_args[1] and sum_args[0] is out
    assert main_args[0].shape == (4 * 16 * 4096,) and main_args[0].dtype == torch.float32
    assert main_args[4:8] == (4096, 16, 4096, 8)  # swapped: C^T's problem
