"""Tensor-core matmul family: config space, heuristic, kernel spec, launch and fp64 reference.

The kernel is `spio/src/matmul.cu`; its header comment states the tiling, traffic and bound.
"""

from __future__ import annotations

from typing import Any

from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats
from spio.kernels.matmul_params import (
    BLOCK_KS,
    BLOCK_MN,
    ITEMSIZE,
    RASTERS,
    STAGE_COUNTS,
    WARP_TILES,
    MatmulConfig,
    MatmulParams,
)

__all__ = [
    "DEF",
    "MatmulConfig",
    "MatmulParams",
    "configs",
    "examples",
    "features",
    "grid",
    "heuristic",
    "launch",
    "reference",
    "spec",
    "stats",
]

OUT_KINDS = {"float16": 0, "bfloat16": 1, "float32": 2}


def configs(p: MatmulParams, dev: Any) -> list[MatmulConfig]:
    """Every valid config for p on dev, in a stable order (smallest tiles first).

    A config is valid when its warp tile is 32 or 64 in M and N, it has 2..8 warps, its loads
    split evenly over the threads and its shared memory (pipeline ring, or the C staging tile of
    p.out_dtype) fits the device's opt-in limit. 64 x 64 warp tiles take block_k 64 only in
    8-warp CTAs (128 x 256, 256 x 128): the kernel keeps two k16 steps of fragments live, which
    fits 255 registers there in every variant, but not in every variant of the smaller CTAs. The
    shape does not restrict the space (shapes are runtime arguments); the heuristic and the model
    weigh it.
    """
    out: list[MatmulConfig] = []
    limit = dev.max_smem_per_block_optin
    for block_m in BLOCK_MN:
        for block_n in BLOCK_MN:
            for warp_m in WARP_TILES:
                for warp_n in WARP_TILES:
                    if block_m % warp_m or block_n % warp_n:
                        continue
                    warps_m, warps_n = block_m // warp_m, block_n // warp_n
                    if not 2 <= warps_m * warps_n <= 8:
                        continue
                    for block_k in BLOCK_KS:
                        if warp_m * warp_n == 64 * 64 and block_k == 64 and warps_m * warps_n < 8:
                            # 128 accumulators + two k16 steps of fragments sit at 248-255
                            # registers; measured (NVRTC, sm_80/sm_90, every flag variant and
                            # stage count): the 8-warp CTAs have no local memory, smaller CTAs
                            # spill in some variants (256x64x64, 2 stages, B transposed: 8 B).
                            continue
                        for stages in STAGE_COUNTS:
                            for raster in RASTERS:
                                try:
                                    cfg = MatmulConfig(
                                        block_m, block_n, block_k, warps_m, warps_n, stages, raster
                                    )
                                except ValueError:
                                    continue
                                if cfg.smem(p) > limit:
                                    continue
                                out.append(cfg)
    return out


# Heuristic preference: (block_m, block_n, warps_m, warps_n), biggest first. 128 x 256 with 2 x 4
# warps of 64 x 64 gives the best operand reuse (each smem byte feeds 64 FLOP-pairs per warp) when
# the problem has enough tiles to fill the GPU; smaller tiles keep all SMs busy on small problems.
_PREFERENCE = ((128, 256, 2, 4), (128, 128, 2, 2), (64, 128, 2, 2), (64, 64, 2, 2))


def heuristic(p: MatmulParams, dev: Any) -> MatmulConfig:
    """The config used without a performance model (reasoned from the SASS, not yet tuned on a GPU).

    Picks the biggest tile of `_PREFERENCE` that still yields at least one CTA per SM (a full
    wave); if none does, the smallest. Then block_k 64 (four k16 steps per barrier and cp.async
    issue instead of two; no spills since only two k16 steps of fragments are live) with the
    deepest pipeline (4, 3, 2 stages) whose shared memory fits the opt-in limit, else block_k 32
    likewise; raster width 8 (8 M-tiles swept across N keeps 8 * block_m rows of A and one column
    strip of B hot in L2). A ring of 3 stages is the least worth keeping block_k 64 for: two
    stages of 64 leave one tile in flight, so block_k 32 with 4 stages (three) is preferred then.
    """
    choice = _PREFERENCE[-1]
    for bm, bn, wm, wn in _PREFERENCE:
        tiles = -(-p.m // bm) * -(-p.n // bn)
        if tiles >= dev.sm_count:
            choice = (bm, bn, wm, wn)
            break
    bm, bn, wm, wn = choice
    for block_k, stages in ((64, 4), (64, 3), (32, 4), (32, 3), (32, 2)):
        cfg = MatmulConfig(bm, bn, block_k, wm, wn, stages, 8)
        if cfg.smem(p) <= dev.max_smem_per_block_optin:
            return cfg
    raise ValueError(
        f"matmul heuristic: no config fits {dev.max_smem_per_block_optin} bytes of "
        f"shared memory on {dev.name}"
    )


def grid(p: MatmulParams, cfg: MatmulConfig) -> tuple[int, int, int]:
    tm, tn = cfg.tiles(p)
    return (tm * tn, 1, 1)


def _smem_specs(p: MatmulParams, cfg: MatmulConfig) -> dict[str, Any]:
    """Typed dims and the shared-memory tensors of the kernel (swizzles are part of the types).

    K-major rows (A, and B when transposed) hold block_k / 8 16-byte chunks: 8 chunks fill a
    128-byte line, so the XOR key is the row mod 8; 4 chunks are half a line, so two rows share a
    line and the key is (row / 2) mod 4. N-major rows (row-major B) are >= 128 bytes: row mod 8.
    Either way the 8 rows one ldmatrix phase reads at one logical chunk hit 8 bank groups.
    """
    from spio.generators import Dim, Tensor, Xor, dtype

    M, N, K, STAGE = Dim(), Dim(), Dim(), Dim()
    K8, N8 = K / 8, N / 8
    kc = cfg.block_k // 8
    k_bits, k_shift = (3, 0) if kc == 8 else (2, 1)
    smem_a = Tensor(
        (STAGE(cfg.stages), M(cfg.block_m), K8(kc)),
        dtype.uint4,
        swizzle=Xor(M, K8, k_bits, k_shift),
    )
    if p.b_transposed:
        smem_b = Tensor(
            (STAGE(cfg.stages), N(cfg.block_n), K8(kc)),
            dtype.uint4,
            swizzle=Xor(N, K8, k_bits, k_shift),
        )
    else:
        smem_b = Tensor(
            (STAGE(cfg.stages), K(cfg.block_k), N8(cfg.block_n // 8)),
            dtype.uint4,
            swizzle=Xor(K, N8, 3),
        )
    # C staging rows padded by 8 elements: consecutive rows shift by 4 (16-bit) or 8 (fp32)
    # banks, so a warp's 8 rows x 4 lanes of accumulator pairs hit distinct banks.
    smem_c = Tensor(
        (M(cfg.block_m), N(cfg.block_n)), dtype.by_name(p.out_dtype), strides={M: cfg.block_n + 8}
    )
    return {
        "M": M,
        "N": N,
        "K": K,
        "K8": K8,
        "N8": N8,
        "STAGE": STAGE,
        "SmemA": smem_a,
        "SmemB": smem_b,
        "SmemC": smem_c,
    }


def spec(p: MatmulParams, cfg: MatmulConfig, dev: Any) -> KernelSpec:
    """The kernel variant for (dtypes, B layout, bias, tiling); independent of m, n, k."""
    from spio.generators import Constant

    del dev  # hardware limits were applied by configs(); the code is arch-generic sm_80+
    constants = {
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "BLOCK_K": cfg.block_k,
        "WARPS_M": cfg.warps_m,
        "WARPS_N": cfg.warps_n,
        "STAGES": cfg.stages,
        "ELEMENT_IS_BF16": int(p.dtype == "bfloat16"),
        "OUT_KIND": OUT_KINDS[p.out_dtype],
        "B_TRANSPOSED": int(p.b_transposed),
        "HAS_BIAS": int(p.has_bias),
    }
    specs: dict[str, Any] = {name: Constant(value) for name, value in constants.items()}
    specs.update(_smem_specs(p, cfg))
    title = (
        f"matmul {p.dtype}->{p.out_dtype} b_transposed={p.b_transposed} "
        f"bias={p.has_bias} tile {cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
        f"warps {cfg.warps_m}x{cfg.warps_n} stages {cfg.stages}"
    )
    return KernelSpec(
        source="matmul.cu",
        entry="spio_matmul",
        signature="ppppiiiii",  # a, b, bias, c, m, n, k, ldb, raster
        specs=specs,
        title=title,
        block=(cfg.threads, 1, 1),
        smem=cfg.smem(p),
    )


def stats(p: MatmulParams) -> KernelStats:
    """2 m n k FLOP; A, B (and bias) read once, C written once."""
    size = ITEMSIZE[p.dtype]
    moved = (p.m * p.k + p.k * p.n + (p.n if p.has_bias else 0)) * size
    moved += p.m * p.n * ITEMSIZE[p.out_dtype]
    return KernelStats(bytes_moved=moved, flops=2 * p.m * p.n * p.k)


def features(p: MatmulParams, cfg: MatmulConfig, dev: Any) -> dict[str, float]:
    """Numeric features for the performance model (fixed key order)."""
    tm, tn = cfg.tiles(p)
    ctas = tm * tn
    return {
        "m": float(p.m),
        "n": float(p.n),
        "k": float(p.k),
        "bf16": float(p.dtype == "bfloat16"),
        "out_fp32": float(p.out_dtype == "float32"),
        "b_transposed": float(p.b_transposed),
        "has_bias": float(p.has_bias),
        "block_m": float(cfg.block_m),
        "block_n": float(cfg.block_n),
        "block_k": float(cfg.block_k),
        "warps_m": float(cfg.warps_m),
        "warps_n": float(cfg.warps_n),
        "stages": float(cfg.stages),
        "raster": float(cfg.raster),
        "ctas": float(ctas),
        "waves": ctas / dev.sm_count,
        "m_waste": tm * cfg.block_m / p.m - 1.0,
        "n_waste": tn * cfg.block_n / p.n - 1.0,
        "k_tiles": float(-(-p.k // cfg.block_k)),
        "smem": float(cfg.smem(p)),
    }


def _check_tensor(name: str, t: Any, shape: tuple[int, ...], dtype: Any) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"matmul launch: {name} must have shape {shape}, got {tuple(t.shape)}")
    if t.dtype != dtype:
        raise TypeError(f"matmul launch: {name} must be {dtype}, got {t.dtype}")
    if not t.is_contiguous():
        raise ValueError(f"matmul launch: {name} must be contiguous; call .contiguous() first")
    if t.data_ptr() % 16:
        raise ValueError(
            f"matmul launch: {name} must be 16-byte aligned (16-byte vector "
            f"loads/stores); pass a fresh tensor or .clone() it"
        )


def launch(
    p: MatmulParams,
    cfg: MatmulConfig,
    c: Any,
    a: Any,
    b: Any,
    bias: Any = None,
    *,
    ldb: int | None = None,
    stream: int = 0,
    cache: Any = None,
    device: Any = None,
) -> None:
    """Runs C = A @ B (+ bias) with one config on torch tensors (already allocated C).

    `ldb` is B's row stride in elements (default: its logical width); for row-major B it must be
    a multiple of 8, so callers pad B's columns to the next multiple of 8 when n % 8 != 0 and
    pass the padded B (shape (k, ldb)) here.
    """
    import torch

    from spio.cuda import device_attributes
    from spio.kernels.loader import default_function_cache

    dt = getattr(torch, p.dtype)
    b_width = p.k if p.b_transposed else p.n
    ldb = b_width if ldb is None else ldb
    if ldb < b_width or (not p.b_transposed and ldb % 8) or (p.b_transposed and ldb != p.k):
        raise ValueError(
            f"matmul launch: ldb={ldb} invalid for B of shape {p.b_shape}; row-major "
            f"B needs ldb >= n and ldb % 8 == 0, transposed B needs ldb == k"
        )
    _check_tensor("a", a, (p.m, p.k), dt)
    b_rows = p.n if p.b_transposed else p.k
    _check_tensor("b", b, (b_rows, ldb), dt)
    _check_tensor("c", c, (p.m, p.n), getattr(torch, p.out_dtype))
    if p.has_bias:
        if bias is None:
            raise ValueError("matmul launch: params say has_bias=True but bias is None")
        _check_tensor("bias", bias, (p.n,), dt)
    elif bias is not None:
        raise ValueError("matmul launch: bias given but params say has_bias=False")
    device = device or device_attributes(c.device.index or 0)
    cache = cache if cache is not None else default_function_cache()
    MatmulLaunch(cache.get(DEF, p.variant(), cfg, device), p, cfg, ldb)(c, a, b, bias, stream)


class MatmulLaunch:
    """A loaded variant bound to one problem (m, n, k, ldb): `launch(c, a, b, bias, stream)` runs
    C = A @ B (+ bias) on tensors `launch` would accept (contiguous, 16-byte aligned, B of row
    stride `ldb`); the ops check them through their call signature instead of on every call."""

    __slots__ = ("_launch", "_tail")

    def __init__(self, kernel: Any, p: MatmulParams, cfg: MatmulConfig, ldb: int) -> None:
        self._launch = kernel.bind(grid(p, cfg))
        self._tail = (p.m, p.n, p.k, ldb, cfg.raster)

    def __call__(self, c: Any, a: Any, b: Any, bias: Any, stream: int) -> None:
        self._launch((a, b, c if bias is None else bias, c, *self._tail), stream)


def reference(a: Any, b: Any, bias: Any = None, b_transposed: bool = False) -> Any:
    """fp64 C = A @ B (+ bias) from the same (quantized) operands the kernel reads."""
    bd = b.double()
    out = a.double() @ (bd.t() if b_transposed else bd)
    return out + bias.double() if bias is not None else out


def select_key(p: MatmulParams) -> MatmulParams:
    """The selection rule (`KernelDef.select_key`): a config is selected for the token count
    rounded up to a power of two, so selections (and their cache) stay a bounded set."""
    return p.bucketed()


def examples() -> list[MatmulParams]:
    """Representative problems: a square GEMM, an LLM projection at prefill and at decode."""
    return [
        MatmulParams(4096, 4096, 4096),
        MatmulParams(2048, 11008, 4096, "bfloat16", "bfloat16", b_transposed=True, has_bias=True),
        MatmulParams(16, 4096, 4096, b_transposed=True),
    ]


_HIDDEN = (768, 1024, 2048, 2560, 4096, 5120, 8192)
_SQUARE_BASES = (1024, 1536, 2048, 3072, 4096, 6144, 8192)


def _near_square(rng: Any) -> tuple[int, int, int]:
    """(m, n, k) around a common size `base` of _SQUARE_BASES: a third of the draws the exact
    cube base^3 (the aligned shapes benchmarks use), the others each side base x U(0.75, 1.25),
    so 768-10240, with m and n rounded to multiples of 64 and k to 8."""
    base = rng.choice(_SQUARE_BASES)
    if rng.random() < 1 / 3:
        return base, base, base
    m, n = (64 * round(base * rng.uniform(0.75, 1.25) / 64) for _ in range(2))
    return m, n, 8 * round(base * rng.uniform(0.75, 1.25) / 8)


def sample_params(rng: Any) -> MatmulParams:
    """One problem: 65% LLM-like layer shapes (tokens x hidden x {hidden, MLP width}), 15%
    near-square (`_near_square`: a third exact cubes 1024^3-8192^3, the rest sides 768-10240
    with m and n multiples of 64; the H100 datasets had none, and the model mis-ranked 256-row
    tiles at 2048^3), 20% random."""
    dtype = rng.choice(("float16", "bfloat16"))
    u = rng.random()
    if 0.65 <= u < 0.8:
        m, n, k = _near_square(rng)
    elif u < 0.65:
        hidden = rng.choice(_HIDDEN)
        width = rng.choice((hidden, 3 * hidden, 4 * hidden, 8 * hidden // 3 // 64 * 64))
        n, k = (width, hidden) if rng.random() < 0.5 else (hidden, width)
        m = rng.choice((1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192))
    else:
        m, n = rng.randint(1, 8192), rng.randint(1, 8192)
        k = 8 * rng.randint(1, 1024)
    return MatmulParams(
        m,
        n,
        k,
        dtype,
        rng.choice((dtype, "float32")),
        b_transposed=rng.random() < 0.5,
        has_bias=rng.random() < 0.3,
    )


def make_runner(p: MatmulParams, cfg: MatmulConfig) -> Any:
    """A zero-argument launch of (p, cfg) on fresh random inputs on the current GPU."""
    import torch

    dev = torch.device("cuda", torch.cuda.current_device())
    dt = getattr(torch, p.dtype)
    ldb = p.k if p.b_transposed else p.n + (-p.n) % 8
    a = torch.randn(p.m, p.k, device=dev).to(dt)
    b = torch.randn(p.b_shape[0], ldb, device=dev).to(dt)
    bias = torch.randn(p.n, device=dev).to(dt) if p.has_bias else None
    c = torch.empty(p.m, p.n, device=dev, dtype=getattr(torch, p.out_dtype))
    stream = torch.cuda.current_stream(dev).cuda_stream
    return lambda: launch(p, cfg, c, a, b, bias, ldb=ldb, stream=stream)


DEF = KernelDef(
    name="matmul",
    params_type=MatmulParams,
    config_type=MatmulConfig,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    features=features,
    examples=examples,
    sample_params=sample_params,
    make_runner=make_runner,
    compiled_params=MatmulParams.variant,
    select_key=select_key,
)
