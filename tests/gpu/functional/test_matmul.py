"""torch.ops.spio.matmul on the GPU: kernel path vs fp64, layouts and odd strides, opcheck,
torch.compile (fullgraph), autograd vs fp64, CUDA graphs, no recompiles for new token counts."""

from __future__ import annotations

import importlib

import pytest
import torch

from spio.functional import matmul
from spio.settings import override
from spio.testing import assert_close, tolerance

pytestmark = pytest.mark.gpu


def _inputs(seed, m, n, k, dtype=torch.bfloat16, b_transposed=False, bias=True, grad=False):
    g = torch.Generator("cuda").manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(dtype).requires_grad_(grad)

    a = rand(m, k)
    b = rand(n, k) if b_transposed else rand(k, n)
    return a, b, rand(n) if bias else None


def _reference(a, b, bias, b_transposed):
    bd = b.double()
    out = a.double() @ (bd.t() if b_transposed else bd)
    return out + bias.double() if bias is not None else out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "m, n, k", [(1, 4096, 4096), (17, 17, 40), (255, 1000, 264), (1000, 13, 8)]
)
@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_matches_fp64(seed, dtype, m, n, k, b_transposed, bias, out_dtype):
    a, b, c = _inputs(seed, m, n, k, dtype, b_transposed, bias)
    with override(disable_fallback=True):
        y = matmul(a, b, c, out_dtype=out_dtype, b_transposed=b_transposed)
    assert y.dtype == (out_dtype or dtype) and y.shape == (m, n)
    tol = tolerance(y.dtype, depth=k)
    assert_close(y, _reference(a, b, c, b_transposed), tol, where=f"seed={seed}")


@pytest.mark.parametrize("b_transposed", [False, True])  # on sm_90: the Hopper kernel, either
def test_non_contiguous_and_offset_inputs(seed, b_transposed):
    """Transposed views and storage offsets that break 16-byte alignment are copied, not misread
    (the Hopper kernel's TMA maps need 16-byte aligned A and B)."""
    a, b, c = _inputs(seed, 65, 72, 48, b_transposed=b_transposed)
    a_odd = torch.empty(65 * 48 + 1, dtype=a.dtype, device="cuda")[1:].view(65, 48).copy_(a)
    b_view = b.t().contiguous().t()  # b's shape, column-major strides
    y = matmul(a_odd, b_view, c, b_transposed=b_transposed)
    where = f"views b_transposed={b_transposed}"
    assert_close(y, _reference(a, b, c, b_transposed), tolerance(y.dtype, depth=48), where=where)
    b_odd = torch.empty(b.numel() + 1, dtype=b.dtype, device="cuda")[1:].view(b.shape).copy_(b)
    y = matmul(a, b_odd, c, b_transposed=b_transposed)  # B 2 bytes off alignment
    where = f"offset B b_transposed={b_transposed}"
    assert_close(y, _reference(a, b, c, b_transposed), tolerance(y.dtype, depth=48), where=where)
    # A as the transposed view of a (K, M) tensor, M a multiple of 8, 2 bytes off alignment: on
    # sm_90 read as it lies once copied to an aligned (K, M) tensor.
    a8 = a[:64]
    at_odd = torch.empty(48 * 64 + 1, dtype=a.dtype, device="cuda")[1:].view(48, 64)
    at_odd.copy_(a8.t())
    y = matmul(at_odd.t(), b_view, c, b_transposed=b_transposed)
    where = f"offset transposed A b_transposed={b_transposed}"
    assert_close(y, _reference(a8, b, c, b_transposed), tolerance(y.dtype, depth=48), where=where)


def test_empty_and_zero_k():
    a = torch.empty(0, 16, dtype=torch.half, device="cuda")
    b = torch.randn(16, 8, device="cuda").half()
    assert matmul(a, b).shape == (0, 8)
    c = torch.randn(8, device="cuda").half()
    z = matmul(torch.empty(3, 0, dtype=torch.half, device="cuda"), b[:0], c)
    assert torch.equal(z, c.expand(3, 8))


def test_opcheck(seed):
    a, b, c = _inputs(seed, 33, 40, 64, b_transposed=True, grad=True)
    torch.library.opcheck(torch.ops.spio.matmul, (a, b, c, torch.float32, True))
    torch.library.opcheck(torch.ops.spio.matmul, (a.detach(), b.detach().t(), None, None, False))
    # A as the transposed view of a (K, M) tensor, M a multiple of 8: read as it lies on sm_90.
    a_t = torch.randn(64, 40, device="cuda").to(a.dtype).t().requires_grad_()
    torch.library.opcheck(torch.ops.spio.matmul, (a_t, b, c, None, True))


def test_torch_compile_fullgraph(seed):
    a, b, c = _inputs(seed, 100, 264, 128, b_transposed=True)

    @torch.compile(fullgraph=True)
    def f(a, b, c):
        return torch.relu(matmul(a, b, c, b_transposed=True))

    y = f(a, b, c)
    ref = torch.relu(_reference(a, b, c, True))
    assert_close(y, ref, tolerance(torch.bfloat16, depth=128), where=f"compiled seed={seed}")


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("m", [1, 13, 256])
@pytest.mark.parametrize("n", [72, 13])  # 13: dA reduces over an N that is not a multiple of 8
def test_autograd_matches_fp64(seed, b_transposed, m, n):
    k = 136
    a, b, c = _inputs(seed, m, n, k, torch.float16, b_transposed, True, grad=True)
    y = matmul(a, b, c, out_dtype=torch.float32, b_transposed=b_transposed)
    g = torch.randn(m, n, generator=torch.Generator("cuda").manual_seed(seed + 1), device="cuda")
    y.backward(g)
    a64, b64, c64 = (t.detach().double().requires_grad_() for t in (a, b, c))
    _reference(a64, b64, c64, b_transposed).backward(g.double())
    # dC is rounded to fp16 before the backward matmuls: one more rounding than the forward.
    for name, got, want, depth in (
        ("dA", a.grad, a64.grad, n),
        ("dB", b.grad, b64.grad, m),
        ("dbias", c.grad, c64.grad, m),
    ):
        tol = 2 * tolerance(torch.float16, depth=depth)
        assert_close(got, want, tol, where=f"{name} seed={seed}")
    if torch.cuda.get_device_capability() == (9, 0):
        # dB (rows, M8) = dCᵀ @ A or Aᵀ @ dC: its left operand is a transposed view, which the
        # Hopper kernel reads as it lies (a_transposed) where its rows are a multiple of 8.
        fm = importlib.import_module("spio.functional.matmul")
        rows, m8 = (n if b_transposed else k), m + (-m) % 8
        lhs = torch.empty(m8, rows, dtype=torch.float16, device="cuda").t()
        rhs = torch.empty(m8, k if b_transposed else n, dtype=torch.float16, device="cuda")
        plan = fm._PLANS.get(fm._key(lhs, rhs, None, None, False))
        assert plan is not None and plan.a_t == (rows % 8 == 0), (rows, m8)


def test_large_products_run_the_persistent_cluster_pick(seed, tmp_path):
    """A product whose 256-wide tiles fill two or more waves (2048 x 4352: 16 x 17 tiles) with B
    as (N, K): on sm_90 the op runs LARGE_PICK (persistent CTAs in clusters of two;
    `matmul_sm90.large_pick`), and with A a transposed view it runs that config without the
    cluster; both against fp64."""
    from spio.cuda import device_attributes
    from spio.kernels.matmul_params import MatmulParams

    k90 = importlib.import_module("spio.kernels.matmul_sm90")
    fm = importlib.import_module("spio.functional.matmul")
    m, n, k = 2048, 4352, 256
    a, b, c = _inputs(seed, m, n, k, torch.float16, True, True)
    a_view = a.t().contiguous().t()  # A's values, stored (K, M): read M-major (a_transposed)
    with override(disable_fallback=True):
        for lhs, where in ((a, "A (M, K)"), (a_view, "A a transposed view")):
            y = matmul(lhs, b, c, b_transposed=True)
            tol = tolerance(y.dtype, depth=k)
            assert_close(y, _reference(a, b, c, True), tol, where=f"{where} seed={seed}")
    if torch.cuda.get_device_capability() == (9, 0):
        p = MatmulParams(m, n, k, "float16", "float16", b_transposed=True, has_bias=True)
        dev = device_attributes(torch.cuda.current_device())
        with override(autotune=False, cache_dir=tmp_path):  # no autotune winner in the way
            assert fm.kernel_choice(p, dev) == ("sm90", k90.LARGE_PICK)
        plan = fm._PLANS.get(fm._key(a_view, b, c, None, True))
        assert plan is not None and plan.a_t, "A's transposed view is read as it lies"


@pytest.mark.parametrize("b_transposed", [False, True])  # on sm_90: the Hopper kernel, either
def test_cuda_graph_replay(seed, b_transposed):
    """A captured call replays on new values. With the Hopper kernel, A inside the capture is a
    fresh tensor (a clone made during capture): its tensor map is encoded during the capture and
    baked into the graph."""
    a, b, c = _inputs(seed, 64, 128, 256, b_transposed=b_transposed)
    y = matmul(a, b, c, b_transposed=b_transposed)  # compile + load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a_in = a.clone()  # an address the plan's map cache has not seen
        y = matmul(a_in, b, c, b_transposed=b_transposed)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    want = _reference(a, b, c, b_transposed)
    assert_close(y, want, tolerance(y.dtype, depth=256), where=f"graph b_transposed={b_transposed}")


def test_token_counts_do_not_compile(seed):
    a, b, c = _inputs(seed, 512, 4096, 1024, b_transposed=True)
    matmul(a, b, c, b_transposed=True)
    warm = {1 << i for i in range(14)}  # selection buckets M to powers of two: warm every bucket
    for m in sorted(warm):
        matmul(a[:1].expand(m, -1).contiguous(), b, c, b_transposed=True)
    with override(assert_no_compile=True):
        for m in (3, 100, 777, 4000):
            y = matmul(a[:m], b, c, b_transposed=True)
            assert_close(
                y, _reference(a[:m], b, c, True), tolerance(y.dtype, depth=1024), where=f"m={m}"
            )


def test_split_k_through_graphs_compile_streams_and_autograd(seed):
    """On sm_90 the op splits K at decode shapes (`matmul_sm90.heuristic`, swapped: fp32
    partials in a workspace the plan allocates per call, then the sum). That path against fp64
    replayed from a CUDA graph (twice, on other values), compiled, on a side stream, on two
    streams at once (each call its own workspace), and as the input gradient of a product with
    B as (K, N) (dA = dC @ B^T runs with B as (N, K): M 16, K 4096 splits too)."""
    import importlib

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("split-K is the sm_90 kernel's")
    fm = importlib.import_module("spio.functional.matmul")
    a, b, c = _inputs(seed, 16, 256, 4096, b_transposed=True)
    tol = tolerance(torch.bfloat16, depth=4096)
    y = matmul(a, b, c, b_transposed=True)
    plan = fm._PLANS.get(fm._key(a, b, c, None, True))  # the eager call's signature
    assert plan.workspace == (8 * 16 * 256,), plan.workspace  # 8 splits of 8 k tiles
    assert plan.launch._swap, "the decode pick runs swapped"
    assert_close(y, _reference(a, b, c, True), tol, where=f"split eager seed={seed}")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y_side = matmul(a, b, c, b_transposed=True)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(y_side, y), "split on a side stream: other bits"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a_in = a.clone()
        y_graph = matmul(a_in, b, c, b_transposed=True)
    a.copy_(torch.randn_like(a))
    a_in.copy_(a)
    graph.replay()
    torch.cuda.synchronize()
    assert_close(y_graph, _reference(a, b, c, True), tol, where=f"split graph seed={seed}")
    a_in.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(y_graph, _reference(a_in, b, c, True), tol, where=f"split graph 2 seed={seed}")
    want = matmul(a, b, c, b_transposed=True)
    streams = (torch.cuda.Stream(), torch.cuda.Stream())
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for i in range(40):  # both streams' launches overlap
        with torch.cuda.stream(streams[i % 2]):
            outs.append(matmul(a, b, c, b_transposed=True))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert all(torch.equal(o, want) for o in outs), "split on two streams at once: other bits"
    compiled = torch.compile(lambda a, b, c: matmul(a, b, c, b_transposed=True), fullgraph=True)
    assert torch.equal(compiled(a, b, c), matmul(a, b, c, b_transposed=True)), "compiled bits"
    # Forward B (K, N) = (256, 4096): dA = dC (16 x 4096) @ B^T, B read as (N, K) = (256, 4096).
    a2, b2, c2 = _inputs(seed + 1, 16, 4096, 256, torch.float16, False, True, grad=True)
    y2 = matmul(a2, b2, c2, out_dtype=torch.float32)
    g = torch.randn(16, 4096, generator=torch.Generator("cuda").manual_seed(seed + 2),
                    device="cuda")  # fmt: skip
    y2.backward(g)
    a64, b64, c64 = (t.detach().double().requires_grad_() for t in (a2, b2, c2))
    _reference(a64, b64, c64, False).backward(g.double())
    tol_da = 2 * tolerance(torch.float16, depth=4096)
    assert_close(a2.grad, a64.grad, tol_da, where=f"split dA seed={seed}")


@pytest.mark.parametrize(
    "m, n, k, b_transposed",
    [(777, 5000, 3000, True), (16, 4096, 4096, False), (300, 1001, 520, False)],
)
def test_autotune_picks_from_the_cost_models_ranking(seed, tmp_path, m, n, k, b_transposed):
    """Under SPIO_AUTOTUNE the sm_90 op measures `matmul_sm90.ranked` (a split tail and plain
    tiles at 777 x 5000 x 3000; split-K alternatives with their workspace and a row-major B at a
    decode shape; a row-major B whose rows the op pads, N odd), runs the fastest (against fp64)
    and persists it: a fresh selector reuses it."""
    from spio.cuda import device_attributes
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.matmul_params import MatmulParams
    from spio.select import Selector, default_selector

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm_90 kernel's selection")
    fm = importlib.import_module("spio.functional.matmul")
    dev = device_attributes(torch.cuda.current_device())
    p = MatmulParams(m, n, k, "bfloat16", "bfloat16", b_transposed=b_transposed, has_bias=True)
    a, b, c = _inputs(seed, m, n, k, b_transposed=b_transposed)
    with override(cache_dir=tmp_path, autotune=True):
        default_selector().clear()
        fm._PLANS.clear()
        try:
            y = matmul(a, b, c, b_transposed=b_transposed)
            key = ("matmul_sm90", p, dev.name)
            assert default_selector().sources[key] == "autotune"
            won = default_selector().select(k90.DEF, p, dev)  # this process's choice
            assert won in k90.ranked(p, dev), won
            fresh = Selector(store_dir=tmp_path / "selections")
            with override(autotune=False):
                assert fresh.select(k90.DEF, p, dev) == won and fresh.sources[key] == "autotune"
        finally:
            default_selector().clear()
            fm._PLANS.clear()
    tol = tolerance(torch.bfloat16, depth=k)
    assert_close(y, _reference(a, b, c, b_transposed), tol, where=f"autotuned {won} seed={seed}")
