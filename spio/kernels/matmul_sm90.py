"""Hopper matmul (sm_90a): TMA-fed, warp-specialized wgmma kernel for C = A @ B (+ bias).
The kernel is `spio/src/matmul_sm90.cu`; its header comment states the tiling, pipeline and
bound. Scope: B given as (N, K) (`MatmulParams.b_transposed`, nn.Linear's weight layout) or as
(K, N) row-major (read N-major: the gradients of nn.Linear), fp16/bf16 operands,
fp16/bf16/fp32 output, optional bias; M, N, K runtime (K % 8 == 0; a row-major B's rows whole
16-byte units: its leading dimension `ldb` a multiple of 8, the op pads N). `spio.functional.matmul`
runs it on sm_90 GPUs (`supported`), with the config `heuristic` picks (a fitted cost model of
waves, split-K and split tails, and swapped configs for decode products; no XGBoost model), or
under SPIO_AUTOTUNE the fastest of `ranked` measured (`KernelDef.ranked`, through the
selector); other GPUs run the mma.sync kernel (`spio.kernels.matmul`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spio.kernels import matmul_splitk_reduce as splitk_sum
from spio.kernels import matmul_tail_sum as tail_sum
from spio.kernels.kernel_def import KernelDef, KernelSpec
from spio.kernels.matmul import stats
from spio.kernels.matmul_params import MatmulParams

BLOCK_M = 128  # two consumer warpgroups of 64 rows
BLOCK_K = 64  # one 128-byte swizzled row per operand row
THREADS = 384  # producer warpgroup + two consumer warpgroups
BLOCK_NS = (64, 128, 256)
STAGE_COUNTS = (2, 3, 4, 5, 6, 8)
CLUSTER_MS = (1, 2)  # CTAs of a cluster along M sharing (multicasting) one B tile
SPLIT_KS = (1, *splitk_sum.SPLITS)  # CTAs per tile along K (split-K: fp32 partials + a sum)
# The split-K configs `configs` lists: few tiles want narrow ones, and deep rings per split.
SPLIT_BLOCK_NS = (64, 128)
SPLIT_STAGE_COUNTS = (4, 6, 8)
# The split-tail configs `configs` lists (block_n, stages): the heuristic's plain tiles and one
# shallower ring each. At most TAIL_MAX_SPLITS CTAs per tail tile, each of at least
# TAIL_MIN_K_TILES k tiles (`tail_plan`).
TAIL_CONFIGS = ((256, 3), (256, 4), (128, 4), (128, 6))
TAIL_MAX_SPLITS = tail_sum.MAX_SPLITS
TAIL_MIN_K_TILES = 2
# Swapped configs (`swap_ab`, decode: M <= SWAP_MAX_M rows of A against B as (N, K)): the kernel
# multiplies C^T = B A^T in tiles of 128 rows of B x block_n rows of A, block_n the narrowest of
# SWAP_BLOCK_NS that holds M (`swap_block_n`), each ring depth and split of K `configs` lists.
SWAP_MAX_M = 64
SWAP_BLOCK_NS = (16, 32, 64)
SWAP_STAGE_COUNTS = (4, 6, 8)
SWIZZLE_ALIGN = 1024  # the kernel aligns the ring to the 128-byte swizzle's 1024-byte atom
# Registers a thread may use per block_n, what `ctas_per_sm` counts on: 80 keeps two CTAs of
# 64-wide tiles on an SM (NVRTC 12.9 and 13.0 use 58-63), 168 is __launch_bounds__(384, 1)'s
# cap, which 128- and 256-wide tiles launch with (their producer warpgroup hands registers to the
# consumers: setmaxnreg, 40 and 232 a thread; `spec`'s min_registers, checked at load). A host
# test checks the compiled kernels against it: one above its budget would hold fewer CTAs than a
# persistent grid launches.
REGISTERS = {16: 80, 32: 80, 64: 80, 128: 168, 256: 168}
SMEM_RESERVED = 1024  # shared memory the system keeps per resident CTA (sm_80 and later)
# The TMA-store epilogue's staging: two buffers per consumer warpgroup, each 64 rows of one
# 128-byte box row (BOX_COLS = 128 / the output's size columns of C).
BOX_ROWS = 64
BOX_BYTES = 128
STAGING_BYTES = 2 * 2 * BOX_ROWS * BOX_BYTES


@dataclass(frozen=True, slots=True)
class MatmulSm90Config:
    """Tiling: a 128 x block_n tile of C per CTA, `stages` slots of (128 + block_n) x 64
    operands in shared memory; `raster` M-tiles swept across all N-tiles (a runtime argument).
    `cluster_m` 2 launches clusters of two CTAs on adjacent M tiles of one N tile that load B
    once for both (TMA multicast, half of the B box from each CTA); 1 is the plain kernel.
    `persistent` launches at most as many CTAs as the SMs hold (`grid`), each walking tiles
    blockIdx.x, blockIdx.x + gridDim.x, ... in the raster order (with a cluster, pairs of M
    tiles) as one k-tile stream, so a tile's epilogue overlaps the next tile's first loads.
    `split_k` > 1 (plain CTAs only) runs split_k CTAs per tile over consecutive ranges of K,
    each writing fp32 partials, and a second kernel sums them in order (+ bias) into C: for
    products with too few tiles to fill the SMs against long K (decode; small M x N at any M,
    where `heuristic`'s cost model predicts it pays).
    `tma_store` (128- and 256-wide tiles without split-K: `stores_by_tma`) stages C in shared
    memory and stores it with TMA in 128-byte lines, asynchronously (a persistent CTA stores a
    tile under the next one's main loop); else the accumulators are stored from registers.
    It needs C's rows in whole 16-byte units (`tma_store_fits`): `bound` turns it off for a
    problem whose rows are not, `launch` also for a C that does not start 16-byte aligned.
    `a_transposed` reads A from its transpose's storage, (K, M) row-major (M % 8 == 0; no
    clusters), in wgmma's transposed-A mode: the op's plan sets it for an A that is the
    transposed view of a contiguous tensor (dB = dC^T A), so nothing is copied; `configs` never
    lists it (the layout is the caller's, not a tuning choice).
    `tail` (plain 128- and 256-wide CTAs, no cluster, no split-K) splits the partial last wave:
    the tiles of the whole waves run one CTA each, and each tile of the last, partial wave runs
    over several CTAs along K, whose fp32 partials a second kernel sums in order (+ bias) into C
    (`tail_plan` says how many; a problem whose tiles fill their waves runs the plain kernel).
    `swap_ab` (decode: B as (N, K), M <= SWAP_MAX_M) runs the kernel on the swapped operands,
    C^T = B A^T, in tiles of 128 rows of B x block_n (16, 32 or 64: `swap_block_n`) rows of A,
    stored transposed from registers: a 128-row tile of A would multiply 128 / M times the
    product's work. Plain or split-K CTAs, no cluster, persistence, tail or transposed A."""

    block_n: int = 128
    stages: int = 4
    raster: int = 8
    cluster_m: int = 1
    persistent: bool = False
    split_k: int = 1
    tma_store: bool = True
    a_transposed: bool = False
    tail: bool = False
    swap_ab: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.persistent, bool):
            raise ValueError(f"MatmulSm90Config.persistent must be a bool, got {self.persistent!r}")
        if not isinstance(self.tma_store, bool):
            raise ValueError(f"MatmulSm90Config.tma_store must be a bool, got {self.tma_store!r}")
        if not isinstance(self.a_transposed, bool):
            raise ValueError(
                f"MatmulSm90Config.a_transposed must be a bool, got {self.a_transposed!r}"
            )
        if self.a_transposed and self.cluster_m > 1:
            raise ValueError(
                "MatmulSm90Config: an A given as (K, M) (a_transposed) runs without clusters; "
                f"set cluster_m=1 (got {self.cluster_m})"
            )
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"MatmulSm90Config.swap_ab must be a bool, got {self.swap_ab!r}")
        widths = SWAP_BLOCK_NS if self.swap_ab else BLOCK_NS
        if self.block_n not in widths:
            raise ValueError(
                f"MatmulSm90Config.block_n must be one of {widths}"
                + (" with swap_ab" if self.swap_ab else "")
                + f", got {self.block_n}"
            )
        if self.swap_ab and (
            self.cluster_m > 1 or self.persistent or self.tail or self.a_transposed
        ):
            raise ValueError(
                "MatmulSm90Config: swap_ab runs plain or split-K CTAs on K-major operands; set "
                f"cluster_m=1, persistent=False, tail=False and a_transposed=False (got "
                f"cluster_m={self.cluster_m}, persistent={self.persistent}, tail={self.tail}, "
                f"a_transposed={self.a_transposed})"
            )
        if self.stages not in STAGE_COUNTS:
            raise ValueError(
                f"MatmulSm90Config.stages must be one of {STAGE_COUNTS}, got {self.stages}"
            )
        if isinstance(self.raster, bool) or not isinstance(self.raster, int) or self.raster < 1:
            raise ValueError(f"MatmulSm90Config.raster must be an int >= 1, got {self.raster!r}")
        if isinstance(self.cluster_m, bool) or self.cluster_m not in CLUSTER_MS:
            raise ValueError(
                f"MatmulSm90Config.cluster_m must be one of {CLUSTER_MS}, got {self.cluster_m!r}"
            )
        if isinstance(self.split_k, bool) or self.split_k not in SPLIT_KS:
            raise ValueError(
                f"MatmulSm90Config.split_k must be one of {SPLIT_KS}, got {self.split_k!r}"
            )
        if not isinstance(self.tail, bool):
            raise ValueError(f"MatmulSm90Config.tail must be a bool, got {self.tail!r}")
        if self.tail and (
            self.cluster_m > 1 or self.persistent or self.split_k > 1 or self.block_n == 64
        ):
            raise ValueError(
                "MatmulSm90Config: tail runs plain 128- or 256-wide CTAs; set cluster_m=1, "
                f"persistent=False, split_k=1 and block_n 128 or 256 (got cluster_m="
                f"{self.cluster_m}, persistent={self.persistent}, split_k={self.split_k}, "
                f"block_n={self.block_n})"
            )
        if self.split_k > 1 and (self.cluster_m > 1 or self.persistent):
            raise ValueError(
                "MatmulSm90Config: split_k > 1 runs plain CTAs; set cluster_m=1 and "
                f"persistent=False (got cluster_m={self.cluster_m}, persistent={self.persistent})"
            )

    def smem(self) -> int:
        """Dynamic shared memory: the ring (2-byte operands), the epilogue's staging when it
        stores by TMA, the 2 x stages mbarriers, and the slack that aligns the ring to 1024
        bytes."""
        ring = self.stages * (BLOCK_M + self.block_n) * BLOCK_K * 2
        staging = STAGING_BYTES if stores_by_tma(self) else 0
        return ring + staging + 2 * 8 * self.stages + SWIZZLE_ALIGN

    def tiles(self, p: MatmulParams) -> tuple[int, int]:
        """(tiles along the kernel's M, along its N): of C, or with swap_ab of C^T."""
        rows, cols = (p.n, p.m) if self.swap_ab else (p.m, p.n)
        return (-(-rows // BLOCK_M), -(-cols // self.block_n))

    def label(self) -> str:
        """Short name for reports: "n128 s4", with " c2" for a cluster of two, " p" for
        persistent, " k4" for a split over K in 4, " t" for a split tail and " sw" for the
        swapped operands."""
        cluster = f" c{self.cluster_m}" if self.cluster_m > 1 else ""
        split = f" k{self.split_k}" if self.split_k > 1 else ""
        # " rs": a config that could store by TMA stores from registers.
        regs = " rs" if not self.tma_store and self.block_n >= 128 and not split else ""
        return (
            f"n{self.block_n} s{self.stages}{cluster}"
            + (" p" if self.persistent else "")
            + split
            + (" t" if self.tail else "")
            + regs
            + (" at" if self.a_transposed else "")
            + (" sw" if self.swap_ab else "")
        )


def stores_by_tma(cfg: MatmulSm90Config) -> bool:
    """Whether cfg's epilogue stages C in shared memory and stores it by TMA (the kernel's
    EPI_TMA): `tma_store`, a 128- or 256-wide tile (64-wide ones keep their register epilogue
    and their two CTAs an SM), no split-K (its partials are stored from registers) and no swap
    (its tile is stored transposed, from registers)."""
    return cfg.tma_store and cfg.block_n >= 128 and cfg.split_k == 1 and not cfg.swap_ab


def tma_store_fits(p: MatmulParams) -> bool:
    """Whether C's rows are whole 16-byte units (N times the output's size), as a TMA map of
    C needs."""
    return p.n * (4 if p.out_dtype == "float32" else 2) % 16 == 0


def supported(p: MatmulParams, dev: Any) -> bool:
    """Whether this kernel serves p on dev: an sm_90 GPU (wgmma is sm_90a's), B either way."""
    del p
    return dev.arch == "sm_90"


def configs(p: MatmulParams, dev: Any) -> list[MatmulSm90Config]:
    """Every config whose shared memory fits the device (empty where `supported` is false):
    each (block_n, stages) plain, then each again as a cluster of two (B as (N, K) only), then
    all of those again persistent (`heuristic` picks one: LARGE_PICK), then the
    split-K ones (SPLIT_BLOCK_NS x SPLIT_STAGE_COUNTS x each split_k > 1), then the split-tail
    ones (TAIL_CONFIGS), and for B as (N, K) with M <= SWAP_MAX_M the swapped ones
    (`swap_block_n`'s width, each of SWAP_STAGE_COUNTS and SPLIT_KS)."""
    if not supported(p, dev):
        return []
    out = []
    for persistent in (False, True):
        for cluster_m in CLUSTER_MS if p.b_transposed else (1,):
            for block_n in BLOCK_NS:
                for stages in STAGE_COUNTS:
                    out.append(
                        MatmulSm90Config(
                            block_n, stages, cluster_m=cluster_m, persistent=persistent
                        )
                    )
    for split_k in SPLIT_KS[1:]:
        for block_n in SPLIT_BLOCK_NS:
            for stages in SPLIT_STAGE_COUNTS:
                out.append(MatmulSm90Config(block_n, stages, split_k=split_k))
    for block_n, stages in TAIL_CONFIGS:
        out.append(MatmulSm90Config(block_n, stages, tail=True))
    if p.b_transposed and p.m <= SWAP_MAX_M:
        for split_k in SPLIT_KS:
            for stages in SWAP_STAGE_COUNTS:
                out.append(MatmulSm90Config(swap_block_n(p), stages, split_k=split_k, swap_ab=True))
    return [cfg for cfg in out if cfg.smem() <= dev.max_smem_per_block_optin]


def swap_block_n(p: MatmulParams) -> int:
    """The narrowest of SWAP_BLOCK_NS that holds p's M rows (a swapped tile's columns)."""
    return next((n for n in SWAP_BLOCK_NS if n >= p.m), SWAP_BLOCK_NS[-1])


def ctas_per_sm(cfg: MatmulSm90Config, dev: Any, registers: int | None = None) -> int:
    """CTAs of cfg one SM of dev holds at once: the least of what its threads, shared memory
    (+ the system's SMEM_RESERVED a CTA) and registers allow; `registers` a thread (default the
    budget REGISTERS[block_n]) is allocated in units of 8 (256 a warp)."""
    regs = -(-(registers or REGISTERS[cfg.block_n]) // 8) * 8
    return min(
        dev.max_threads_per_sm // THREADS,
        dev.max_smem_per_sm // (cfg.smem() + SMEM_RESERVED),
        dev.regs_per_sm // (regs * THREADS),
    )


def grid(p: MatmulParams, cfg: MatmulSm90Config, dev: Any) -> tuple[int, int, int]:
    """One CTA per tile; with clusters the M tiles are padded to a multiple of cluster_m (the
    kernel's __cluster_dims__ needs the grid a multiple of the cluster). Persistent: no more
    CTAs than dev's SMs hold at once (`ctas_per_sm`), rounded down to whole clusters, nor than
    the (padded) tiles; the kernel loops over the rest."""
    tm, tn = cfg.tiles(p)
    tm = -(-tm // cfg.cluster_m) * cfg.cluster_m
    ctas = tm * tn
    if cfg.tail:
        dp_tiles, splits = tail_plan(p, cfg, dev)
        ctas = dp_tiles + (ctas - dp_tiles) * splits
    if cfg.persistent:
        resident = dev.sm_count * ctas_per_sm(cfg, dev) // cfg.cluster_m * cfg.cluster_m
        ctas = min(ctas, max(resident, cfg.cluster_m))
    return (ctas, cfg.split_k, 1)


def tail_plan(p: MatmulParams, cfg: MatmulSm90Config, dev: Any) -> tuple[int, int]:
    """(dp_tiles, splits) of a `tail` config: the tiles of the whole waves (dev's SMs x
    `ctas_per_sm` slots each) run whole, one CTA each, and each of the remaining tiles (the
    partial last wave) over `splits` CTAs along K: as many as fill that wave's slots, at most
    TAIL_MAX_SPLITS, each with at least TAIL_MIN_K_TILES k tiles. (all tiles, 1): no split tail
    (not a `tail` config, fewer tiles than one wave, whole waves, or a tail too large or K too
    short to split)."""
    tm, tn = cfg.tiles(p)
    tiles = tm * tn
    slots = dev.sm_count * ctas_per_sm(cfg, dev)
    waves, rest = divmod(tiles, slots)
    k_tiles = -(-p.k // BLOCK_K)
    splits = min(slots // rest, TAIL_MAX_SPLITS, k_tiles // TAIL_MIN_K_TILES) if rest else 1
    if not cfg.tail or waves == 0 or splits < 2:
        return tiles, 1
    return tiles - rest, splits


def spec(p: MatmulParams, cfg: MatmulSm90Config, dev: Any = None) -> KernelSpec:
    """The variant for (dtypes, bias, block_n, stages, cluster_m, persistent, split_k, tail,
    swap_ab);
    independent of m, n, k and raster (and of the split tail's plan: `tail` adds the workspace,
    dp_tiles and splits as launch arguments). CLUSTER_M is a macro (the kernel's __cluster_dims__ is
    preprocessed on it); PERSISTENT a constant (0: the one-tile-per-CTA code, unchanged by the
    persistent one). With split_k > 1 the kernel writes fp32 partials without the bias (Out
    float, HAS_BIAS 0); the sum (`spio.kernels.matmul_splitk_reduce`) applies p's output type
    and bias."""
    from spio.generators import Constant, Macro, Type, dtype

    del dev
    if cfg.swap_ab and not p.b_transposed:
        raise ValueError(
            "matmul_sm90: swap_ab reads B as the kernel's K-major A; pass B as (N, K) "
            "(b_transposed=True) or run an unswapped config"
        )
    if not p.b_transposed and cfg.cluster_m > 1:
        raise ValueError(
            f"matmul_sm90: a row-major (K, N) B runs without clusters (cluster_m=1), got "
            f"cluster_m={cfg.cluster_m}; pass B as (N, K) (b_transposed=True) for clusters"
        )
    split = cfg.split_k > 1
    epi_tma = stores_by_tma(cfg)
    constants = {
        "BLOCK_N": cfg.block_n,
        "STAGES": cfg.stages,
        "HAS_BIAS": int(p.has_bias and not split),
        "PERSISTENT": int(cfg.persistent),
        "SPLIT_K": cfg.split_k,
    }
    tiles = smem_tiles(cfg, p.b_transposed)
    return KernelSpec(
        source="matmul_sm90.cu",
        entry="matmul_sm90",
        # c, a_map, b_map, (c_map,) bias, m, n, k, raster, (ws, dp_tiles, splits)
        signature=("ptttpiiii" if epi_tma else "pttpiiii") + ("pii" if cfg.tail else ""),
        specs={
            "Element": Type(dtype.by_name(p.dtype)),
            "Out": Type(dtype.by_name("float32" if split else p.out_dtype)),
            **tiles,
            **{name: Constant(value) for name, value in constants.items()},
            "CLUSTER_M": Macro(cfg.cluster_m),
            "EPI_TMA": Macro(int(epi_tma)),
            "TAIL": Macro(int(cfg.tail)),
            "B_MN_MAJOR": Macro(int(not p.b_transposed)),
            "A_MN_MAJOR": Macro(int(cfg.a_transposed)),
            "SWAP_AB": Macro(int(cfg.swap_ab)),
        },
        title=(
            f"matmul_sm90 {p.dtype}->{p.out_dtype} bias={p.has_bias}"
            + (" A (K, M)" if cfg.a_transposed else "")
            + ("" if p.b_transposed else " B (K, N)")
            + f" tile {BLOCK_M}x"
            f"{cfg.block_n}x{BLOCK_K} stages {cfg.stages}"
            + (f" cluster {cfg.cluster_m}x1" if cfg.cluster_m > 1 else "")
            + (" persistent" if cfg.persistent else "")
            + (f" split-K {cfg.split_k} (fp32 partials)" if split else "")
            + (" split tail" if cfg.tail else "")
            + (" TMA-store epilogue" if epi_tma else "")
            + (" swapped (C^T = B A^T)" if cfg.swap_ab else "")
        ),
        block=(THREADS, 1, 1),
        smem=cfg.smem(),
        arch_suffix="a",
        # 128- and 256-wide tiles rebalance registers (setmaxnreg) from the launch's cap.
        min_registers=REGISTERS[cfg.block_n] if cfg.block_n >= 128 else 0,
    )


def smem_tiles(cfg: MatmulSm90Config, b_transposed: bool = True) -> dict[str, Any]:
    """The typed shared-memory ring the TMA maps write: SmemA (STAGE, M 128, K8 8) and SmemB
    (STAGE, N block_n, K8 8) of 16-byte chunks (8 elements along K), each row one 128-byte
    line, XOR-swizzled as the 128-byte swizzle places chunks: chunk k8 of row m at k8 ^ (m % 8).
    The wgmma descriptors read the same layout (Swizzle::B128, 8-row atoms of 1024 bytes).
    A row-major (K, N) B (`b_transposed` false) is N-major instead: SmemB (STAGE, NB block_n /
    64, KROW 64, N8 8), block nb one TMA box of 64 k rows x 64 n, chunk n8 of row k at
    n8 ^ (k % 8). An A given as (K, M) (`cfg.a_transposed`) likewise: SmemA (STAGE, MB 2,
    KROW 64, M8 8), block mb holding m 64 mb.. of the tile.
    With the TMA-store epilogue (`stores_by_tma`), also its staging SmemC (EPI 4, ROW 64, CH 8):
    two buffers per consumer warpgroup, each 64 rows of one 128-byte box row in 16-byte chunks,
    in the same swizzle (chunk ch of row r at ch ^ (r % 8)): what TMA's store reads."""
    from spio.generators import Dim, Tensor, Xor, dtype

    M, N, K, STAGE = Dim(), Dim(), Dim(), Dim()
    K8 = K / 8
    chunks = BLOCK_K // 8
    staging: dict[str, Any] = {}
    if stores_by_tma(cfg):
        EPI, ROW, CH = Dim(), Dim(), Dim()
        buffers = STAGING_BYTES // (BOX_ROWS * BOX_BYTES)
        staging = {
            "EPI": EPI,
            "ROW": ROW,
            "CH": CH,
            "SmemC": Tensor(
                (EPI(buffers), ROW(BOX_ROWS), CH(BOX_BYTES // 16)),
                dtype.uint4,
                swizzle=Xor(ROW, CH, 3),
            ),
        }
    if b_transposed:
        b_ring: dict[str, Any] = {
            "SmemB": Tensor(
                (STAGE(cfg.stages), N(cfg.block_n), K8(chunks)), dtype.uint4, swizzle=Xor(N, K8, 3)
            )
        }
    else:
        NB, KROW, N8 = Dim(), Dim(), Dim()
        b_ring = {
            "NB": NB,
            "KROW": KROW,
            "N8": N8,
            "SmemB": Tensor(
                (STAGE(cfg.stages), NB(cfg.block_n // 64), KROW(BLOCK_K), N8(8)),
                dtype.uint4,
                swizzle=Xor(KROW, N8, 3),
            ),
        }
    if cfg.a_transposed:
        MB, M8 = Dim(), Dim()
        KROW = b_ring.get("KROW", Dim())
        a_ring: dict[str, Any] = {
            "MB": MB,
            "M8": M8,
            "KROW": KROW,
            "SmemA": Tensor(
                (STAGE(cfg.stages), MB(BLOCK_M // 64), KROW(BLOCK_K), M8(8)),
                dtype.uint4,
                swizzle=Xor(KROW, M8, 3),
            ),
        }
    else:
        a_ring = {
            "SmemA": Tensor(
                (STAGE(cfg.stages), M(BLOCK_M), K8(chunks)), dtype.uint4, swizzle=Xor(M, K8, 3)
            )
        }
    return {
        **staging,
        **b_ring,
        "M": M,
        "N": N,
        "K": K,
        "K8": K8,
        "STAGE": STAGE,
        **a_ring,
    }


def launch(
    p: MatmulParams,
    cfg: MatmulSm90Config,
    c: Any,
    a: Any,
    b: Any,
    bias: Any = None,
    *,
    stream: int = 0,
    cache: Any = None,
    device: Any = None,
) -> None:
    """Runs C = A @ B^T (+ bias) with one config on torch tensors (C allocated, (M, N); B (N, K)
    or with `p.b_transposed` false (K, N), N a multiple of 8 there: its rows start 16-byte
    aligned); the variant is loaded through `cache` (default: the process's shared function
    cache). A C that does not start 16-byte aligned is stored from registers (`tma_store` off)."""
    import torch

    from spio.cuda import device_attributes

    dt = getattr(torch, p.dtype)
    for name, t, shape, dtype in (
        ("a", a, (p.k, p.m) if cfg.a_transposed else (p.m, p.k), dt),
        ("b", b, p.b_shape, dt),
        ("c", c, (p.m, p.n), getattr(torch, p.out_dtype)),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(
                f"matmul_sm90 launch: {name} must be a contiguous {dtype} tensor of shape "
                f"{shape}, got {t.dtype} {tuple(t.shape)} (contiguous: {t.is_contiguous()})"
            )
        if name != "c" and t.data_ptr() % 16:
            raise ValueError(
                f"matmul_sm90 launch: {name} must start 16-byte aligned (TMA reads it), got "
                f"address {t.data_ptr():#x}; pass {name}.clone() (a fresh allocation is aligned)"
            )
    if cfg.a_transposed and p.m % 8:
        raise ValueError(
            f"matmul_sm90 launch: an a given as (K, M) (a_transposed) needs M % 8 == 0 (TMA reads "
            f"rows that start 16-byte aligned), got M={p.m}; pass A as (M, K) instead"
        )
    if not p.b_transposed and p.n % 8:
        raise ValueError(
            f"matmul_sm90 launch: a row-major (K, N) b needs N % 8 == 0 (TMA reads rows that "
            f"start 16-byte aligned), got N={p.n}; pad b's columns with zeros to a multiple of 8 "
            "and slice C, or pass B as (N, K) (b_transposed=True)"
        )
    if p.has_bias != (bias is not None):
        raise ValueError(f"matmul_sm90 launch: has_bias={p.has_bias} but bias is {bias!r:.40}")
    if bias is not None and (
        tuple(bias.shape) != (p.n,) or bias.dtype != dt or not bias.is_contiguous()
    ):
        raise ValueError(
            f"matmul_sm90 launch: bias must be a contiguous {dt} tensor of shape ({p.n},), got "
            f"{bias.dtype} {tuple(bias.shape)} (contiguous: {bias.is_contiguous()})"
        )
    device = device or device_attributes(c.device.index or 0)
    if c.data_ptr() % 16:
        cfg = replace(cfg, tma_store=False)  # a TMA map of C needs a 16-byte aligned start
    bound(p, cfg, device, cache)(c, a, b, bias, stream)


# The heuristic's cost model (`predicted_us`): a config of family (block_n, stages, split-K or
# not) takes waves x (k tiles per CTA x A + B) µs, waves = the CTAs over the SMs' resident
# slots rounded up (`cost_terms`: wave quantization is what separates the configs at mid-size
# shapes), and split-K adds C µs per MB of fp32 partials (written, then read by the sum) plus D
# (its second launch). A, B, C, D are fitted (least squares of the relative error; C >= 0) to every
# config timed at 57 shapes on an H100 and an H200 (benchmarks/data/sweeps/
# matmul_sm90_yardstick57__*.csv, `benchmarks/bench_matmul_sm90.py`); `benchmarks/
# fit_matmul_sm90.py` reproduces these numbers and scores the picks (docs/ops/matmul.md).
HEURISTIC_CANDIDATES = (
    MatmulSm90Config(block_n=256, stages=4),
    MatmulSm90Config(block_n=128, stages=6),
    MatmulSm90Config(block_n=64, stages=4),
    *(MatmulSm90Config(block_n=n, stages=6, split_k=k) for n in (128, 64) for k in (2, 4, 8)),
)
# (block_n, stages, split-K) -> (A: µs per wave and k tile, B: µs per wave)
WAVE_COST_US = {
    (256, 4, False): (0.6888, 6.257),
    (128, 6, True): (0.455, 5.773),
    (128, 6, False): (0.4783, 3.703),
    (64, 6, True): (0.3657, 3.298),
    (64, 4, False): (0.525, 4.918),
}
SPLIT_COST_US = (0.0, 5.72)  # (C: µs per MB of fp32 partials, D: µs)
# The split tail (`tail_plan`): the whole waves as the plain config, the tail's wave as one
# wave of its split k range (the same family's A and B), and split-K's D for its sum. Its
# candidates; the predicted share of the best other pick's time under which one is taken; and
# the most whole waves before it. Measured on an H200 (docs/ops/matmul.md, "Nineteenth
# session"): behind 1-5 whole waves it saved 2-30% where predicted to save 9-32% (the least at
# 6000 x 1000 x 3000 and 2048 x 11008 x 4096), and lost 4-5% where predicted to save 8% (1152 x
# 4608 x 1152); behind 6 or 10 (5000³, 4096 x 11008 x 4096) it saved nothing: with many waves
# the CTAs' finishing times spread, and the plain kernel's last partial wave fills in behind
# them. A tail call costs split-K's host time (SPLIT_HOST_US), which the rule floors it at.
TAIL_CANDIDATES = (MatmulSm90Config(block_n=256, stages=4, tail=True),)
TAIL_MARGIN = 0.92
TAIL_MAX_WAVES = 5
# Large products: where the cost model picks the plain 256-wide tile (HEURISTIC_CANDIDATES[0])
# and its tiles take LARGE_MIN_WAVES waves or more, the heuristic runs the persistent 256-wide
# config in clusters of two instead (B as (N, K) only: the cluster multicasts B). Timed at the 16
# shapes of the 57-shape H100 yardstick where the rule applies (twenty-first session, after
# setmaxnreg; two runs): 0.84-1.01x the plain config's time, median 0.92 (5000^3 0.84-0.88,
# 4096 x 11008 x 4096 0.92, 8192^3 0.98-1.00); on an H200 (one run) 0.88-1.03x, median 0.97.
# Where the cost model picks a split tail instead (fewer, uneven waves) they lost up to 26% at
# four of its six shapes, so the rule leaves those picks alone.
# It needs LARGE_MIN_M_TILES rows of tiles, the fewest it was timed at (1024 x 8192 x 1024): a
# cluster pads the M tiles to pairs, so with one row (an LM head at decode, M <= 128 against a
# very large N) half its CTAs would compute on zeros.
LARGE_PICK = MatmulSm90Config(block_n=256, stages=3, cluster_m=2, persistent=True)
LARGE_MIN_WAVES = 2
LARGE_MIN_M_TILES = 8
# The most fp32 partials (MB) a split-K pick may take per call (the op allocates them).
SPLIT_WORKSPACE_MAX_MB = 64
# Decode products (`swap_choice`): M <= SWAP_MAX_M rows of A against at least SWAP_MIN_N rows of
# B as (N, K) run swapped, with SWAP_STAGES slots, split over K where each split keeps at least
# SWAP_MIN_K_TILES k tiles.
SWAP_MIN_N = 128
SWAP_STAGES = 6
SWAP_MIN_K_TILES = 4
# Host µs of one eager call of the op (`spio bench matmul`'s spio_host_us on the H100 and H200
# machines: 12-14 plain, 20-35 split-K, whose call also allocates the partials and launches the
# sum). Back-to-back calls take the larger of host and GPU time, so `heuristic` splits only where
# the split's predicted GPU time, floored at SPLIT_HOST_US, beats the plain pick's floored at
# PLAIN_HOST_US: a product too small to keep the GPU busier than the host stays unsplit.
PLAIN_HOST_US, SPLIT_HOST_US = 13.0, 25.0


def host_us(cfg: MatmulSm90Config) -> float:
    """Host µs of one eager call of `cfg`'s kind: SPLIT_HOST_US with a second launch (split-K,
    a split tail), else PLAIN_HOST_US."""
    return SPLIT_HOST_US if cfg.split_k > 1 or cfg.tail else PLAIN_HOST_US


def cost_terms(p: MatmulParams, cfg: MatmulSm90Config, dev: Any) -> tuple[int, int]:
    """(waves, k tiles per CTA) of a plain or split-K config: waves = its CTAs over dev's SMs x
    `ctas_per_sm` slots, rounded up; each CTA runs ceil(k tiles / split_k) k tiles."""
    tm, tn = cfg.tiles(p)
    slots = dev.sm_count * ctas_per_sm(cfg, dev)
    waves = -(-(tm * tn * cfg.split_k) // slots)
    k_tiles = -(-p.k // BLOCK_K)
    return waves, -(-k_tiles // cfg.split_k)


def split_mb(p: MatmulParams, cfg: MatmulSm90Config) -> float:
    """MB of fp32 partials a split-K config writes (0 without split-K)."""
    return cfg.split_k * p.m * p.n * 4 / 1e6 if cfg.split_k > 1 else 0.0


def cost_family(cfg: MatmulSm90Config) -> tuple[int, int, bool]:
    """The WAVE_COST_US key of a config: (block_n, stages, split-K or not)."""
    return (cfg.block_n, cfg.stages, cfg.split_k > 1)


def predicted_us(
    p: MatmulParams,
    cfg: MatmulSm90Config,
    dev: Any,
    wave_cost: Any = None,
    split_cost: tuple[float, float] | None = None,
) -> float:
    """The cost model's time of a HEURISTIC_CANDIDATES or TAIL_CANDIDATES config: WAVE_COST_US
    and SPLIT_COST_US, or the tables given (what a fit is scored with). A split tail: its whole
    waves as the plain config's, its tail one wave of ceil(k tiles / splits) k tiles, plus
    split-K's D (the sum's launch); without a tail (`tail_plan`), the plain config's time."""
    a, b = (wave_cost or WAVE_COST_US)[cost_family(cfg)]
    dp_tiles, splits = tail_plan(p, cfg, dev)
    if splits > 1:
        k_tiles = -(-p.k // BLOCK_K)
        whole = dp_tiles // (dev.sm_count * ctas_per_sm(cfg, dev))
        return (
            whole * (k_tiles * a + b)
            + (-(-k_tiles // splits) * a + b)
            + (split_cost or SPLIT_COST_US)[1]
        )
    waves, k_tiles = cost_terms(p, cfg, dev)
    us = waves * (k_tiles * a + b)
    if cfg.split_k > 1:
        c, d = split_cost or SPLIT_COST_US
        us += split_mb(p, cfg) * c + d
    return us


def heuristic(p: MatmulParams, dev: Any) -> MatmulSm90Config:
    """The HEURISTIC_CANDIDATES config of least `predicted_us` (split-K ones only within
    SPLIT_WORKSPACE_MAX_MB, and only where they beat the plain pick as called: `cost_pick`,
    PLAIN_HOST_US), or a split tail where it is predicted to save more than 1 - TAIL_MARGIN
    (TAIL_CANDIDATES, TAIL_MAX_WAVES); LARGE_PICK instead of a plain 256-wide pick of two or
    more waves (`large_pick`); for N <= 64, 64-wide tiles (`split_choice`'s split-K
    config for one row of tiles with K long enough, else 4 slots). On the 57 shapes of the
    yardstick (eighteenth session: no split tails, no LARGE_PICK),
    each held out of the fit in turn, the picks' time over the best config's is median 1.016,
    p90 1.121, max 1.333 (as called 1.010 / 1.117 / 1.306) on an H100 and an H200 together,
    the max at a 12 µs product, 333 x 777 x 1000 (the previous rule, 128 x 256 tiles
    unless they left half the SMs idle: max 2.54 / 2.82, at 512 x 1024 x 16384, where split-K
    wins; docs/ops/matmul.md). Decode products (M <= SWAP_MAX_M, B as (N, K)) run swapped
    (`swap_choice`); the rest is `unswapped`."""
    return swap_choice(p, dev) or unswapped(p, dev)


def unswapped(p: MatmulParams, dev: Any) -> MatmulSm90Config:
    """`heuristic`'s pick among the unswapped configs (what the op runs where a swapped pick
    cannot: an A it reads transposed)."""
    if p.n <= 64:
        return split_choice(p, dev) or MatmulSm90Config(block_n=64, stages=4)
    return large_pick(p, cost_pick(p, dev), dev)


def swap_choice(p: MatmulParams, dev: Any) -> MatmulSm90Config | None:
    """The swapped config for a decode product (B as (N, K), M <= SWAP_MAX_M, N >=
    SWAP_MIN_N), else None: `swap_block_n`'s width, SWAP_STAGES slots, and the most splits of
    K (SPLIT_KS) whose CTAs number at most one an SM, with SWAP_MIN_K_TILES k tiles a split or
    more and none left empty (`splits_fill`), and whose partials stay within
    SPLIT_WORKSPACE_MAX_MB."""
    if not p.b_transposed or p.m > SWAP_MAX_M or p.n < SWAP_MIN_N:
        return None
    cfg = MatmulSm90Config(swap_block_n(p), SWAP_STAGES, swap_ab=True)
    if cfg.smem() > dev.max_smem_per_block_optin:
        return None
    tiles = cfg.tiles(p)[0] * cfg.tiles(p)[1]
    k_tiles = -(-p.k // BLOCK_K)
    for split_k in reversed(SPLIT_KS[1:]):
        split = replace(cfg, split_k=split_k)
        if (
            tiles * split_k <= dev.sm_count
            and k_tiles >= SWAP_MIN_K_TILES * split_k
            and splits_fill(k_tiles, split_k)
            and split_mb(p, split) <= SPLIT_WORKSPACE_MAX_MB
        ):
            return split
    return cfg


def splits_fill(k_tiles: int, split_k: int) -> bool:
    """Whether split_k CTAs of ceil(k_tiles / split_k) k tiles each (the kernel's split) all get
    some: 33 k tiles in 8 would leave the last CTA none (it stores zeros)."""
    return -(-k_tiles // split_k) * (split_k - 1) < k_tiles


def large_pick(p: MatmulParams, pick: MatmulSm90Config, dev: Any) -> MatmulSm90Config:
    """LARGE_PICK in place of the cost model's plain 256-wide pick where those tiles take at
    least LARGE_MIN_WAVES waves (`cost_terms`: more than one wave's worth of tiles), there are
    at least LARGE_MIN_M_TILES rows of tiles, and B is (N, K) (clusters multicast B's rows; an A
    the op reads transposed runs it without the cluster); else `pick`."""
    if (
        pick == HEURISTIC_CANDIDATES[0]
        and p.b_transposed
        and LARGE_PICK.smem() <= dev.max_smem_per_block_optin
        and pick.tiles(p)[0] >= LARGE_MIN_M_TILES
        and cost_terms(p, pick, dev)[0] >= LARGE_MIN_WAVES
    ):
        return LARGE_PICK
    return pick


def cost_pick(
    p: MatmulParams,
    dev: Any,
    wave_cost: Any = None,
    split_cost: tuple[float, float] | None = None,
    tails: bool = True,
) -> MatmulSm90Config:
    """`heuristic`'s rule for N > 64 (with the cost tables given, for a fit's scoring): the
    plain and the split-K candidate of least `predicted_us`; the split one only where its time
    floored at SPLIT_HOST_US is below the plain one's floored at PLAIN_HOST_US. Then, with
    `tails`, a TAIL_CANDIDATES config whose problem has a split tail where its time is under
    TAIL_MARGIN of that pick's, behind at most TAIL_MAX_WAVES whole waves (the yardstick's fit
    scores without tails: its files time none)."""
    fits = [
        c
        for c in HEURISTIC_CANDIDATES
        if c.smem() <= dev.max_smem_per_block_optin and split_mb(p, c) <= SPLIT_WORKSPACE_MAX_MB
    ]

    def us(c: MatmulSm90Config) -> float:
        return predicted_us(p, c, dev, wave_cost, split_cost)

    plain = min((c for c in fits if c.split_k == 1), key=us)
    split = min((c for c in fits if c.split_k > 1), key=us, default=None)
    pick = plain
    if split is not None and max(us(split), SPLIT_HOST_US) < max(us(plain), PLAIN_HOST_US):
        pick = split
    if tails:
        for tail in TAIL_CANDIDATES:
            dp_tiles, splits = tail_plan(p, tail, dev)
            waves = dp_tiles // (dev.sm_count * ctas_per_sm(tail, dev))
            if (
                tail.smem() <= dev.max_smem_per_block_optin
                and splits > 1
                and waves <= TAIL_MAX_WAVES
                and max(us(tail), SPLIT_HOST_US) < TAIL_MARGIN * us(pick)
            ):
                pick = tail
    return pick


AUTOTUNE_CANDIDATES = 5  # `ranked`'s length: what SPIO_AUTOTUNE measures (the selector's TOP_K)
# Persistent CTAs (one per SM slot, each walking tiles; the cluster one loads B once per pair of
# M tiles), which `ranked` takes where 256-wide tiles fill more than one wave. Timed at the 57
# shapes of the yardstick (H100, twenty-first session: setmaxnreg made them 6-15% faster), a
# persistent config was the fastest of the space at 21 of them, up to 16% faster than the best
# HEURISTIC_CANDIDATES config (5000^3); which one wins varies, and each loses up to 35% at
# other shapes: the cost model of waves cannot tell, a measurement can. Of five pairs compared
# on those timings, this one brought autotune's max closest to the best (docs/ops/matmul.md,
# "Twenty-first session").
PERSISTENT_CANDIDATES = (
    MatmulSm90Config(block_n=256, stages=3, cluster_m=2, persistent=True),
    MatmulSm90Config(block_n=128, stages=6, persistent=True),
)


def ranked(p: MatmulParams, dev: Any) -> list[MatmulSm90Config]:
    """The cost model's ranking, best first, for `SPIO_AUTOTUNE` (`KernelDef.ranked`): the
    `heuristic` pick, then the other HEURISTIC_CANDIDATES and TAIL_CANDIDATES (a tail only where
    the problem has one: `tail_plan`) that fit, by `predicted_us` floored at the host time of a
    call (PLAIN_HOST_US, SPLIT_HOST_US for split-K and tails), then unfloored, and last the
    PERSISTENT_CANDIDATES where 256-wide tiles take LARGE_MIN_WAVES waves or more (the cluster
    one only for B as (N, K) and two rows of tiles or more); at most AUTOTUNE_CANDIDATES.
    Split-K and tails are left out where the pick is plain and predicted under SPLIT_HOST_US:
    autotune times the GPU alone, and there a split's second launch costs more host time than
    it can save."""
    first = heuristic(p, dev)
    if first.swap_ab:
        return swap_ranked(p, first, dev)
    model = HEURISTIC_CANDIDATES[0] if first == LARGE_PICK else first  # the cost model's pick
    fits = [
        c
        for c in (*HEURISTIC_CANDIDATES, *TAIL_CANDIDATES)
        if c.smem() <= dev.max_smem_per_block_optin
        and split_mb(p, c) <= SPLIT_WORKSPACE_MAX_MB
        and (not c.tail or tail_plan(p, c, dev)[1] > 1)
    ]
    if model.split_k == 1 and not model.tail and predicted_us(p, model, dev) < SPLIT_HOST_US:
        fits = [c for c in fits if c.split_k == 1 and not c.tail]

    def key(c: MatmulSm90Config) -> tuple[float, float]:
        us = predicted_us(p, c, dev)
        return max(us, host_us(c)), us

    rest = sorted((c for c in fits if c != first), key=key)
    wide = HEURISTIC_CANDIDATES[0]
    waves = cost_terms(p, wide, dev)[0]
    extra = [
        c
        for c in PERSISTENT_CANDIDATES
        if p.n > 64
        and waves >= LARGE_MIN_WAVES
        and c.smem() <= dev.max_smem_per_block_optin
        and (c.cluster_m == 1 or (p.b_transposed and wide.tiles(p)[0] >= 2))
        and c != first
    ]
    keep = AUTOTUNE_CANDIDATES - 1 - len(extra)
    return [first, *rest[:keep], *extra]


def swap_ranked(p: MatmulParams, first: MatmulSm90Config, dev: Any) -> list[MatmulSm90Config]:
    """`ranked` for a swapped pick: it, the same tile with the other splits of K that fit one
    wave of the SMs' slots with two k tiles each or more and none empty (most splits first) and
    without a split, then the unswapped pick; at most AUTOTUNE_CANDIDATES."""
    tiles = first.tiles(p)[0] * first.tiles(p)[1]
    slots = dev.sm_count * ctas_per_sm(first, dev)
    k_tiles = -(-p.k // BLOCK_K)
    splits = [
        replace(first, split_k=k)
        for k in reversed(SPLIT_KS)
        if k != first.split_k
        and (k == 1 or (tiles * k <= slots and k_tiles >= 2 * k and splits_fill(k_tiles, k)))
        and split_mb(p, replace(first, split_k=k)) <= SPLIT_WORKSPACE_MAX_MB
    ]
    return [first, *splits[: AUTOTUNE_CANDIDATES - 2], unswapped(p, dev)]


def make_runner(p: MatmulParams, cfg: MatmulSm90Config) -> Any:
    """A zero-argument launch of (p, cfg) as the op binds it (`bound`; a split's workspace from
    PyTorch's allocator each call, as the op's) on fresh random inputs on the current GPU."""
    import torch

    from spio.cuda import device_attributes

    index = torch.cuda.current_device()
    dev = torch.device("cuda", index)
    dt = getattr(torch, p.dtype)
    padded_n = p.n + (-p.n) % 8  # a row-major B's rows, padded as the op pads them
    a = torch.randn(p.m, p.k, device=dev).to(dt)
    b = torch.randn(*((p.n, p.k) if p.b_transposed else (p.k, padded_n)), device=dev).to(dt)
    bias = torch.randn(p.n, device=dev).to(dt) if p.has_bias else None
    c = torch.empty(p.m, p.n, device=dev, dtype=getattr(torch, p.out_dtype))
    run = bound(p, cfg, device_attributes(index), ldb=None if p.b_transposed else padded_n)
    stream = torch.cuda.current_stream(dev).cuda_stream
    if run.workspace is None:
        return lambda: run(c, a, b, bias, stream)
    size = run.workspace
    return lambda: run(c, a, b, bias, stream, torch.empty(size, dtype=torch.float32, device=dev))


# Not in spio.kernels.KERNELS (no dataset or trained model: `spio tune` skips it); the op selects
# through the selector (`KernelDef.ranked`: the cost model's pick, SPIO_AUTOTUNE measures its
# ranking) and the loaded variants live in the shared function cache like every other kernel's.
DEF = KernelDef(
    name="matmul_sm90",
    params_type=MatmulParams,
    config_type=MatmulSm90Config,
    configs=configs,
    spec=spec,
    heuristic=heuristic,
    stats=stats,
    make_runner=make_runner,
    compiled_params=MatmulParams.variant,
    ranked=ranked,
)


def split_choice(p: MatmulParams, dev: Any) -> MatmulSm90Config | None:
    """The split-K config for one row of tiles (M <= 128, decode) with K long enough: as many
    parts of >= 8 k tiles as keep the CTAs within one per SM, 6 slots; None otherwise. On the
    H100 it brought the kernel to cuBLAS's time at 16 x 4096 x 4096 (L2 flushed: 0.72 -> 0.96-
    1.00; graph replay, B in L2: 0.35 -> 0.61); its second launch and workspace cost the op as
    called a few µs of host time (docs/ops/matmul.md, "Split-K for decode shapes")."""
    block_n = 64 if p.n <= 64 else 128
    tm, tn = MatmulSm90Config(block_n=block_n).tiles(p)
    k_tiles = -(-p.k // BLOCK_K)
    if tm == 1:
        for split_k in reversed(SPLIT_KS[1:]):
            if tn * split_k <= dev.sm_count and k_tiles >= 8 * split_k:
                return MatmulSm90Config(block_n=block_n, stages=6, split_k=split_k)
    return None


def bound(
    p: MatmulParams,
    cfg: MatmulSm90Config,
    dev: Any,
    cache: Any = None,
    ldb: int | None = None,
    lda: int | None = None,
) -> Sm90Launch:
    """The variant of (p, cfg) (and with split_k > 1 its sum's) loaded through `cache`
    (default: the process's shared function cache) and bound to p's problem: what the op's plan
    launches. `ldb`: a row-major (K, N) B's row stride in elements (default N; the op pads its
    rows to a multiple of 8); `lda` likewise an A given as (K, M) (`cfg.a_transposed`, default
    M). `tma_store` is turned off where C's rows are not whole 16-byte
    units, and is moot for split-K and 64-wide tiles (`stores_by_tma`): each of those runs one
    variant. A `tail` config whose problem has no split tail (`tail_plan`) runs the plain
    variant; one that has loads the tail's sum too."""
    from spio.kernels.loader import default_function_cache

    cache = cache if cache is not None else default_function_cache()
    if cfg.tma_store and not (stores_by_tma(cfg) and tma_store_fits(p)):
        cfg = replace(cfg, tma_store=False)
    # raster is a launch argument: one loaded variant serves every value.
    if cfg.tail and tail_plan(p, cfg, dev)[1] == 1:
        cfg = replace(cfg, tail=False)
    variant = p.variant()
    reduce = None
    if cfg.tail:
        reduce = cache.get(tail_sum.DEF, variant, tail_sum.TailSumConfig(cfg.block_n), dev)
    if cfg.split_k > 1:
        reduce = cache.get(splitk_sum.DEF, variant, splitk_sum.config_for(p, cfg.split_k), dev)
        # Its partials are fp32 without the bias whatever p's output: one variant serves all.
        variant = replace(variant, out_dtype="float32", has_bias=False)
    kernel = cache.get(DEF, variant, replace(cfg, raster=1), dev)
    return Sm90Launch(kernel, p, cfg, dev, reduce, ldb, lda)


class Sm90Launch:
    """A loaded variant bound to one problem (m, n, k): `launch(c, a, b, bias, stream)` runs
    C = A @ B^T (+ bias) on tensors `launch` would accept (contiguous, 16-byte aligned); the op
    checks them through its call signature instead of on every call.

    A tensor map holds its tensor's address, so each call needs the maps of its A and B (and
    with the TMA-store epilogue its C, which must start 16-byte aligned: the op's outputs do):
    one `spio.kernels.map_cache.MapCache` per operand (encoded once per address, at most
    MAP_CACHE addresses kept), so a steady loop encodes nothing and a hit is one dict lookup.

    Split-K (cfg.split_k > 1, `reduce` the loaded sum): each call takes a workspace of split_k
    x M x N floats (`workspace`, the shape): the caller's `workspace` tensor (fp32, contiguous,
    16-byte aligned, allocated for the launch stream: the op's plan passes one from PyTorch's
    allocator on the current stream), else one from PyTorch's allocator (recorded on the launch
    stream when that is not the current one, so it is not reused before the kernels are done).
    The main kernel writes its partials there and the sum (a dependent launch: PDL on sm_90)
    writes C. A split tail (cfg.tail, `reduce` its sum) takes a workspace the same way: one
    128 x block_n fp32 partial per CTA of the tail (`tail_plan`), summed per tail tile into C by
    the dependent second launch. `stream` is a raw handle (an int)."""

    MAP_CACHE = 64
    __slots__ = ("_launch", "_dims", "_a_maps", "_b_maps", "_c_maps", "_reduce", "_sum_args",
                 "_workspace", "_plan", "_swap")  # fmt: skip

    def __init__(
        self,
        kernel: Any,
        p: MatmulParams,
        cfg: MatmulSm90Config,
        dev: Any,
        reduce: Any = None,
        ldb: int | None = None,
        lda: int | None = None,
    ) -> None:
        from spio.kernels.map_cache import MapCache

        if (cfg.split_k > 1 or cfg.tail) != (reduce is not None):
            raise ValueError(
                f"Sm90Launch: split_k={cfg.split_k}, tail={cfg.tail} needs the second pass's "
                "kernel exactly when split_k > 1 or tail (matmul_sm90.bound loads it)"
            )
        self._plan: tuple[int, int] | None = None  # a split tail's (dp_tiles, splits)
        if cfg.tail:
            self._plan = tail_plan(p, cfg, dev)
            if self._plan[1] == 1:
                raise ValueError(
                    f"Sm90Launch: tail=True but {p.m}x{p.n}x{p.k} has no split tail on this GPU "
                    "(tail_plan); bind with `bound`, which runs the plain variant there"
                )
            if self._plan[1] > tail_sum.MAX_SPLITS:
                raise ValueError(
                    f"Sm90Launch: a split tail of {self._plan[1]} splits per tile; the sum takes "
                    f"at most {tail_sum.MAX_SPLITS} (TAIL_MAX_SPLITS must not exceed it)"
                )
        for name, ld, least, used in (("lda", lda, p.m, cfg.a_transposed),
                                      ("ldb", ldb, p.n, not p.b_transposed)):  # fmt: skip
            if ld is not None and (not used or ld < least or ld % 8):
                raise ValueError(
                    f"Sm90Launch: {name}={ld} must be a row stride of at least {least} elements "
                    f"and a multiple of 8, and is only taken for an operand given (K, M) / (K, N) "
                    f"(a_transposed={cfg.a_transposed}, b_transposed={p.b_transposed})"
                )
        self._launch = kernel.bind(grid(p, cfg, dev))
        # Swapped, the kernel's A is B and its B is A: its problem is C^T's, (N, M, K).
        self._swap = cfg.swap_ab
        self._dims = (p.n, p.m, p.k, cfg.raster) if cfg.swap_ab else (p.m, p.n, p.k, cfg.raster)
        self._reduce = None
        self._sum_args: tuple[int, ...] = (p.n, p.m * p.n)
        self._workspace = (cfg.split_k * p.m * p.n,)
        if self._plan is not None:
            dp_tiles, splits = self._plan
            tm, tn = cfg.tiles(p)
            tail_tiles = tm * tn - dp_tiles
            self._workspace = (tail_tiles * splits * BLOCK_M * cfg.block_n,)
            self._sum_args = (p.m, p.n, dp_tiles, splits, cfg.raster)
            sum_grid = tail_sum.grid(tail_sum.TailSumConfig(cfg.block_n), tail_tiles)
            self._reduce = reduce.bind(sum_grid, dependent=True)
        elif reduce is not None:
            sum_grid = splitk_sum.grid(p, splitk_sum.config_for(p, cfg.split_k))
            self._reduce = reduce.bind(sum_grid, dependent=True)

        def maps(rows: int, box_rows: int) -> MapCache:
            return MapCache(p.dtype, (rows, p.k), (p.k, 1), (box_rows, BLOCK_K), swizzle=128,
                            limit=self.MAP_CACHE)  # fmt: skip

        if cfg.a_transposed:  # (K, M) rows of lda elements, in boxes of 64 k rows x 64 m
            self._a_maps = MapCache(p.dtype, (p.k, p.m), (lda or p.m, 1), (BLOCK_K, 64),
                                    swizzle=128, limit=self.MAP_CACHE)  # fmt: skip
        else:  # swapped, the kernel's A map is over B (N, K)
            self._a_maps = maps(p.n, BLOCK_M) if cfg.swap_ab else maps(p.m, BLOCK_M)
        if cfg.swap_ab:  # the kernel's B map over A (M, K)
            self._b_maps = maps(p.m, cfg.block_n)
        elif p.b_transposed:
            # With a cluster each CTA copies 1 / cluster_m of the B tile (multicast to both).
            self._b_maps = maps(p.n, cfg.block_n // cfg.cluster_m)
        else:  # (K, N) rows of ldb elements, in boxes of 64 k rows x 64 n (128 bytes)
            self._b_maps = MapCache(p.dtype, (p.k, p.n), (ldb or p.n, 1), (BLOCK_K, 64),
                                    swizzle=128, limit=self.MAP_CACHE)  # fmt: skip
        # The epilogue's boxes: 64 rows x 128 bytes of C, in the staging's 128-byte swizzle.
        self._c_maps = None
        if stores_by_tma(cfg) and not tma_store_fits(p):
            raise ValueError(
                f"Sm90Launch: tma_store needs C's rows in whole 16-byte units, N={p.n} of "
                f"{p.out_dtype} are not; bind with `bound`, which turns tma_store off there"
            )
        if stores_by_tma(cfg):
            box_cols = BOX_BYTES // (4 if p.out_dtype == "float32" else 2)
            self._c_maps = MapCache(p.out_dtype, (p.m, p.n), (p.n, 1), (BOX_ROWS, box_cols),
                                    swizzle=128, limit=self.MAP_CACHE)  # fmt: skip

    @property
    def workspace(self) -> tuple[int, ...] | None:
        """The shape of the fp32 workspace a split-K or split-tail call takes (None for a plain
        config)."""
        return self._workspace if self._reduce is not None else None

    def __call__(
        self, c: Any, a: Any, b: Any, bias: Any, stream: int, workspace: Any = None
    ) -> None:
        if self._swap:
            a, b = b, a
        a_map = self._a_maps.get(a.data_ptr())
        b_map = self._b_maps.get(b.data_ptr())
        if self._plan is not None:
            self._call_tail(c, a_map, b_map, bias, stream, workspace)
            return
        if self._c_maps is not None:
            c_map = self._c_maps.get(c.data_ptr())
            self._launch((c, a_map, b_map, c_map, c if bias is None else bias, *self._dims), stream)
            return
        if self._reduce is None:
            self._launch((c, a_map, b_map, c if bias is None else bias, *self._dims), stream)
            return
        ws = self._workspace_for(c, stream, workspace)
        self._launch((ws, a_map, b_map, ws, *self._dims), stream)
        self._reduce((c, ws, ws if bias is None else bias, *self._sum_args), stream)

    def _call_tail(
        self, c: Any, a_map: Any, b_map: Any, bias: Any, stream: int, workspace: Any
    ) -> None:
        """A split tail's two launches: the main kernel (whole tiles to C, the tail's partials to
        the workspace), then the tail's sum."""
        assert self._plan is not None and self._reduce is not None
        ws = self._workspace_for(c, stream, workspace)
        plan = (ws, *self._plan)
        bias_arg = c if bias is None else bias
        if self._c_maps is not None:
            c_map = self._c_maps.get(c.data_ptr())
            self._launch((c, a_map, b_map, c_map, bias_arg, *self._dims, *plan), stream)
        else:
            self._launch((c, a_map, b_map, bias_arg, *self._dims, *plan), stream)
        self._reduce((c, ws, ws if bias is None else bias, *self._sum_args), stream)

    def _workspace_for(self, c: Any, stream: int, workspace: Any) -> Any:
        """The caller's workspace, else one from PyTorch's allocator for `stream`."""
        if workspace is not None:
            return workspace
        import torch

        ws = torch.empty(self._workspace, dtype=torch.float32, device=c.device)
        if stream != torch.cuda.current_stream(c.device).cuda_stream:
            # Freed when this returns: the allocator must not reuse it before `stream` is done.
            ws.record_stream(torch.cuda.ExternalStream(stream, device=c.device))
        return ws
