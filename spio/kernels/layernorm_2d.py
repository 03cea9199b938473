"""layernorm_2d kernel family: LayerNorm over the C channels of channels_last (N, C, H, W) data.

Three kernels (spio/src/layernorm_2d.cu and layernorm_2d_bwd.cu, which share
layernorm_2d_common.h, and layernorm_2d_bwd_reduce.cu, specified in layernorm_2d_reduce):
  layernorm_2d_fwd          y = (x - mean) * rstd * weight + bias; saves mean and rstd (fp32, M)
  layernorm_2d_bwd          dx, plus per-CTA partial sums of dweight = Σ dy·x̂ and dbias = Σ dy
  layernorm_2d_bwd_reduce   sums the per-CTA partials in a fixed order into dweight and dbias

No float atomics anywhere: for the same params, config and device, dweight and dbias are
bitwise reproducible. Params, configs and the heuristic live in layernorm_2d_params.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spio.kernels.kernel_def import SRC_DIR, KernelDef, KernelSpec, pow2_bucket
from spio.kernels.layernorm_2d_params import (
    LayerNorm2dConfig,
    LayerNorm2dParams,
    acc_in_smem,
    backward_stats,
    configs,
    examples,
    features,
    forward_stats,
    geometry,
    heuristic,
    sample_params,
)
from spio.kernels.layernorm_2d_reduce import (  # noqa: F401  (re-exported)
    BWD_REDUCE,
    MAX_ROWS,
    ReduceConfig,
    launch_reduce,
    needs_reduce,
    ordered_sum,
    reduce_config,
    reduce_configs,
    reduce_grid,
    reduce_heuristic,
    reduce_kernel,
    reduce_spec,
)


def _row_specs(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, backward: bool) -> dict[str, Any]:
    """Generator specs of spio/src/layernorm_2d.cu and layernorm_2d_bwd.cu: typed dims, row
    tensors, the thread decomposition and the compile-time constants (names the .cu uses)."""
    from spio.generators import CompoundIndex, Constant, Dim, Tensor, Type, dtype

    g = geometry(p, cfg)
    t, r = cfg.threads_per_row, cfg.rows_per_block
    row, c = Dim(), Dim()
    cv = c / g.vec  # one vector of VEC channels
    thread_dims = []
    if r > 1:
        thread_dims.append((row % r)(r))  # the row of the CTA's group this thread works on
    if t > 1:
        thread_dims.append((cv % t)(t))  # the thread's first vector of the row
    part = Dim()  # one CTA's row of dweight/dbias partials
    # The row slots of a CTA (backward combine); a placeholder of 2 keeps the names defined
    # when rows_per_block is 1 (that path does not use them).
    row_in_group = row % max(r, 2)
    return {
        "ROW": row,
        "C": c,
        "PART": part,
        "ROW_IN_GROUP": row_in_group,
        "PARTIALS": Tensor((part(MAX_ROWS // p.c), c(p.c)), dtype.float),
        "COMBINE": Tensor((row_in_group(max(r, 2)), c(p.c)), dtype.float),
        "CV": cv,
        "ROW_GROUP": row / r if r > 1 else row,  # one step = the CTA's rows_per_block rows
        "VEC_STEP": cv / t if t > 1 else cv,  # one step = a thread's next vector of the row
        "X": Tensor(
            (row(MAX_ROWS // g.row_vecs), cv(g.row_vecs)),
            dtype.uint4 if cfg.vec_bytes == 16 else dtype.int64,
        ),
        "STATS": Tensor((row(MAX_ROWS),), dtype.float),
        "AFFINE": Tensor((c(p.c),), dtype.by_name(p.weight_dtype)),
        "THREAD": CompoundIndex(*thread_dims),
        "DATA": Type(dtype.by_name(p.dtype)),
        "WEIGHT": Type(dtype.by_name(p.weight_dtype)),
        "CHANNELS": Constant(p.c),
        "VEC": Constant(g.vec),
        "ROW_VECS": Constant(g.row_vecs),
        "VECS_PER_THREAD": Constant(g.vecs_per_thread),
        "THREADS_PER_ROW": Constant(t),
        "ROWS_PER_BLOCK": Constant(r),
        "BLOCK_THREADS": Constant(cfg.block_threads),
        "PREFETCH": Constant(cfg.prefetch),
        "ACC_SMEM": Constant(backward and acc_in_smem(p, cfg)),
        "HAS_WEIGHT": Constant(p.has_weight),
        "HAS_BIAS": Constant(p.has_bias),
    }


# The forward and backward sources include layernorm_2d_common.h from spio/src; the compiler
# keys its disk cache on every -I directory's files, so an edit of the header recompiles.
SRC_INCLUDE = f"-I{SRC_DIR}"


def _spec(
    p: LayerNorm2dParams, cfg: LayerNorm2dConfig, entry: str, signature: str, backward: bool
) -> KernelSpec:
    p = p.static()
    return KernelSpec(
        source="layernorm_2d_bwd.cu" if backward else "layernorm_2d.cu",
        entry=entry,
        signature=signature,
        specs=_row_specs(p, cfg, backward),
        title=f"{entry} {p} {cfg}",
        block=(cfg.block_threads, 1, 1),
        options=(SRC_INCLUDE,),
    )


def forward_spec(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> KernelSpec:
    """(x, weight, bias, y, mean, rstd, m, eps)."""
    return _spec(p, cfg, "layernorm_2d_fwd", "ppppppif", backward=False)


def backward_spec(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> KernelSpec:
    """(x, dy, mean, rstd, weight, dx, dweight_partial, dbias_partial, m)."""
    return _spec(p, cfg, "layernorm_2d_bwd", "ppppppppi", backward=True)


def grid_rows(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, resident_blocks: int) -> int:
    """CTAs of a forward/backward launch: one per row group, at most the resident CTAs (the
    kernel strides over row groups). Depends only on (M, config, device): deterministic."""
    groups = -(-p.m // cfg.rows_per_block)
    return max(1, min(groups, resident_blocks))


def resident_blocks(loaded: Any, dev: Any) -> int:
    """CTAs that fit on the whole device at once, by the driver's occupancy calculator."""
    threads = loaded.spec.block[0]
    per_sm = loaded.function.max_active_blocks(threads, loaded.spec.smem)
    if per_sm <= 0:
        raise ValueError(
            f"{loaded.spec.title}: no CTA of {threads} threads fits on an SM "
            f"({loaded.function.num_regs} registers/thread); choose a config with fewer threads"
        )
    return per_sm * dev.sm_count


# (kernel title, device ordinal) -> resident CTAs; the occupancy query is a driver call, made
# once per loaded variant.
_resident_cache: dict[tuple[str, int], int] = {}


def _resident(loaded: Any, dev: Any) -> int:
    key = (loaded.spec.title, dev.ordinal)
    resident = _resident_cache.get(key)
    if resident is None:
        resident = _resident_cache.setdefault(key, resident_blocks(loaded, dev))
    return resident


def _grid(loaded: Any, p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> int:
    return grid_rows(p, cfg, _resident(loaded, dev))


def parts(loaded: Any, p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> int:
    """Rows of the dweight/dbias partial buffers a backward launch writes (one per CTA)."""
    return _grid(loaded, p, cfg, dev)


def backward_reduce_config(loaded: Any, p: LayerNorm2dParams, dev: Any) -> ReduceConfig:
    """The reduce config of backward launches of the loaded variant `loaded` for layer p: the
    config for the most partial rows such a launch writes (its resident CTAs, at any M), so it
    does not depend on M: a new batch size loads no new reduce variant, and the summation order
    of dweight/dbias is fixed by (M, backward config, device)."""
    return reduce_config(p, _resident(loaded, dev), dev)


class ForwardLaunch:
    """A loaded forward variant bound to M rows: `launch(x, weight, bias, y, mean, rstd, eps,
    stream)` (tensors as in `launch_forward`; weight/bias None when absent). Nothing is launched
    when M == 0."""

    __slots__ = ("_launch", "_m")

    def __init__(self, loaded: Any, p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> None:
        self._m = p.m
        self._launch = loaded.bind((_grid(loaded, p, cfg, dev), 1, 1)) if p.m else None

    def __call__(
        self, x: Any, weight: Any, bias: Any, y: Any, mean: Any, rstd: Any, eps: float,
        stream: int,
    ) -> None:  # fmt: skip
        if self._launch is not None:
            self._launch((x, _ptr(weight), _ptr(bias), y, mean, rstd, self._m, eps), stream)


class BackwardLaunch:
    """The backward (and its partial-sum reduce, when p has a weight or a bias) bound to M rows:
    `launch(x, dy, mean, rstd, weight, dx, dweight, dbias, workspace, stream)`. `workspace`:
    fp32 of at least `workspace_floats` elements, 16-byte aligned (the dweight partials, then the
    dbias partials); None when there is nothing to reduce. dweight/dbias: None where absent.
    With M == 0 nothing is launched (the caller zeroes dweight/dbias)."""

    __slots__ = ("_main", "_reduce", "_m", "parts", "_bias_offset", "workspace_floats",
                 "_weight", "_bias")  # fmt: skip

    def __init__(self, loaded: Any, p: LayerNorm2dParams, cfg: LayerNorm2dConfig, dev: Any) -> None:
        self._m = p.m
        self._weight, self._bias = p.has_weight, p.has_bias
        self.parts = _grid(loaded, p, cfg, dev) if p.m else 0
        self._main = loaded.bind((self.parts, 1, 1)) if p.m else None
        self._reduce = None
        if needs_reduce(p) and p.m:
            rcfg = backward_reduce_config(loaded, p, dev)
            rk = reduce_kernel(p, rcfg, dev)
            self._reduce = rk.bind(reduce_grid(p, rcfg), dependent=True)
        self._bias_offset = 4 * self.parts * p.c if p.has_weight else 0  # bytes, 16-aligned
        self.workspace_floats = self.parts * p.c * (int(p.has_weight) + int(p.has_bias))

    def __call__(
        self, x: Any, dy: Any, mean: Any, rstd: Any, weight: Any, dx: Any, dweight: Any,
        dbias: Any, workspace: Any, stream: int,
    ) -> None:  # fmt: skip
        if self._main is None:
            return
        base = workspace.data_ptr() if workspace is not None else 0
        dw_part = base if self._weight else 0
        db_part = base + self._bias_offset if self._bias else 0
        self._main((x, dy, mean, rstd, _ptr(weight), dx, dw_part, db_part, self._m), stream)
        if self._reduce is not None:
            self._reduce((dw_part, db_part, _ptr(dweight), _ptr(dbias), self.parts), stream)


def launch_forward(
    loaded: Any,
    p: LayerNorm2dParams,
    cfg: LayerNorm2dConfig,
    dev: Any,
    *,
    x: Any,
    weight: Any,
    bias: Any,
    y: Any,
    mean: Any,
    rstd: Any,
    eps: float,
    stream: int = 0,
) -> None:
    """y, mean, rstd <- layernorm(x). Tensors: x, y (M, C) contiguous rows; mean, rstd (M,) fp32;
    weight, bias (C,) or None. All 16-byte aligned. Nothing is launched when M == 0."""
    if p.m == 0:
        return
    grid = _grid(loaded, p, cfg, dev)
    loaded.launch(
        (grid, 1, 1), (x, _ptr(weight), _ptr(bias), y, mean, rstd, p.m, float(eps)), stream=stream
    )


def launch_backward(
    loaded: Any,
    reduce_loaded: Any,
    p: LayerNorm2dParams,
    cfg: LayerNorm2dConfig,
    dev: Any,
    *,
    x: Any,
    dy: Any,
    mean: Any,
    rstd: Any,
    weight: Any,
    dx: Any,
    dweight: Any,
    dbias: Any,
    dweight_part: Any,
    dbias_part: Any,
    stream: int = 0,
) -> None:
    """dx, dweight, dbias <- layernorm backward. dweight_part/dbias_part: fp32 scratch of
    (parts(...), C) each (None when the params have no weight / no bias); dweight/dbias (C,) in
    the weight dtype or None. With M == 0, dx is empty and dweight/dbias must be zeroed by the
    caller (nothing is launched).

    reduce_loaded: None when p has neither weight nor bias (there is nothing to reduce), else
    True. The reduce variant is not the caller's choice: it is `backward_reduce_config` (the
    config for the most parts a launch of this variant writes, at any M), fetched from the
    default function cache, so dweight/dbias sum in an order fixed by (params, backward config,
    device).
    """
    if needs_reduce(p) != (reduce_loaded is not None):
        raise ValueError(
            "layernorm_2d launch_backward: reduce_loaded must be True when the params have a "
            "weight or a bias, and None otherwise "
            f"(got {'None' if reduce_loaded is None else repr(reduce_loaded)} for {p})"
        )
    if p.m == 0:
        return
    grid = _grid(loaded, p, cfg, dev)
    loaded.launch(
        (grid, 1, 1),
        (x, dy, mean, rstd, _ptr(weight), dx, _ptr(dweight_part), _ptr(dbias_part), p.m),
        stream=stream,
    )
    if reduce_loaded is not None:
        # Always the derived variant, fetched from the function cache (a dict lookup): building
        # a spec here to compare with the caller's variant cost 50-230 us of Python between the
        # two launches, which `spio tune` timings of small shapes then measured.
        rcfg = backward_reduce_config(loaded, p, dev)
        rk = reduce_kernel(p, rcfg, dev)
        launch_reduce(rk, p, rcfg, dweight_part=dweight_part, dbias_part=dbias_part,
                      dweight=dweight, dbias=dbias, parts=grid, stream=stream)  # fmt: skip


def _ptr(t: Any) -> Any:
    """A tensor, or 0 (a null pointer) for an absent one."""
    return 0 if t is None else t


def reference(x: Any, weight: Any, bias: Any, eps: float) -> tuple[Any, Any, Any]:
    """fp64 forward of (N, C, H, W) x: returns y (N, C, H, W) and mean, rstd (N, H, W)."""
    xd = x.double()
    mean = xd.mean(dim=1, keepdim=True)
    var = (xd - mean).square().mean(dim=1, keepdim=True)
    rstd = (var + eps).rsqrt()
    y = (xd - mean) * rstd
    if weight is not None:
        y = y * weight.double()[None, :, None, None]
    if bias is not None:
        y = y + bias.double()[None, :, None, None]
    return y, mean[:, 0], rstd[:, 0]


def reference_backward(x: Any, dy: Any, weight: Any, eps: float) -> tuple[Any, Any, Any]:
    """fp64 gradients (dx, dweight, dbias) of sum(y * dy) by autograd on the fp64 forward."""
    import torch

    xd = x.detach().double().requires_grad_(True)
    wd = weight.detach().double().requires_grad_(True) if weight is not None else None
    bd = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device, requires_grad=True)
    y, _, _ = reference(xd, wd, bd, eps)
    inputs = [xd, bd] + ([wd] if wd is not None else [])
    grads = torch.autograd.grad(y, inputs, dy.double())
    return grads[0], (grads[2] if wd is not None else None), grads[1]


# The most rows the ops select a layer's forward and backward configs for: M rows (N*H*W) are
# selected for at M rounded up to a power of two, at most SELECT_ROWS = 2**17 (e.g. 128 images of
# 32x32, enough CTAs to fill any GPU). See `select_at_row_bucket`.
SELECT_ROWS = 2**17


def select_rows(m: int) -> int:
    """The row count a layer's configs are selected for at M rows (see SELECT_ROWS)."""
    return pow2_bucket(m, SELECT_ROWS)


def select_at_row_bucket(p: LayerNorm2dParams) -> LayerNorm2dParams:
    """The forward's and the backward's selection rule (`KernelDef.select_key`): the layer at
    `select_rows(p.m)` rows. A config fixes the order of the row sums (and the backward's partial
    sums), so the bits of y and dweight depend on the shape alone, never on which M a process saw
    first, and a new M loads a new variant only in a bucket the process has not run. Before the
    buckets every M was selected at SELECT_ROWS, which cost small M: on held-out layers at M <=
    4096 (H100, re-timed) the forward's pick ran 1.077 / 1.187 / 1.229 the best config's time
    (median / p90 / max) against 1.006 / 1.065 / 1.109 at the bucket, the backward's 1.114 / 1.180
    / 1.409 against 1.086 / 1.144 / 1.192 (docs/tuning.md, "Twenty-sixth session")."""
    return replace(p, m=select_rows(p.m))


def make_runner(p: LayerNorm2dParams, cfg: LayerNorm2dConfig, backward: bool = False):
    """A zero-argument launch of (p, cfg) on fresh inputs on the current GPU (collect, autotune).

    The backward runner includes the partial-sum reduce (`backward_reduce_config`)
    when p has a weight or a bias."""
    import torch

    from spio.cuda import device_attributes
    from spio.kernels.loader import default_function_cache

    dev = device_attributes(torch.cuda.current_device())
    dt, wdt = getattr(torch, p.dtype), getattr(torch, p.weight_dtype)
    x = (3 + torch.randn(p.m, p.c, device="cuda")).to(dt)
    w = torch.randn(p.c, device="cuda").to(wdt) if p.has_weight else None
    b = torch.randn(p.c, device="cuda").to(wdt) if p.has_bias else None
    mean, rstd = torch.zeros(p.m, device="cuda"), torch.ones(p.m, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream
    cache = default_function_cache()
    if not backward:
        loaded = cache.get(FWD, p.static(), cfg, dev)
        return lambda: launch_forward(loaded, p, cfg, dev, x=x, weight=w, bias=b, y=out,
                                      mean=mean, rstd=rstd, eps=1e-6, stream=stream)  # fmt: skip
    loaded = cache.get(BWD, p.static(), cfg, dev)
    n = parts(loaded, p, cfg, dev)
    reduce_loaded = True if needs_reduce(p) else None
    if reduce_loaded:
        # compiled and loaded here, outside the timed launches
        reduce_kernel(p, backward_reduce_config(loaded, p, dev), dev)
    dwp = torch.empty(n, p.c, device="cuda") if p.has_weight else None
    dbp = torch.empty(n, p.c, device="cuda") if p.has_bias else None
    dw, db = (None if t is None else torch.empty_like(t) for t in (w, b))
    dy = torch.randn_like(x)
    return lambda: launch_backward(
        loaded, reduce_loaded, p, cfg, dev, x=x, dy=dy, mean=mean, rstd=rstd, weight=w, dx=out,
        dweight=dw, dbias=db, dweight_part=dwp, dbias_part=dbp, stream=stream,
    )  # fmt: skip


FWD = KernelDef(
    name="layernorm_2d_fwd",
    params_type=LayerNorm2dParams,
    config_type=LayerNorm2dConfig,
    configs=lambda p, dev: configs(p, dev),
    spec=forward_spec,
    heuristic=lambda p, dev: heuristic(p, dev),
    stats=forward_stats,
    features=features,
    examples=examples,
    sample_params=sample_params,
    make_runner=make_runner,
    compiled_params=LayerNorm2dParams.static,
    # The config (threads per row, vector width) fixes the order of the row sums.
    select_key=select_at_row_bucket,
)

BWD = KernelDef(
    name="layernorm_2d_bwd",
    params_type=LayerNorm2dParams,
    config_type=LayerNorm2dConfig,
    configs=lambda p, dev: configs(p, dev, backward=True),
    spec=backward_spec,
    heuristic=lambda p, dev: heuristic(p, dev, backward=True),
    stats=backward_stats,
    features=features,
    examples=examples,
    sample_params=sample_params,
    make_runner=lambda p, cfg: make_runner(p, cfg, backward=True),
    compiled_params=LayerNorm2dParams.static,
    # The config fixes the dweight/dbias partial sums and their order.
    select_key=select_at_row_bucket,
)
