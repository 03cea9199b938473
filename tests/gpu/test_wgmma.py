"""GPU test of spio/wgmma.h: one warpgroup's D (64 x N, fp32) = A (64 x K) B (K x N) through chains
of wgmma m64nNk16 on shared-memory descriptors (tests/gpu/data/wgmma_probe.cu): no swizzle with
K = 32 (N = 64, 128, 256) and the 128-byte swizzle with K = 64 (N = 16, 32, 64, 128), fp16 and
bf16, against an fp64 product of the same inputs; also with the operands brought in by cp.async.bulk
and by TMA tensor maps (spio/tma.h). The output is NaN-poisoned
so an accumulator the layout misses fails. Needs an sm_90 GPU (the probe is built for sm_90a).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module  # noqa: E402
from spio.testing import tolerance  # noqa: E402

pytestmark = pytest.mark.gpu

SOURCE = (Path(__file__).parent / "data" / "wgmma_probe.cu").read_text()
DTYPES = {"__half": torch.float16, "__nv_bfloat16": torch.bfloat16}


@functools.cache
def _module(type_name: str):
    cubin = spio_compile(
        SOURCE, "sm_90a", options=(f"-DSPIO_T={type_name}",), name="wgmma_probe.cu"
    )
    return Module.load(cubin)


@pytest.mark.parametrize("type_name", list(DTYPES))
@pytest.mark.parametrize(
    "kernel, n, k",
    [
        ("wgmma_probe_64", 64, 32),
        ("wgmma_probe_128", 128, 32),
        ("wgmma_probe_256", 256, 32),
        ("wgmma_probe_sw128_16", 16, 64),
        ("wgmma_probe_sw128_32", 32, 64),
        ("wgmma_probe_sw128_64", 64, 64),
        ("wgmma_probe_sw128_128", 128, 64),
    ],  # fmt: skip
)
def test_wgmma_probe(type_name, kernel, n, k, seed):
    """No swizzle (K = 32) and the 128-byte swizzle TMA writes (K = 64)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma is sm_90a)")
    dtype = DTYPES[type_name]
    g = torch.Generator("cuda").manual_seed(seed)
    a = torch.randn(64, k, generator=g, device="cuda").to(dtype)
    bt = torch.randn(n, k, generator=g, device="cuda").to(dtype)
    out = torch.full((64, n), float("nan"), device="cuda")
    fn = _module(type_name).function(kernel, signature="ppp")
    fn.launch(1, 128, (out, a, bt), stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    want = a.double() @ bt.double().t()
    assert not torch.isnan(out).any(), (
        f"{kernel} {type_name} seed={seed}: {int(torch.isnan(out).sum())} outputs never written, "
        f"first at {torch.isnan(out).nonzero()[:8].tolist()}"
    )
    err = (out.double() - want).abs().max().item() / want.abs().max().item()
    tol = tolerance(torch.float32, depth=k)  # products exact in fp32, k terms summed in fp32
    assert err <= tol, f"{kernel} {type_name} seed={seed}: max rel err {err:.3e} > {tol:.3e}"


def _core_order(t: torch.Tensor) -> torch.Tensor:
    """A (rows x k) row-major operand in the no-swizzle core-matrix order of wgmma_probe.cu:
    8x8 cores, core (r / 8, k / 8) at ((r / 8) (k / 8 per row) + k / 8) 64 elements."""
    rows, k = t.shape
    return t.view(rows // 8, 8, k // 8, 8).permute(0, 2, 1, 3).contiguous()


@pytest.mark.parametrize("type_name", list(DTYPES))
def test_bulk_copied_operands(type_name, seed):
    """A and B brought into shared memory by cp.async.bulk on an mbarrier, then the wgmma."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma is sm_90a)")
    dtype, n, k = DTYPES[type_name], 128, 32
    g = torch.Generator("cuda").manual_seed(seed)
    a = torch.randn(64, k, generator=g, device="cuda").to(dtype)
    bt = torch.randn(n, k, generator=g, device="cuda").to(dtype)
    out = torch.full((64, n), float("nan"), device="cuda")
    fn = _module(type_name).function("bulk_wgmma_probe_128", signature="ppp")
    stream = torch.cuda.current_stream().cuda_stream
    fn.launch(1, 128, (out, _core_order(a), _core_order(bt)), stream=stream)
    torch.cuda.synchronize()
    _assert_product(out, a, bt, f"bulk {type_name} seed={seed}")


@pytest.mark.parametrize("type_name", list(DTYPES))
def test_tma_loaded_operands(type_name, seed):
    """A (64 x 64) and B^T (128 x 64), row-major in global memory, brought in by TMA tensor maps
    with the 128-byte swizzle (spio/tma.h, spio.cuda.tensor_map), then the swizzled wgmma: the
    Hopper matmul's main-loop step."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma is sm_90a)")
    from spio.cuda.tensor_map import tiled

    dtype, n, k = DTYPES[type_name], 128, 64
    g = torch.Generator("cuda").manual_seed(seed)
    a = torch.randn(64, k, generator=g, device="cuda").to(dtype)
    bt = torch.randn(n, k, generator=g, device="cuda").to(dtype)
    name = str(dtype).removeprefix("torch.")
    maps = [tiled(t.data_ptr(), name, t.shape, t.stride(), t.shape, swizzle=128) for t in (a, bt)]
    out = torch.full((64, n), float("nan"), device="cuda")
    fn = _module(type_name).function("tma_wgmma_probe_128", signature="ptt")
    fn.launch(1, 128, (out, *maps), stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    _assert_product(out, a, bt, f"tma {type_name} seed={seed}")


def _assert_product(out: torch.Tensor, a: torch.Tensor, bt: torch.Tensor, what: str) -> None:
    """out (fp32) is a @ bt.T within fp32 summation error, every element written."""
    want = a.double() @ bt.double().t()
    missing = int(torch.isnan(out).sum())
    assert not missing, f"{what}: {missing} outputs never written"
    err = (out.double() - want).abs().max().item() / want.abs().max().item()
    tol = tolerance(torch.float32, depth=a.shape[1])
    assert err <= tol, f"{what}: max rel err {err:.3e} > {tol:.3e}"
