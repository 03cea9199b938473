"""GPU tests of the device building blocks (spio/include/spio/{mma,fragment,ldmatrix,...}.h).

Each test compiles a tiny kernel from tests/gpu/data/gpu_blocks/ with spio.compiler for this GPU's
arch, launches it with spio.cuda on torch's current stream, and checks it against torch on fresh
random inputs from the `seed` fixture. The mma tests go through the typed fragments' (row, col)
mapping, so they also validate fragment.h's layout tables (a wrong row or column of any element
gives an O(1) error, far above the tolerance).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import Module  # noqa: E402
from spio.testing import assert_close, poison, sample, tolerance  # noqa: E402

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "gpu_blocks"
DTYPES = {"__half": torch.float16, "__nv_bfloat16": torch.bfloat16}


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


@functools.cache
def _function(stem: str, entry: str, signature: str, defines: tuple[tuple[str, object], ...]):
    source = (DATA / f"{stem}.cu").read_text()
    options = tuple(f"-D{k}={v}" for k, v in defines)
    cubin = spio_compile(source, arch=_arch(), options=options, name=f"{stem}.cu")
    module = Module.load(cubin)
    return module, module.function(entry, signature=signature)


def _launch(stem, entry, signature, defines, grid, block, args, smem=0):
    _module, fn = _function(stem, entry, signature, tuple(sorted(defines.items())))
    fn.launch(grid, block, args, smem=smem, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator("cuda").manual_seed(seed)


# --- mma + fragments --------------------------------------------------------------------------

MMA_CASES = sample([(t, k, load) for t in DTYPES for k in (16, 8) for load in (0, 1, 2)])


@pytest.mark.parametrize("type_name, k, load", MMA_CASES, ids=lambda v: str(v))
def test_mma_fragments(type_name, k, load, seed):
    """D = C + A B for one m16n8k{k} mma; load 0: element mapping, 1: ldmatrix, 2: .trans."""
    dtype = DTYPES[type_name]
    g = _gen(seed)
    a = torch.randn(16, k, generator=g, device="cuda").to(dtype)
    b = torch.randn(k, 8, generator=g, device="cuda").to(dtype)
    c = torch.randn(16, 8, generator=g, device="cuda")
    ref = c.double() + a.double() @ b.double()
    d = poison(torch.empty(16, 8, device="cuda"))
    defines = {"SPIO_T": type_name, "SPIO_K": k, "SPIO_LOAD": load}
    _launch("mma", "mma_test", "pppp", defines, (1, 1, 1), (32, 1, 1), [d, c, a, b])
    # Tensor cores add the exact fp16/bf16 products with truncating fp32 alignment, so allow a
    # larger constant than round-to-nearest accumulation needs; a layout error is O(1).
    tol = tolerance(torch.float32, depth=k + 1, c=16.0)
    assert_close(d, ref, tol, where=f"mma m16n8k{k} {type_name} load={load} seed={seed}")


# --- ldmatrix ---------------------------------------------------------------------------------

LDMATRIX_CASES = sample([(x, trans) for x in (1, 2, 4) for trans in (0, 1)])


def _ldmatrix_expected(src: torch.Tensor, x: int, trans: int) -> torch.Tensor:
    """Register i of lane l: matrix i, row l/4, cols 2(l%4), 2(l%4)+1 (transposed for .trans)."""
    m = src.view(x, 8, 8).long() & 0xFFFF
    lane = torch.arange(32, device=src.device)
    g, t = lane // 4, lane % 4
    out = torch.empty(32, x, dtype=torch.long, device=src.device)
    for i in range(x):
        if trans:
            lo, hi = m[i, 2 * t, g], m[i, 2 * t + 1, g]
        else:
            lo, hi = m[i, g, 2 * t], m[i, g, 2 * t + 1]
        out[:, i] = lo | (hi << 16)
    return out


@pytest.mark.parametrize("x, trans", LDMATRIX_CASES, ids=lambda v: str(v))
def test_ldmatrix(x, trans, seed):
    src = torch.randint(
        -(2**15), 2**15, (x * 64,), generator=_gen(seed), device="cuda", dtype=torch.int32
    ).to(torch.int16)
    out = torch.full((32, x), -1, dtype=torch.int32, device="cuda")  # sentinel: 0xFFFFFFFF
    _launch(
        "ldmatrix",
        "ldmatrix_test",
        "pp",
        {"SPIO_X": x, "SPIO_TRANS": trans},
        (1, 1, 1),
        (32, 1, 1),
        [out, src],
    )
    got = out.long() & 0xFFFFFFFF
    want = _ldmatrix_expected(src, x, trans)
    bad = (got != want).nonzero()
    assert bad.numel() == 0, (
        f"ldmatrix x{x} trans={trans} seed={seed}: {bad.shape[0]} wrong registers, first "
        f"(lane, reg) {bad[:8].tolist()}: got {[hex(int(got[tuple(i)])) for i in bad[:8]]} "
        f"want {[hex(int(want[tuple(i)])) for i in bad[:8]]}"
    )


# --- cp.async ---------------------------------------------------------------------------------

COPY_CASES = sample([(nbytes, n) for nbytes in (16, 8, 4) for n in (1, 37, 1024)])


@pytest.mark.parametrize("nbytes, n", COPY_CASES, ids=lambda v: str(v))
def test_cp_async_zero_fill(nbytes, n, seed):
    g = _gen(seed)
    src = torch.randint(1, 256, (n, nbytes), generator=g, device="cuda", dtype=torch.int32)
    src = src.to(torch.uint8)  # no zero bytes: a zero in the output means zero-filled
    mask = torch.randint(0, 2, (n,), generator=g, device="cuda", dtype=torch.int32)
    mask[0] = 0  # at least one masked and one unmasked chunk when n > 1
    mask[-1] = 1 if n > 1 else 0
    out = torch.full((n, nbytes), 0xCD, dtype=torch.uint8, device="cuda")
    _launch(
        "async_copy",
        "async_copy_test",
        "pppi",
        {"SPIO_BYTES": nbytes},
        (1, 1, 1),
        (256, 1, 1),
        [out, src, mask, n],
    )
    want = torch.where(mask[:, None].bool(), src, torch.zeros_like(src))
    bad = (out != want).any(dim=1).nonzero().flatten()
    assert bad.numel() == 0, (
        f"cp_async_{nbytes} n={n} seed={seed}: chunks {bad[:8].tolist()} wrong "
        f"(mask {mask[bad[:8]].tolist()}): got {out[bad[:2]].tolist()} "
        f"want {want[bad[:2]].tolist()}"
    )


# --- pipeline ---------------------------------------------------------------------------------

PIPELINE_CASES = sample([(s, tiles) for s in (2, 3, 4) for tiles in (0, 1, 2, 3, 5, 64)])


@pytest.mark.parametrize("stages, tiles", PIPELINE_CASES, ids=lambda v: str(v))
def test_pipeline(stages, tiles, seed):
    src = torch.randn(max(tiles, 1), 256, generator=_gen(seed), device="cuda")
    out = poison(torch.empty(64, device="cuda"))
    _launch(
        "pipeline",
        "pipeline_test",
        "ppi",
        {"SPIO_STAGES": stages},
        (1, 1, 1),
        (64, 1, 1),
        [out, src, tiles],
    )
    t = torch.arange(64, device="cuda", dtype=torch.long)
    ref = torch.zeros(64, dtype=torch.float64, device="cuda")
    s64 = src.double().view(-1, 64, 4)
    for k in range(tiles):
        ref += (k % 5 + 1) * s64[k, (7 * t + k) % 64].sum(dim=1)
    if tiles == 0:
        assert torch.equal(out, torch.zeros_like(out)), f"Pipeline<{stages}> with 0 tiles: {out}"
        return
    tol = tolerance(torch.float32, depth=4 * tiles)
    assert_close(out, ref, tol, where=f"Pipeline<{stages}> tiles={tiles} seed={seed}")


# --- reductions -------------------------------------------------------------------------------

REDUCE_CASES = sample([1, 2, 4, 8, 32])


@pytest.mark.parametrize("warps", REDUCE_CASES)
def test_reductions(warps, seed):
    blocks = 40
    threads = 32 * warps
    x = torch.randn(blocks * threads, generator=_gen(seed), device="cuda") * 3.0 + 1.0
    warp_out = poison(torch.empty(blocks * warps, 5, device="cuda"))
    block_out = poison(torch.empty(blocks, 2, device="cuda"))
    _launch(
        "reduce",
        "reduce_test",
        "ppp",
        {"SPIO_WARPS": warps},
        (blocks, 1, 1),
        (threads, 1, 1),
        [warp_out, block_out, x],
    )
    xw = x.double().view(-1, 32)
    where = f"warps={warps} seed={seed}"
    tol = tolerance(torch.float32, depth=32)
    assert_close(warp_out[:, 0], xw.sum(1), tol, where=f"warp::sum {where}")
    assert torch.equal(warp_out[:, 1], x.view(-1, 32).max(1).values), f"warp::max {where}"
    assert torch.equal(warp_out[:, 2], torch.full_like(warp_out[:, 2], 32.0)), f"count {where}"
    # The mean's rounding error scales with the data (|x| up to ~13), not with |mean| (~1).
    mean = xw.mean(1)
    tol_mean = tol * xw.abs().max().item() / mean.abs().max().item()
    assert_close(warp_out[:, 3], mean, tol_mean, where=f"warp::welford mean {where}")
    m2 = ((xw - xw.mean(1, keepdim=True)) ** 2).sum(1)
    assert_close(warp_out[:, 4], m2, tol, where=f"warp::welford M2 {where}")
    xb = x.double().view(blocks, threads)
    assert_close(
        block_out[:, 0],
        xb.sum(1),
        tolerance(torch.float32, depth=threads),
        where=f"block::sum {where}",
    )
    assert torch.equal(block_out[:, 1], x.view(blocks, threads).max(1).values), (
        f"block::max {where}"
    )


# --- vectors ----------------------------------------------------------------------------------

VECTOR_CASES = sample([(t, n) for t in DTYPES for n in (1, 1000)])


@pytest.mark.parametrize("type_name, n", VECTOR_CASES, ids=lambda v: str(v))
def test_vector_conversions(type_name, n, seed):
    dtype = DTYPES[type_name]
    g = _gen(seed)
    x = (torch.randn(n * 8, generator=g, device="cuda") * 10).to(dtype)
    f = torch.randn(n * 8, generator=g, device="cuda") * 10
    widened = poison(torch.empty(n * 8, device="cuda"))
    narrowed = poison(torch.empty(n * 8, dtype=dtype, device="cuda"))
    copied = poison(torch.empty(n * 8, dtype=dtype, device="cuda"))
    _launch(
        "vector",
        "vector_test",
        "pppppi",
        {"SPIO_T": type_name},
        ((n + 127) // 128, 1, 1),
        (128, 1, 1),
        [widened, narrowed, copied, x, f, n],
    )
    where = f"Vec8<{type_name}> n={n} seed={seed}"
    assert torch.equal(widened, x.float()), f"to_float is exact: {where}"
    assert torch.equal(narrowed, f.to(dtype)), f"from_float rounds to nearest even: {where}"
    assert torch.equal(copied.view(torch.int16), x.view(torch.int16)), f"16-byte copy: {where}"


# --- the typed layer end to end ---------------------------------------------------------------

TYPED_CASES = sample([(t, kdim, s) for t in DTYPES for kdim in (16, 64, 256) for s in (2, 3, 4)])


@pytest.mark.parametrize("type_name, kdim, stages", TYPED_CASES, ids=lambda v: str(v))
def test_typed_matmul(type_name, kdim, stages, seed):
    """Typed tensors + SmemAllocator + Pipeline + fragments: C = A B for a 16 x kdim x 8 tile."""
    dtype = DTYPES[type_name]
    g = _gen(seed)
    a = torch.randn(16, kdim, generator=g, device="cuda").to(dtype)
    b = torch.randn(kdim, 8, generator=g, device="cuda").to(dtype)
    ref = a.double() @ b.double()
    defines = {"SPIO_T": type_name, "SPIO_KDIM": kdim, "SPIO_STAGES": stages}
    smem = torch.zeros(1, dtype=torch.int32, device="cuda")
    _launch("typed_matmul", "smem_bytes", "p", defines, 1, 1, [smem])
    smem_bytes = int(smem.item())
    assert smem_bytes == stages * (16 * 16 + 16 * 8) * 2, (
        f"smem_bytes<SmemA, SmemB>() = {smem_bytes}"
    )
    c = poison(torch.empty(16, 8, device="cuda"))
    _launch("typed_matmul", "typed_matmul", "ppp", defines, 1, 32, [c, a, b], smem=smem_bytes)
    tol = tolerance(torch.float32, depth=kdim, c=16.0)  # see test_mma_fragments
    assert_close(
        c, ref, tol, where=f"typed_matmul {type_name} K={kdim} stages={stages} seed={seed}"
    )
