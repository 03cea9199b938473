"""What a kernel family is: plain data and plain functions, registered in `spio.kernels.KERNELS`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SRC_DIR = Path(__file__).resolve().parent.parent / "src"


@dataclass(frozen=True)
class KernelSpec:
    """Everything needed to compile and launch one specialized kernel variant.

    Attributes:
        source: file name of the kernel under `spio/src/` (e.g. "layernorm_2d.cu").
        entry: the `extern "C" __global__` function to launch.
        signature: argument kinds for `Function.launch` (p = pointer, i = int32, l = int64,
            f = float32, d = float64), in the entry's parameter order.
        specs: generator specs (name -> spec) describing params and config; they become the
            generated header the source includes, so every variant is fully specialized.
        title: one line naming kernel, params and config, used in the generated header's banner.
        block: threads per block (x, y, z).
        smem: dynamic shared memory bytes per block.
        options: extra NVRTC options.
        arch_suffix: appended to the device's arch when compiling: "a" for kernels that use
            sm_90a's architecture-specific instructions (wgmma), "" for portable ones.
        min_registers: registers per thread the compiled kernel must launch with (0: any). A
            kernel whose warps raise their registers (setmaxnreg) draws them from the pool its
            launch allocated and would wait forever on a smaller one: loading refuses it.
        carveout: the preferred shared-memory carveout its launches carry, in percent of the
            SM's maximum shared memory (`Function.bind(..., carveout=)`), or -1 for none (the
            driver's choice). A launch attribute: not part of the cubin.
    """

    source: str
    entry: str
    signature: str
    specs: Mapping[str, Any]
    title: str
    block: tuple[int, int, int]
    smem: int = 0
    options: tuple[str, ...] = ()
    arch_suffix: str = ""
    min_registers: int = 0
    carveout: int = -1

    def source_text(self) -> str:
        return (SRC_DIR / self.source).read_text()


@dataclass(frozen=True)
class KernelStats:
    """Work of one launch, for effective-bandwidth and throughput reports."""

    bytes_moved: int  # fewest DRAM bytes: every input read once, every output written once
    flops: int = 0


@dataclass(frozen=True)
class KernelDef:
    """One kernel family: its params and config types and the functions that serve it.

    Attributes:
        name: registry key, e.g. "layernorm_2d_fwd".
        params_type: frozen dataclass of the layer shape (what the user's tensors determine).
        config_type: frozen dataclass of tuning choices (tiles, warps, stages...).
        configs: (params, device attributes) -> every valid config, in a stable order.
        spec: (params, config, device attributes) -> KernelSpec to compile and launch.
        heuristic: (params, device attributes) -> the config used when no model applies.
        stats: params -> KernelStats.
        features: (params, config, device attributes) -> numeric features for the performance
            model; a dict with a fixed key order.
        feature_columns: (params, configs, device attributes) -> `features` of every config
            as one column per name, in `features`' key order, the same values: how a family
            computes a whole config space's features faster than config by config (what a new
            shape's selection evaluates). None: `features`, config by config.
        examples: () -> a few representative params (for `spio bench --quick` with no GPU,
            compile smoke tests and docs).
        sample_params: (random.Random) -> one params drawn from realistic layer shapes (and some
            random ones), for collecting performance-model training data.
        make_runner: (params, config) -> a zero-argument callable that launches the variant once
            on inputs it allocated on the current GPU (for timing: collect, autotune).
        compiled_params: params -> the params a compiled variant depends on, with the run-time
            launch arguments (batch, rows, matrix sizes) canonicalized: the key under which
            one loaded kernel serves all of them. None: the params themselves.
        select_key: params -> the params the config is selected for: the ops' selection rule
            (`spio.select.op_config`), e.g. matmul selects for its bucketed token count,
            conv2d_gw8 at its batch's bucket, layernorm_2d at its rows' bucket. None: every
            params selected on its own.
        derived_from: the first pass whose launch derives this family's config (the two
            reductions); such a family is never selected on its own.
        ranked: (params, device attributes) -> configs best first, for a family selected by a
            cost model of its own instead of a trained one (matmul_sm90): the selector picks
            `heuristic` (no model lookup, no warning) and autotune measures from this ranking.
    """

    name: str
    params_type: type
    config_type: type
    configs: Callable[[Any, Any], list[Any]]
    spec: Callable[[Any, Any, Any], KernelSpec]
    heuristic: Callable[[Any, Any], Any]
    stats: Callable[[Any], KernelStats]
    features: Callable[[Any, Any, Any], dict[str, float]] | None = None
    feature_columns: Callable[[Any, Sequence[Any], Any], Mapping[str, Sequence[float]]] | None = (
        None
    )
    examples: Callable[[], list[Any]] | None = None
    sample_params: Callable[[Any], Any] | None = None
    make_runner: Callable[[Any, Any], Callable[[], None]] | None = None
    compiled_params: Callable[[Any], Any] | None = None
    select_key: Callable[[Any], Any] | None = None
    derived_from: str | None = None
    ranked: Callable[[Any, Any], list[Any]] | None = None

    def compiled(self, params: Any) -> Any:
        """The params the compiled variant of `params` depends on (`compiled_params`, or params
        itself): the key under which one loaded kernel serves them all."""
        return params if self.compiled_params is None else self.compiled_params(params)

    def selection(self, params: Any) -> Any:
        """The params the ops select `params`'s config for: the family's `select_key`, or
        params itself without one."""
        return params if self.select_key is None else self.select_key(params)


def pow2_bucket(size: int, cap: int | None = None) -> int:
    """`size` rounded up to a power of two (1 for sizes below 2), at most `cap` (a power of two)
    when given: the bucket the families' selection rules (`KernelDef.select_key`) select a
    layer's config at, so a config depends on the shape alone and a process meets a bounded set
    of selection params (conv2d_gw8's batch, layernorm_2d's rows, matmul's token count)."""
    bucket = 1 << max(0, size - 1).bit_length()
    return bucket if cap is None else min(cap, bucket)


OMIT_DEFAULT = {"omit_default": True}  # field metadata: `to_dict` leaves it out at its default


def to_dict(obj: Any) -> dict[str, Any]:
    """A params/config dataclass as JSON-able data (tuples become lists): how datasets and
    persisted selections store them. A field declared with metadata OMIT_DEFAULT is left out
    while it holds its default, so rows written before it existed keep their keys."""
    return {
        f.name: getattr(obj, f.name)
        for f in dataclasses.fields(obj)
        if not (f.metadata.get("omit_default") and getattr(obj, f.name) == f.default)
    }


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuilds a params/config dataclass from `to_dict` output (lists back to tuples)."""
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**kwargs)
