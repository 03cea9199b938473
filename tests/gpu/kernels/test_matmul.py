"""matmul kernel on the GPU: configs against an fp64 reference from the same fp16/bf16 inputs.

Every launch writes into a NaN-poisoned C inside a NaN guard band (unwritten or out-of-bounds
stores fail), on ragged shapes (M, N in 1, 17, 255, 1000), small and large K, both B layouts,
bias and fp32 output. Shapes are runtime arguments, so each (config, flags) compiles once and is
checked on every shape.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from spio.kernels import matmul as mm
from spio.kernels.matmul import MatmulConfig, MatmulParams
from spio.settings import override, settings
from spio.testing import assert_close, poison, sample, tolerance

pytestmark = pytest.mark.gpu

# (m, n, k): ragged M and N, K from one 8-chunk to many k tiles (and not a multiple of BLOCK_K).
SHAPES = [(1, 1, 8), (17, 17, 24), (255, 1000, 72), (1000, 255, 1032), (130, 264, 4096)]
# (dtype, fp32 out, b_transposed, bias): every flag on and off, two at a time.
FLAG_SETS = [
    ("float16", False, False, False),
    ("bfloat16", True, True, True),
    ("float16", True, False, True),
    ("bfloat16", False, True, False),
]
ALL_FLAGS = list(
    itertools.product(("float16", "bfloat16"), (False, True), (False, True), (False, True))
)
GUARD = 64  # elements of NaN before and after C (a multiple of 16 bytes for every out dtype)


def _device():
    from spio.cuda import device_attributes

    return device_attributes(torch.cuda.current_device())


def _params(flags, m, n, k) -> MatmulParams:
    dtype, fp32_out, b_transposed, bias = flags
    out = "float32" if fp32_out else dtype
    return MatmulParams(m, n, k, dtype, out, b_transposed=b_transposed, has_bias=bias)


def check(p: MatmulParams, cfg: MatmulConfig, seed: int) -> None:
    """Launches (p, cfg) once on fresh random inputs and compares with the fp64 reference."""
    g = torch.Generator("cuda").manual_seed(seed)
    dt = getattr(torch, p.dtype)
    out_dt = getattr(torch, p.out_dtype)

    def rand(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(dt)

    a = rand(p.m, p.k)
    # Row-major B with n % 8 != 0 is passed padded to ldb columns; the padding holds random
    # values (not zeros) so a kernel that let them reach C would fail.
    ldb = p.k if p.b_transposed else p.n + (-p.n) % 8
    b_store = rand(p.n, p.k) if p.b_transposed else rand(p.k, ldb)
    b = b_store if p.b_transposed else b_store[:, : p.n]
    bias = rand(p.n) if p.has_bias else None
    buf = poison(torch.empty(GUARD + p.m * p.n + GUARD, dtype=out_dt, device="cuda"))
    c = buf[GUARD : GUARD + p.m * p.n].view(p.m, p.n)
    mm.launch(p, cfg, c, a, b_store, bias, ldb=ldb)
    torch.cuda.synchronize()
    where = f"{p} {cfg} seed={seed}"
    guard = torch.cat([buf[:GUARD], buf[GUARD + p.m * p.n :]])
    assert torch.isnan(guard).all(), f"{where}: stores outside C (guard band overwritten)"
    ref = mm.reference(a, b, bias, p.b_transposed)
    assert_close(c, ref, tolerance(out_dt, depth=p.k), where=where)


def _config_sample() -> list[MatmulConfig]:
    # A spread over the whole space (first and last kept), as many as the test indices below.
    limit = settings().max_test_params or 12
    return sample(mm.configs(_params(FLAG_SETS[1], 1, 1, 8), _device()), limit)


@pytest.mark.parametrize("flags", FLAG_SETS, ids=str)
@pytest.mark.parametrize("index", range(settings().max_test_params or 12))
def test_sampled_configs(index, flags, seed):
    cfgs = _config_sample()
    if index >= len(cfgs):
        pytest.skip(f"only {len(cfgs)} configs fit this GPU")
    for m, n, k in SHAPES:
        check(_params(flags, m, n, k), cfgs[index], seed)


@pytest.mark.parametrize("flags", ALL_FLAGS, ids=str)
def test_heuristic_config_every_flag_set(flags, seed):
    dev = _device()
    for m, n, k in SHAPES:
        p = _params(flags, m, n, k)
        check(p, mm.heuristic(p, dev), seed)


@pytest.mark.parametrize("raster", [1, 2, 3, 5, 64])
def test_rasterization_covers_every_tile(raster, seed):
    """Ragged groups (tiles_m not a multiple of raster) must still visit every tile once."""
    p = _params(FLAG_SETS[0], 5 * 64 - 3, 7 * 64 - 5, 64)
    cfg = MatmulConfig(64, 64, 32, 2, 2, 2, raster)
    check(p, cfg, seed)


def test_new_m_does_not_compile(seed):
    """Shapes are runtime arguments: after the first launch, other M/N/K reuse the variant."""
    dev = _device()
    cfg = mm.heuristic(_params(FLAG_SETS[1], 4096, 4096, 4096), dev)
    check(_params(FLAG_SETS[1], 64, 128, 64), cfg, seed)
    with override(assert_no_compile=True):
        for m in (1, 7, 333, 2048):
            check(_params(FLAG_SETS[1], m, 200, 136), cfg, seed)


def test_large_square(seed):
    p = MatmulParams(2048, 2048, 2048, "bfloat16", "bfloat16")
    check(p, mm.heuristic(p, _device()), seed)


@pytest.mark.slow
@pytest.mark.parametrize("flags", ALL_FLAGS, ids=str)
def test_every_config_every_flag_set(flags, seed):
    dev = _device()
    for cfg in mm.configs(_params(flags, 1, 1, 8), dev):
        for m, n, k in SHAPES:
            check(_params(flags, m, n, k), cfg, seed)
