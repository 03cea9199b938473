"""Programmatic dependent launch (PDL) on the GPU (sm_90+; most tests skip below).

- The binding: a producer/consumer pair where the consumer, launched with pdl=True, starts
  while the producer still runs (globaltimer stamps) and still reads every value the producer
  wrote after `griddepcontrol.wait`; the same pair captured in a CUDA graph and replayed.
- The ops: layernorm_2d's backward and conv2d_gw8's weight gradient give bitwise the same
  results with PDL on (SPIO_PDL=1) and off (SPIO_PDL=0), over several fresh inputs (so a
  reduce that read stale partials of the previous input would show), eager and replayed from
  a captured CUDA graph.

SPIO_PDL is read when a kernel is loaded, so `_pdl(on)` clears the default function cache.
"""

from __future__ import annotations

import contextlib
import functools

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module, device_attributes, driver_version  # noqa: E402
from spio.kernels.loader import PDL_MIN_DRIVER, default_function_cache  # noqa: E402
from spio.settings import override  # noqa: E402

pytestmark = pytest.mark.gpu

CL = torch.channels_last


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def _pdl_capable() -> bool:
    version = driver_version() if torch.cuda.is_available() else None
    return _sm90() and version is not None and version >= PDL_MIN_DRIVER


def _skip_without_pdl():
    if not _sm90():
        pytest.skip("PDL needs compute capability 9.0+ (griddepcontrol)")
    if not _pdl_capable():
        pytest.skip(f"PDL needs a driver of CUDA {PDL_MIN_DRIVER} or newer, got {driver_version()}")


@contextlib.contextmanager
def _pdl(on: bool):
    """SPIO_PDL=on for kernels loaded inside (the loaded-kernel cache and the ops' launch plans,
    which hold loaded kernels, are cleared both ways)."""
    from spio.functional import clear_plans

    default_function_cache().clear()
    clear_plans()
    try:
        with override(pdl=on):
            yield
    finally:
        default_function_cache().clear()
        clear_plans()


# ---- the binding: a producer/consumer pair ---------------------------------------------------

PAIR = r"""
__device__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Lets its dependents launch at once, spins `spin_ns`, then writes data[i] = i + 1 and stamps
// its end (max over CTAs) in stamps[0].
extern "C" __global__ void producer(unsigned long long* stamps, float* data, int n,
                                    long long spin_ns) {
    asm volatile("griddepcontrol.launch_dependents;");
    const unsigned long long t0 = now();
    while (now() - t0 < (unsigned long long)spin_ns) {}
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        data[i] = (float)(i + 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(&stamps[0], now());
}

// Stamps its start (min over CTAs) in stamps[1] before waiting, then copies data to out.
extern "C" __global__ void consumer(unsigned long long* stamps, float* data, float* out, int n) {
    if (threadIdx.x == 0) atomicMin(&stamps[1], now());
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = __ldcg(data + i);
    }
}
"""

N = 1 << 20
SPIN_NS = 200_000  # 200 us: long enough that an early consumer start is unmistakable


@functools.cache
def _pair():
    module = Module.load(spio_compile(PAIR, arch=device_attributes().arch, name="pdl_pair.cu"))
    return module.function("producer", signature="ppil"), module.function("consumer", "pppi")


def _buffers():
    stamps = torch.tensor([0, 2**63 - 1], dtype=torch.int64, device="cuda")
    data = torch.full((N,), float("nan"), device="cuda")
    out = torch.full((N,), float("nan"), device="cuda")
    return stamps, data, out


def _run_pair(stamps, data, out, stream: int, pdl: bool) -> None:
    producer, consumer = _pair()
    producer.launch(8, 128, (stamps, data, N, SPIN_NS), stream=stream)  # 8 CTAs: room left
    consumer.launch(132, 256, (stamps, data, out, N), stream=stream, pdl=pdl)


def _expected():
    return torch.arange(1, N + 1, dtype=torch.float32, device="cuda")


@pytest.mark.parametrize("where", ["side stream", "current stream"])
@pytest.mark.parametrize("pdl", [True, False])
def test_consumer_sees_producer_memory(where, pdl, record_property):
    _skip_without_pdl()
    stamps, data, out = _buffers()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    stream = side if where == "side stream" else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        _run_pair(stamps, data, out, stream.cuda_stream, pdl)
    torch.cuda.synchronize()
    assert torch.equal(out, _expected()), f"{where}, pdl={pdl}: consumer read stale data"
    end, start = (int(v) for v in stamps.tolist())
    overlap_us = (end - start) / 1e3  # > 0: the consumer started before the producer ended
    record_property("consumer_start_before_producer_end_us", overlap_us)
    print(f"{where}, pdl={pdl}: consumer started {overlap_us:.1f} us before the producer ended")
    if not pdl:
        assert overlap_us <= 0, "without PDL the consumer must start after the producer ends"
    elif where == "side stream":
        # PDL is opportunistic, but with the trigger at the producer's entry, 200 us of spin and
        # an idle GPU the consumer is scheduled long before the producer ends.
        assert overlap_us > SPIN_NS / 2e3, f"PDL launch did not overlap ({overlap_us:.1f} us)"


def test_pair_in_a_captured_graph():
    _skip_without_pdl()
    stamps, data, out = _buffers()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _run_pair(stamps, data, out, side.cuda_stream, True)  # loads outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _run_pair(stamps, data, out, torch.cuda.current_stream().cuda_stream, True)
    for _ in range(3):
        data.fill_(float("nan"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, _expected()), "replayed PDL pair read stale data"


# ---- the ops: bitwise the same with PDL on and off ------------------------------------------

LN_SHAPES = [  # (N, C, H, W): the C512 7x7 and C256 14x14 (smaller N), a ragged C96
    (16, 512, 7, 7),
    (8, 256, 14, 14),
    (3, 96, 5, 7),
]
REPS = 4  # fresh inputs per mode: the partial buffers of one hold the previous input's values


def _ln_inputs(shape, dtype, seed, affine):
    from spio.functional import layernorm_2d  # noqa: F401  (registers the op)

    g = torch.Generator("cuda").manual_seed(seed)
    n, c, h, w = shape
    x = (3 + torch.randn(shape, generator=g, device="cuda")).to(dtype).contiguous(memory_format=CL)
    dy = torch.randn(shape, generator=g, device="cuda").to(dtype).contiguous(memory_format=CL)
    wt = torch.randn(c, generator=g, device="cuda").to(dtype) if affine[0] else None
    b = torch.randn(c, generator=g, device="cuda").to(dtype) if affine[1] else None
    return x, dy, wt, b


def _ln_backward(x, dy, wt, b):
    y, mean, rstd = torch.ops.spio.layernorm_2d(x, wt, b, 1e-6)
    return torch.ops.spio.layernorm_2d_backward(dy, x, mean, rstd, wt, b)


def _assert_bitwise(on, off, what):
    for i, (a, e) in enumerate(zip(on, off, strict=True)):
        assert a.shape == e.shape and a.dtype == e.dtype, f"{what}: output {i} differs in kind"
        assert torch.equal(a, e), (
            f"{what}: output {i} differs with PDL on vs off "
            f"({(a != e).sum().item()} of {a.numel()} elements)"
        )


def _reduce_loaded_with_pdl(family) -> bool:
    """Whether every loaded variant of `family` in the default cache launches with PDL."""
    loaded = [v for key, v in default_function_cache().items() if key[0] == family]
    assert loaded, f"no {family} kernel was loaded"
    return all(v.pdl for v in loaded)


@pytest.mark.parametrize("shape", LN_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("affine", [(True, True), (False, True)], ids=["wb", "b"])
def test_layernorm_backward_bitwise_with_and_without_pdl(shape, dtype, affine, seed):
    _skip_without_pdl()
    inputs = [_ln_inputs(shape, dtype, seed + r, affine) for r in range(REPS)]
    with _pdl(False):
        off = [_ln_backward(*i) for i in inputs]
        assert not _reduce_loaded_with_pdl("layernorm_2d_bwd_reduce")
    with _pdl(True):
        on = [_ln_backward(*i) for i in inputs]
        assert _reduce_loaded_with_pdl("layernorm_2d_bwd_reduce")
    torch.cuda.synchronize()
    for r in range(REPS):
        _assert_bitwise(on[r], off[r], f"layernorm_2d backward {shape} {dtype} rep {r}")


CONV_SHAPES = [  # (N, C, H, W, R, S): the C64 56x56 k3 and C512 7x7 k7, a ragged one
    (8, 64, 56, 56, 3, 3),
    (8, 512, 7, 7, 7, 7),
    (3, 16, 9, 13, 3, 5),
]


def _conv_inputs(shape, dtype, seed):
    from spio.functional import conv2d_gw8  # noqa: F401  (registers the ops)

    g = torch.Generator("cuda").manual_seed(seed)
    n, c, h, w, r, s = shape
    x = torch.randn((n, c, h, w), generator=g, device="cuda").to(dtype)
    dy = torch.randn((n, c, h, w), generator=g, device="cuda").to(dtype)  # "same" padding
    return x.contiguous(memory_format=CL), dy.contiguous(memory_format=CL), [r, s], [r // 2, s // 2]


def _wgrad(x, dy, rs, pads):
    return torch.ops.spio.conv2d_gw8_wgrad(x, dy, rs, pads, True)


@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_conv2d_gw8_wgrad_bitwise_with_and_without_pdl(shape, dtype, seed):
    _skip_without_pdl()
    inputs = [_conv_inputs(shape, dtype, seed + r) for r in range(REPS)]
    with _pdl(False):
        off = [_wgrad(*i) for i in inputs]
        assert not _reduce_loaded_with_pdl("conv2d_gw8_wgrad_reduce")
    with _pdl(True):
        on = [_wgrad(*i) for i in inputs]
        assert _reduce_loaded_with_pdl("conv2d_gw8_wgrad_reduce")
    torch.cuda.synchronize()
    for r in range(REPS):
        _assert_bitwise(on[r], off[r], f"conv2d_gw8 wgrad {shape} {dtype} rep {r}")


def _graph_of(step):
    """(graph, static outputs) of step() captured on a side stream, after one eager warm-up."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compiles and loads every kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    return graph, static


def test_ops_in_a_captured_graph_with_pdl(seed):
    """Both two-pass ops captured with PDL on, replayed on new inputs: bitwise the eager results
    with PDL off."""
    _skip_without_pdl()
    ln = _ln_inputs((16, 512, 7, 7), torch.float16, seed, (True, True))
    cv = _conv_inputs((8, 64, 56, 56, 3, 3), torch.float16, seed)
    with _pdl(True):
        graph, static = _graph_of(lambda: (*_ln_backward(*ln), *_wgrad(*cv)))
        assert _reduce_loaded_with_pdl("layernorm_2d_bwd_reduce")
        assert _reduce_loaded_with_pdl("conv2d_gw8_wgrad_reduce")
        fresh_ln = _ln_inputs((16, 512, 7, 7), torch.float16, seed + 1, (True, True))
        fresh_cv = _conv_inputs((8, 64, 56, 56, 3, 3), torch.float16, seed + 1)
        for dst, src in zip((*ln, *cv[:2]), (*fresh_ln, *fresh_cv[:2]), strict=True):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        del graph  # before its kernels' modules unload (the cache is cleared on leaving)
    with _pdl(False):
        eager = (*_ln_backward(*ln), *_wgrad(*cv))
    torch.cuda.synchronize()
    _assert_bitwise(static, eager, "graph replay with PDL vs eager without")
