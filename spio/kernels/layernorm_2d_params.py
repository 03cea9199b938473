"""layernorm_2d: the layer shape (params), the tuning choices (configs) and how to pick one.

A (N, C, H, W) channels_last activation is M = N·H·W rows of C contiguous channels. One row is one
LayerNorm problem; the kernels map `threads_per_row` threads to a row (sub-warp groups for small C,
one or several warps for large C) and `rows_per_block` rows to a CTA, and move the row with
`vec_bytes`-wide loads held in registers (the row is read from DRAM once).

M is a runtime argument of the kernels (a new batch size reuses the compiled variant); C, the data
types and which of weight/bias exist are compiled in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from spio.kernels.kernel_def import KernelStats

DTYPES = ("float16", "bfloat16", "float32")
ELEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# The vector path needs every row to be whole 16-byte vectors of 16-bit data: C % 8 == 0.
# (Other C run PyTorch's implementation, see spio.functional.layernorm_2d.)
C_MULTIPLE = 8
MIN_C = 8
# Largest C the register-resident row supports: 1024 threads x 2 vectors of 16 bytes per thread
# for 16-bit data (32 KiB per row). Larger C run PyTorch's implementation.
MAX_C = 16384
VEC_BYTES = (16, 8)
MAX_BLOCK_THREADS = 1024
# Register budget (32-bit words per thread) of what a thread keeps live: the resident row (two
# with prefetch; x and dy in backward) and fp32 values of its channels (forward: the converted
# row; backward: the dweight/dbias accumulators when they are in registers). weight and bias are
# re-read per row from L1. Leaves room for addresses and temporaries under ~128 registers.
MAX_LIVE_WORDS = 80
# Static shared memory of the backward's dweight/dbias accumulators (outputs x rows_per_block x C
# fp32): the CUDA limit for static shared memory (48 KiB) less 1 KiB for the row-sum scratch.
MAX_BWD_SMEM = 47 * 1024
# Element offsets are 32-bit in the kernels: M * C must stay below 2**32 (2**31 vectors of >= 2
# elements).
MAX_ELEMENTS = 2**32


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class LayerNorm2dParams:
    """One LayerNorm2d problem.

    Attributes:
        c: channels (normalized size); a multiple of 8 in [8, 16384].
        m: rows N·H·W (>= 0); a runtime argument, not compiled into the kernel.
        dtype: data type of x and y: "float16", "bfloat16" or "float32".
        wdtype: data type of weight and bias (and of dweight/dbias): dtype or "float32";
            None means dtype.
        has_weight: whether y is scaled by weight[c].
        has_bias: whether bias[c] is added to y.
    """

    c: int
    m: int = 1
    dtype: str = "float16"
    wdtype: str | None = None
    has_weight: bool = True
    has_bias: bool = True

    def __post_init__(self) -> None:
        for name in ("c", "m"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"LayerNorm2dParams.{name} must be an int, got {v!r}")
        if self.c < MIN_C or self.c > MAX_C or self.c % C_MULTIPLE:
            raise ValueError(
                f"LayerNorm2dParams.c must be a multiple of {C_MULTIPLE} in [{MIN_C}, {MAX_C}] "
                f"(whole 16-byte vectors per row, row held in registers), got {self.c}; other "
                "channel counts run PyTorch's layer_norm (spio.functional.layernorm_2d falls back)"
            )
        if self.m < 0:
            raise ValueError(f"LayerNorm2dParams.m (rows N*H*W) must be >= 0, got {self.m}")
        if self.m * self.c >= MAX_ELEMENTS:
            raise ValueError(
                f"LayerNorm2dParams: M*C = {self.m * self.c} elements must be < 2**32 (32-bit "
                "offsets); split the batch"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"LayerNorm2dParams.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.wdtype is None:
            object.__setattr__(self, "wdtype", self.dtype)
        if self.wdtype not in (self.dtype, "float32"):
            raise ValueError(
                f"LayerNorm2dParams.wdtype must be the data type ({self.dtype!r}) or 'float32', "
                f"got {self.wdtype!r}; cast weight and bias to one of those"
            )
        for name in ("has_weight", "has_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LayerNorm2dParams.{name} must be a bool")

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def weight_dtype(self) -> str:
        """wdtype as a str: __post_init__ replaced None by dtype, which the field type can't say."""
        return self.wdtype if self.wdtype is not None else self.dtype

    @property
    def welem_bytes(self) -> int:
        return ELEM_BYTES[self.weight_dtype]

    def static(self) -> LayerNorm2dParams:
        """The params with m zeroed: what the compiled kernel depends on (its cache key)."""
        return replace(self, m=0)

    @classmethod
    def from_tensors(cls, x: Any, weight: Any = None, bias: Any = None) -> LayerNorm2dParams:
        """Params of a (N, C, H, W) input and optional (C,) weight and bias (torch tensors)."""
        n, c, h, w = x.shape
        dtype = str(x.dtype).removeprefix("torch.")
        affine = weight if weight is not None else bias
        wdtype = str(affine.dtype).removeprefix("torch.") if affine is not None else None
        return cls(
            c=c,
            m=n * h * w,
            dtype=dtype,
            wdtype=wdtype,
            has_weight=weight is not None,
            has_bias=bias is not None,
        )


@dataclass(frozen=True, slots=True)
class LayerNorm2dConfig:
    """How a kernel maps rows to threads (forward and backward share this type).

    Attributes:
        threads_per_row: threads that share one row (power of two, 1..1024); < 32 is a sub-warp
            group, > 32 several warps combined through shared memory.
        rows_per_block: rows a CTA handles at a time (power of two).
        vec_bytes: bytes per vector load/store (16 or 8).
        prefetch: load the CTA's next rows (backward: x, dy, mean, rstd) into a second register
            buffer before reducing the current ones (doubles the resident-row registers).
    """

    threads_per_row: int
    rows_per_block: int
    vec_bytes: int = 16
    prefetch: bool = False

    def __post_init__(self) -> None:
        t, r = self.threads_per_row, self.rows_per_block
        if not _is_pow2(t) or t > MAX_BLOCK_THREADS:
            raise ValueError(
                f"LayerNorm2dConfig.threads_per_row must be a power of two <= 1024, got {t}"
            )
        if not _is_pow2(r):
            raise ValueError(f"LayerNorm2dConfig.rows_per_block must be a power of two, got {r}")
        if t * r % 32 or t * r > MAX_BLOCK_THREADS:
            raise ValueError(
                f"LayerNorm2dConfig: threads_per_row * rows_per_block = {t * r} must be a "
                "multiple of 32 (whole warps) and <= 1024; change rows_per_block"
            )
        if self.vec_bytes not in VEC_BYTES:
            raise ValueError(
                f"LayerNorm2dConfig.vec_bytes must be one of {VEC_BYTES}, got {self.vec_bytes}"
            )
        if not isinstance(self.prefetch, bool):
            raise ValueError("LayerNorm2dConfig.prefetch must be a bool")

    @property
    def block_threads(self) -> int:
        return self.threads_per_row * self.rows_per_block


@dataclass(frozen=True, slots=True)
class Geometry:
    """Derived sizes of one (params, config): vectors per row and per thread."""

    vec: int  # elements per vector
    row_vecs: int  # vectors per row, C / vec
    vecs_per_thread: int  # ceil(row_vecs / threads_per_row)
    row_words: int  # 32-bit registers of one resident row per thread
    utilization: float  # row_vecs / (vecs_per_thread * threads_per_row)


def geometry(p: LayerNorm2dParams, cfg: LayerNorm2dConfig) -> Geometry:
    vec = cfg.vec_bytes // p.elem_bytes
    row_vecs = p.c // vec
    k = _ceil_div(row_vecs, cfg.threads_per_row)
    return Geometry(
        vec=vec,
        row_vecs=row_vecs,
        vecs_per_thread=k,
        row_words=k * cfg.vec_bytes // 4,
        utilization=row_vecs / (k * cfg.threads_per_row),
    )


def outputs(p: LayerNorm2dParams) -> int:
    """How many of dweight, dbias the backward produces (0, 1 or 2)."""
    return int(p.has_weight) + int(p.has_bias)


def acc_in_smem(p: LayerNorm2dParams, cfg: LayerNorm2dConfig) -> bool:
    """Whether the backward keeps its dweight/dbias accumulators in shared memory (ACC_SMEM).

    Yes whenever there is something to accumulate and outputs x rows_per_block x C fp32 fit
    MAX_BWD_SMEM: each thread then owns the accumulators of its vectors (no barrier until the
    epilogue), which frees 2·K·VEC registers and raises occupancy. Otherwise (one row per CTA
    and a large C) they are registers.
    """
    return outputs(p) > 0 and outputs(p) * cfg.rows_per_block * p.c * 4 <= MAX_BWD_SMEM


def fits(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, backward: bool) -> bool:
    """Whether cfg is a sensible, register-feasible mapping for p.

    Rules: at least half of the vector slots of a row hold data (utilization >= 0.5); what a
    thread keeps live fits MAX_LIVE_WORDS (forward: the row, twice with prefetch, and its fp32
    conversion; backward: x and dy, twice with prefetch, and the fp32 dweight/dbias accumulators
    of its channels unless they are in shared memory); backward with several rows per CTA keeps
    its accumulators in shared memory (acc_in_smem), so they must fit MAX_BWD_SMEM.
    """
    g = geometry(p, cfg)
    if g.utilization < 0.5:
        return False
    channels = g.vecs_per_thread * g.vec
    rows_words = g.row_words * (2 if cfg.prefetch else 1)
    if backward:
        smem = acc_in_smem(p, cfg)
        if cfg.rows_per_block > 1 and outputs(p) > 0 and not smem:
            return False
        live = 2 * rows_words + (0 if smem else channels * outputs(p))
        return live <= MAX_LIVE_WORDS
    return rows_words + channels <= MAX_LIVE_WORDS


def configs(p: LayerNorm2dParams, dev: Any, backward: bool = False) -> list[LayerNorm2dConfig]:
    """Every valid config for p on dev, in a stable order (vec_bytes, threads, rows, prefetch).

    Blocks have 128..512 threads (a single row of 32..1024 threads also forms a block), within
    the device's thread limit.
    """
    max_threads = min(MAX_BLOCK_THREADS, getattr(dev, "max_threads_per_block", MAX_BLOCK_THREADS))
    out = []
    for vb in VEC_BYTES:
        row_vecs = p.c * p.elem_bytes // vb
        t = 1
        while t <= min(MAX_BLOCK_THREADS, 2 * row_vecs):
            r = 1
            while t * r <= min(max(512, t), max_threads):
                if t * r >= 128 or (r == 1 and t >= 32):
                    for pf in (False, True):
                        cfg = LayerNorm2dConfig(t, r, vb, pf)
                        if fits(p, cfg, backward):
                            out.append(cfg)
                r *= 2
            t *= 2
    return out


def heuristic(p: LayerNorm2dParams, dev: Any, backward: bool = False) -> LayerNorm2dConfig:
    """The config used when no performance model applies (depends on C and dtypes, not on M).

    16-byte vectors; threads_per_row is the power of two that wastes the fewest threads
    (utilization) with 1..4 vectors per thread (forward) or 1..2 (backward, which holds x and
    dy), preferring 2 vectors per thread (two independent loads in flight) and then fewer
    threads; 256-thread blocks (rows_per_block = 256 / threads_per_row). Forward: no prefetch.
    Backward: prefetch when every vector slot of the row holds data (utilization 1) and the row
    is one warp or less, where it compiles to <= 80 registers on sm_90 (3 CTAs of 256 threads
    per SM, as without it), so the next group's loads overlap the current group's math at no
    occupancy cost; with idle slots or a multi-warp row it costs 20-40 more registers (or
    spills), so no prefetch.
    Expected, not measured: see docs/ops/layernorm_2d.md. M does not enter, so a new batch size
    never compiles a new variant.
    """
    cands = [c for c in configs(p, dev, backward) if c.vec_bytes == 16 and not c.prefetch]
    if not cands:
        raise ValueError(f"layernorm_2d: no valid config for {p}")
    max_k = 2 if backward else 4

    def score(cfg: LayerNorm2dConfig) -> tuple:
        g = geometry(p, cfg)
        over = g.vecs_per_thread > max_k
        return (
            over,
            -round(g.utilization, 3),
            abs(g.vecs_per_thread - 2),
            cfg.threads_per_row,
            abs(cfg.block_threads - 256),
        )

    best = min(cands, key=score)
    if backward and geometry(p, best).utilization == 1.0 and best.threads_per_row <= 32:
        pf = replace(best, prefetch=True)
        if fits(p, pf, backward):
            return pf
    return best


def forward_stats(p: LayerNorm2dParams) -> KernelStats:
    """Reads x, weight, bias; writes y, mean, rstd (fp32)."""
    data = p.m * p.c * p.elem_bytes
    affine = p.c * p.welem_bytes * (int(p.has_weight) + int(p.has_bias))
    return KernelStats(bytes_moved=2 * data + affine + 8 * p.m, flops=8 * p.m * p.c)


def backward_stats(p: LayerNorm2dParams) -> KernelStats:
    """Reads x, dy, mean, rstd, weight; writes dx (the per-block dweight/dbias partials are
    counted by the reduce kernel)."""
    data = p.m * p.c * p.elem_bytes
    return KernelStats(
        bytes_moved=3 * data + 8 * p.m + p.c * p.welem_bytes * int(p.has_weight),
        flops=12 * p.m * p.c,
    )


def blocks_per_sm_estimate(cfg: LayerNorm2dConfig, dev: Any) -> int:
    """Resident CTAs per SM by thread count alone (the launch uses the driver's occupancy)."""
    max_threads_sm = getattr(dev, "max_threads_per_sm", 2048)
    max_blocks_sm = getattr(dev, "max_blocks_per_sm", 32)
    return max(1, min(max_blocks_sm, max_threads_sm // cfg.block_threads))


def features(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> dict[str, float]:
    """Numeric features for the performance model (fixed key order)."""
    g = geometry(p, cfg)
    groups = _ceil_div(max(p.m, 1), cfg.rows_per_block)
    resident = dev.sm_count * blocks_per_sm_estimate(cfg, dev)
    return {
        "c": float(p.c),
        "m": float(p.m),
        "log2_m": math.log2(max(p.m, 1)),
        "elem_bytes": float(p.elem_bytes),
        "has_weight": float(p.has_weight),
        "has_bias": float(p.has_bias),
        "threads_per_row": float(cfg.threads_per_row),
        "rows_per_block": float(cfg.rows_per_block),
        "block_threads": float(cfg.block_threads),
        "vec_bytes": float(cfg.vec_bytes),
        "prefetch": float(cfg.prefetch),
        "acc_smem": float(acc_in_smem(p, cfg)),
        "vecs_per_thread": float(g.vecs_per_thread),
        "utilization": g.utilization,
        "row_words": float(g.row_words),
        "waves_per_sm": groups / resident,
        "row_bytes": float(p.c * p.elem_bytes),
        "bytes": float(2 * p.m * p.c * p.elem_bytes),
    }


def examples() -> list[LayerNorm2dParams]:
    """Representative params: the ConvNeXt stages at N=128 in fp16, bf16 and an fp32 one."""
    return [
        LayerNorm2dParams(c=96, m=128 * 56 * 56),
        LayerNorm2dParams(c=768, m=128 * 7 * 7, dtype="bfloat16"),
        LayerNorm2dParams(c=4096, m=64, dtype="float32"),
    ]


# ConvNeXt / MetaFormer widths and spatial sizes, for performance-model training data.
_WIDTHS = (64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1536, 2048, 4096)
_SIDES = (7, 14, 28, 56, 112)


def sample_params(rng: Any) -> LayerNorm2dParams:
    """One params from realistic layer shapes (3 in 4) or random ones, for `spio tune collect`.

    rng is a random.Random. At most 2**28 elements (512 MiB of fp16 data).
    """
    if rng.random() < 0.75:
        c, side = rng.choice(_WIDTHS), rng.choice(_SIDES)
        m = rng.choice((1, 2, 8, 32, 64, 128, 256)) * side * side
    else:
        c = 8 * rng.randint(1, 512)
        m = rng.randint(1, 1 << 20)
    m = max(1, min(m, (1 << 28) // c))
    dtype = rng.choice(DTYPES)
    wdtype = rng.choice((dtype, "float32"))
    affine = rng.random() < 0.9
    return LayerNorm2dParams(
        c=c, m=m, dtype=dtype, wdtype=wdtype, has_weight=affine, has_bias=affine
    )
