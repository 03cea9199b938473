"""Params (the problem) and Config (the tiling) of the tensor-core matmul C = A @ B (+ bias).

Shapes are runtime arguments of the kernel: one compiled variant per (dtype, out dtype, B layout,
bias, tiling) serves every M, N and K, so a new token count never compiles. The shape fields of
`MatmulParams` drive config choice and statistics only; `MatmulParams.variant()` drops them for the
loaded-kernel cache.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spio.kernels.kernel_def import pow2_bucket

# Operand dtypes the kernel reads (mma.sync m16n8k16 takes fp16 and bf16) and outputs it writes.
DTYPES = ("float16", "bfloat16")
OUT_DTYPES = ("float16", "bfloat16", "float32")
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}

# Tile vocabulary of the config space.
BLOCK_MN = (64, 128, 256)
BLOCK_KS = (32, 64)
WARP_TILES = (32, 64)  # warp tile M and N: multiples of 16 (mma M and two mma N per ldmatrix.x4)
STAGE_COUNTS = (2, 3, 4)
RASTERS = (1, 8)
MAX_THREADS = 256


def _check_int(owner: str, name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True, slots=True)
class MatmulParams:
    """C (m, n) = A (m, k) @ B (+ bias (n,)); B is (k, n) row-major, or (n, k) if b_transposed.

    Attributes:
        m, n, k: problem size (runtime arguments of the kernel; m and n any size >= 1).
        dtype: operand dtype, "float16" or "bfloat16"; accumulation is always fp32.
        out_dtype: "float16", "bfloat16" (must equal dtype) or "float32".
        b_transposed: B stored as (n, k) row-major (the layout of nn.Linear weights).
        has_bias: add bias[n] (dtype `dtype`) in the epilogue.
    """

    m: int
    n: int
    k: int
    dtype: str = "float16"
    out_dtype: str = "float16"
    b_transposed: bool = False
    has_bias: bool = False

    def __post_init__(self) -> None:
        _check_int("MatmulParams", "m", self.m, 1)
        _check_int("MatmulParams", "n", self.n, 1)
        _check_int("MatmulParams", "k", self.k, 8)
        if self.k % 8:
            raise ValueError(
                f"MatmulParams.k must be a multiple of 8 (rows of A and B are moved in 16-byte "
                f"pieces), got {self.k}; pad K with zeros to {self.k + (-self.k) % 8}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"MatmulParams.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.out_dtype not in (self.dtype, "float32"):
            raise ValueError(
                f"MatmulParams.out_dtype must be the operand dtype {self.dtype!r} or 'float32', "
                f"got {self.out_dtype!r}"
            )
        for name in ("b_transposed", "has_bias"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"MatmulParams.{name} must be a bool, got {getattr(self, name)!r}")

    def variant(self) -> MatmulParams:
        """These params with the shape canonicalized: what a compiled kernel depends on."""
        return replace(self, m=1, n=1, k=8)

    def bucketed(self) -> MatmulParams:
        """These params with m rounded up to a power of two, so config selection (and its cache)
        sees a bounded set of token counts."""
        return replace(self, m=pow2_bucket(self.m))

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.n, self.k) if self.b_transposed else (self.k, self.n)


@dataclass(frozen=True, slots=True)
class MatmulConfig:
    """Tiling of one CTA: a block_m x block_n tile of C, block_k deep per pipeline stage.

    Attributes:
        block_m, block_n: CTA tile of C.
        block_k: K depth of one cp.async stage (32 or 64 halves = 4 or 8 16-byte chunks per row).
        warps_m, warps_n: warp grid; each warp owns a (block_m/warps_m) x (block_n/warps_n) tile.
        stages: shared-memory ring depth of the cp.async pipeline.
        raster: rasterization width: `raster` M-tiles are swept across all N-tiles before moving
            on, so the A rows and the B columns in flight stay in L2 (a runtime argument: it
            does not change the compiled code).
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    stages: int = 3
    raster: int = 8

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "raster"):
            _check_int("MatmulConfig", name, getattr(self, name), 1)
        if self.block_k not in BLOCK_KS:
            raise ValueError(f"MatmulConfig.block_k must be one of {BLOCK_KS}, got {self.block_k}")
        if not 2 <= self.stages <= 4:
            raise ValueError(f"MatmulConfig.stages must be 2, 3 or 4, got {self.stages}")
        if self.block_m % self.warps_m or self.block_n % self.warps_n:
            raise ValueError(
                f"MatmulConfig: warps ({self.warps_m} x {self.warps_n}) must divide the block "
                f"tile ({self.block_m} x {self.block_n})"
            )
        wm, wn = self.warp_m, self.warp_n
        if wm % 16 or wn % 16 or wm > 64 or wn > 64:
            raise ValueError(
                f"MatmulConfig: warp tile {wm} x {wn} must have M and N multiples of 16 and at "
                f"most 64 (one mma is 16 x 8; ldmatrix.x4 loads B for two; 64 x 64 is 128 fp32 "
                f"accumulators per thread); change warps_m/warps_n"
            )
        if self.threads > MAX_THREADS:
            raise ValueError(
                f"MatmulConfig: {self.warps_m * self.warps_n} warps exceed {MAX_THREADS // 32} "
                f"(at 255 registers per thread a CTA of more warps does not fit the register file)"
            )
        for what, chunks in (
            ("A", self.block_m * self.block_k // 8),
            ("B", self.block_k * self.block_n // 8),
        ):
            if chunks % self.threads:
                raise ValueError(
                    f"MatmulConfig: the {what} tile's {chunks} 16-byte chunks do not split evenly "
                    f"over {self.threads} threads; use fewer warps or a bigger tile"
                )

    @property
    def warp_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.block_n // self.warps_n

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def tiles(self, p: MatmulParams) -> tuple[int, int]:
        """CTA tiles in M and N covering C."""
        return (-(-p.m // self.block_m), -(-p.n // self.block_n))

    def pipeline_smem(self) -> int:
        """Bytes of the cp.async ring: `stages` copies of the A and B tiles (2-byte operands)."""
        return self.stages * (self.block_m + self.block_n) * self.block_k * 2

    def epilogue_smem(self, out_dtype: str) -> int:
        """Bytes of the C staging tile; each row is padded by 8 elements so the accumulator
        writes (8 rows x 4 lanes per warp) fall in distinct banks."""
        size = ITEMSIZE[out_dtype]
        return self.block_m * (self.block_n + 8) * size

    def smem(self, p: MatmulParams) -> int:
        """Dynamic shared memory: the epilogue reuses the pipeline's buffer."""
        return max(self.pipeline_smem(), self.epilogue_smem(p.out_dtype))
