"""Layer shape and tuning choices of the conv2d_gw8 kernels (grouped conv, 8 channels per group).

`Conv2dGw8Params` is the layer (what the user's tensors determine); the three config dataclasses
are the tuning knobs of the fprop (also used by dgrad), wgrad and wgrad-reduce kernels. Both are
frozen, slotted and validated at construction so a bad value fails where it is made.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from spio.kernels.kernel_def import OMIT_DEFAULT, pow2_bucket

GROUP_WIDTH = 8  # input channels per group == output channels per group
MAX_KERNEL = 7  # largest R or S: 7x7 weights of one group stay in registers (49 regs/thread)
MAX_BATCH = 65535  # batch runs on gridDim.y (its limit); larger batches get a clear error
MAX_IMAGE_ELEMENTS = 2**31 - 1  # per-image offsets are 32-bit; the batch offset is 64-bit
DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class Conv2dGw8Params:
    """Shape of one grouped 2-D convolution with group width 8, NHWC activations.

    y[n, k, p, q] = b[k] + sum_{r, s, c} x[n, g8 + c, SH p + r - pad_h, SW q + s - pad_w]
    w[k, c, r, s], where g8 = 8 * (k // 8), SH/SW the stride. P = (H + 2 pad_h - R) // SH + 1
    (likewise Q), as F.conv2d. The input gradient of a strided layer runs the same kernel on the
    output gradient dilated by the stride (`dilate_h/w`, zeros between its rows and columns:
    never stored, the kernel skips them) with end padding that makes the output the layer's input
    size.

    Attributes:
        n, c, h, w: batch, channels (a multiple of 8), input height and width.
        r, s: kernel height and width, each 1..7.
        pad_h, pad_w: zero padding (negative values crop; the dgrad kernel uses that when the
            layer's padding exceeds R - 1).
        has_bias: whether a bias is added.
        dtype: "float16" or "bfloat16" (activations); accumulation is fp32.
        wdtype: the weight's and bias's type (and their gradients'): dtype, or "float32" (the
            kernels round a float32 weight and bias to dtype as they read them, what autocast's
            cast would do, and the weight gradient is written in float32); None means dtype.
        stride_h, stride_w: 1 or 2.
        dilate_h, dilate_w: input dilation, 1 or 2 (only the dgrad transform sets it; not with a
            stride > 1 on the same axis): input row v of the conv is x row v / dilate when v is a
            multiple of dilate, else zero. H and W are the undilated sizes.
        pad_h_end, pad_w_end: padding after the last row / column; None means pad_h / pad_w.
        weight_cl: the weight (C, 8, R, S), and the weight gradient the kernels write, is stored
            channels_last: memory order (C, R, S, 8), strides (8RS, 1, 8S, 8), as
            `module.to(memory_format=torch.channels_last)` leaves a conv weight; False:
            contiguous. Normalized to False for 1x1 kernels (both layouts are one).
    """

    n: int
    c: int
    h: int
    w: int
    r: int = 3
    s: int = 3
    pad_h: int = 1
    pad_w: int = 1
    has_bias: bool = False
    dtype: str = "float16"
    wdtype: str | None = None
    weight_cl: bool = False
    stride_h: int = 1
    stride_w: int = 1
    dilate_h: int = 1
    dilate_w: int = 1
    pad_h_end: int | None = None
    pad_w_end: int | None = None

    def __post_init__(self) -> None:
        if self.pad_h_end is None:
            object.__setattr__(self, "pad_h_end", self.pad_h)
        if self.pad_w_end is None:
            object.__setattr__(self, "pad_w_end", self.pad_w)
        for name in ("n", "c", "h", "w", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w",
                     "dilate_h", "dilate_w", "pad_h_end", "pad_w_end"):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"Conv2dGw8Params.{name} must be an int, got {type(v).__name__}")
        for axis in ("h", "w"):
            st, dl = getattr(self, f"stride_{axis}"), getattr(self, f"dilate_{axis}")
            if st not in (1, 2) or dl not in (1, 2) or st * dl == 4:
                raise ValueError(
                    f"Conv2dGw8Params: stride_{axis} and dilate_{axis} must each be 1 or 2, not "
                    f"both 2, got {st} and {dl}; use torch.nn.functional.conv2d for other strides"
                )
        for name in ("has_bias", "weight_cl"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise TypeError(
                    f"Conv2dGw8Params.{name} must be a bool, got {type(v).__name__} {v!r}"
                )
        if not 1 <= self.n <= MAX_BATCH:
            raise ValueError(
                f"Conv2dGw8Params.n (batch) must be in 1..{MAX_BATCH} (the kernels run the batch "
                f"on gridDim.y), got {self.n}; split larger batches into chunks of at most "
                f"{MAX_BATCH} (an empty batch launches nothing: the op returns an empty output)"
            )
        if self.c < GROUP_WIDTH or self.c % GROUP_WIDTH:
            raise ValueError(
                f"Conv2dGw8Params.c (channels) must be a positive multiple of {GROUP_WIDTH}, "
                f"got {self.c}"
            )
        if self.h < 1 or self.w < 1:
            raise ValueError(f"Conv2dGw8Params: H and W must be >= 1, got {self.h}x{self.w}")
        for name in ("r", "s"):
            v = getattr(self, name)
            if not 1 <= v <= MAX_KERNEL:
                raise ValueError(
                    f"Conv2dGw8Params.{name} (kernel size) must be in 1..{MAX_KERNEL}, got {v}; "
                    "use torch.nn.functional.conv2d for larger kernels"
                )
        if self.p < 1 or self.q < 1:
            raise ValueError(
                f"Conv2dGw8Params: output size P x Q = {self.p} x {self.q} must be >= 1 "
                f"(H={self.h}, W={self.w}, R={self.r}, S={self.s}, padding=({self.pad_h}, "
                f"{self.pad_w})); increase the padding"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"Conv2dGw8Params.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.wdtype is None:
            object.__setattr__(self, "wdtype", self.dtype)
        if self.weight_cl and self.r * self.s == 1:
            object.__setattr__(self, "weight_cl", False)
        if self.wdtype not in (self.dtype, "float32"):
            raise ValueError(
                f"Conv2dGw8Params.wdtype must be the data type ({self.dtype!r}) or 'float32', "
                f"got {self.wdtype!r}"
            )
        per_image = max(self.h * self.w, self.p * self.q) * self.c
        if per_image > MAX_IMAGE_ELEMENTS:
            raise ValueError(
                f"Conv2dGw8Params: one image has {per_image} elements, above 2^31 - 1 "
                "(per-image offsets are 32-bit); tile the image spatially"
            )

    @property
    def p(self) -> int:
        """Output height."""
        span = (self.h - 1) * self.dilate_h + 1 + self.pad_h + self.pad_end_h - self.r
        return span // self.stride_h + 1

    @property
    def q(self) -> int:
        """Output width."""
        span = (self.w - 1) * self.dilate_w + 1 + self.pad_w + self.pad_end_w - self.s
        return span // self.stride_w + 1

    @property
    def pad_end_h(self) -> int:
        """pad_h_end as an int: __post_init__ replaced None by pad_h, which the field type can't
        say."""
        return self.pad_h_end if self.pad_h_end is not None else self.pad_h

    @property
    def pad_end_w(self) -> int:
        return self.pad_w_end if self.pad_w_end is not None else self.pad_w

    @property
    def unit_stride(self) -> bool:
        """Stride and dilation 1 with symmetric padding: the layers the performance models know."""
        return (
            self.stride_h == self.stride_w == self.dilate_h == self.dilate_w == 1
            and self.pad_end_h == self.pad_h
            and self.pad_end_w == self.pad_w
        )

    @property
    def ring(self) -> int:
        """Output rows the fprop kernel accumulates at once: ceil(R / stride_h)."""
        return -(-self.r // self.stride_h)

    @property
    def weight_dtype(self) -> str:
        """wdtype as a str: __post_init__ replaced None by dtype, which the field type can't say."""
        return self.wdtype if self.wdtype is not None else self.dtype

    @property
    def groups(self) -> int:
        return self.c // GROUP_WIDTH

    @property
    def padding(self) -> tuple[int, int]:
        return (self.pad_h, self.pad_w)

    @property
    def stride(self) -> tuple[int, int]:
        return (self.stride_h, self.stride_w)

    def with_batch(self, n: int) -> Conv2dGw8Params:
        return replace(self, n=n)

    def features(self) -> dict[str, float]:
        """The layer's own performance-model features (each kernel adds its config's).

        The stride and the input dilation come last (added with strided layers; the keys before
        them keep their order and values), so a stride-2 layer, and its dgrad (the fprop kernel
        on dy dilated by the stride, `dgrad_as_fprop`), are told apart from a stride-1 layer of
        the same sizes."""
        return {
            "n": self.n,
            "c": self.c,
            "h": self.h,
            "w": self.w,
            "r": self.r,
            "s": self.s,
            "p": self.p,
            "q": self.q,
            "pad_h": self.pad_h,
            "pad_w": self.pad_w,
            "has_bias": float(self.has_bias),
            "bf16": float(self.dtype == "bfloat16"),
            "stride_h": float(self.stride_h),
            "stride_w": float(self.stride_w),
            "dilate_h": float(self.dilate_h),
            "dilate_w": float(self.dilate_w),
        }

    def variant(self) -> Conv2dGw8Params:
        """The params with the batch dropped (n = 1): what a compiled kernel depends on.

        The batch is a launch argument, so loaded kernels are cached under `variant()` and one
        module serves every batch size; selection sees the batch's bucket (`select_batch`).
        """
        return replace(self, n=1)

    def dgrad_as_fprop(self) -> Conv2dGw8Params:
        """The forward conv that computes this layer's input gradient.

        dx = conv(dy, w'), with w' transposed within each 8x8 group and rotated 180 degrees in
        (r, s), padding (R - 1 - pad_h, S - 1 - pad_w); its output size is (H, W). Remembered per
        layer: dgrad's features, configs and specs ask for it once per config.
        """
        return _dgrad_as_fprop(self)

    @classmethod
    def from_tensors(
        cls,
        x: Any,
        weight: Any,
        bias: Any = None,
        padding: int | tuple[int, int] | None = None,
        dtype: str | None = None,
        batch: int | None = None,
        wdtype: str | None = None,
        weight_cl: bool = False,
        stride: int | tuple[int, int] = 1,
    ) -> Conv2dGw8Params:
        """Params of conv2d_gw8(x, weight, bias, padding); raises on anything unsupported.

        `dtype` overrides x's dtype (the CPU fallback checks float32 shapes with it); `batch`
        overrides x's batch size (the op checks a layer's shape with batch=1, so an empty batch or
        one above MAX_BATCH, which only the GPU kernels cannot take, passes); `wdtype` is the
        weight's dtype as the kernels read it (None: dtype); `weight_cl` its layout; `stride`
        an int or a pair, each 1 or 2.
        """
        if x.dim() != 4:
            raise ValueError(
                f"spio conv2d_gw8: input must be 4-D (N, C, H, W), got shape {tuple(x.shape)}"
            )
        if weight.dim() != 4:
            raise ValueError(
                f"spio conv2d_gw8: weight must be 4-D (C, 8, R, S), got shape {tuple(weight.shape)}"
            )
        n, c, h, w = (int(v) for v in x.shape)
        n = n if batch is None else batch
        k, cg, r, s = (int(v) for v in weight.shape)
        if cg != GROUP_WIDTH:
            raise ValueError(
                "spio conv2d_gw8: weight.shape[1] (input channels per group) must be "
                f"{GROUP_WIDTH}, got {cg}; only group width 8 is supported"
            )
        if k != c:
            raise ValueError(
                f"spio conv2d_gw8: weight.shape[0] ({k}) must equal the input channels ({c}); "
                "groups = C / 8 with 8 outputs per group"
            )
        if bias is not None and tuple(bias.shape) != (c,):
            raise ValueError(
                f"spio conv2d_gw8: bias must have shape ({c},), got {tuple(bias.shape)}"
            )
        pad_h, pad_w = normalize_padding(padding, r, s)
        stride_h, stride_w = normalize_stride(stride)
        dtype = dtype or str(x.dtype).removeprefix("torch.")
        return cls(
            n=n,
            c=c,
            h=h,
            w=w,
            r=r,
            s=s,
            pad_h=pad_h,
            pad_w=pad_w,
            has_bias=bias is not None,
            dtype=dtype,
            wdtype=wdtype,
            weight_cl=weight_cl,
            stride_h=stride_h,
            stride_w=stride_w,
        )

    def weight_dims(self, c8: Any, ko: Any, ci: Any, r: Any, s: Any) -> tuple[Any, ...]:
        """The weight's dimensions (generator Dims, sized) in memory order, outermost first:
        (C8, KO, CI, R, S) contiguous, (C8, KO, R, S, CI) channels_last (`weight_cl`). Kernels
        index the weight by name (position-free), so the layout is this order alone."""
        return (c8, ko, r, s, ci) if self.weight_cl else (c8, ko, ci, r, s)


@functools.lru_cache(maxsize=256)
def _dgrad_as_fprop(p: Conv2dGw8Params) -> Conv2dGw8Params:
    # dx[h] = sum_r dy_dilated[h + r - (R - 1 - pad)] w[R - 1 - r]: a stride-1 conv of dy dilated
    # by the stride, front padding R - 1 - pad, end padding so that the output has H rows.
    if p.dilate_h != 1 or p.dilate_w != 1:
        raise ValueError("Conv2dGw8Params.dgrad_as_fprop: the params are already a dgrad's")
    return Conv2dGw8Params(
        n=p.n,
        c=p.c,
        h=p.p,
        w=p.q,
        r=p.r,
        s=p.s,
        pad_h=p.r - 1 - p.pad_h,
        pad_w=p.s - 1 - p.pad_w,
        has_bias=False,
        dtype=p.dtype,
        wdtype=p.wdtype,
        weight_cl=p.weight_cl,
        dilate_h=p.stride_h,
        dilate_w=p.stride_w,
        pad_h_end=p.h - 1 - (p.p - 1) * p.stride_h + p.pad_h,
        pad_w_end=p.w - 1 - (p.q - 1) * p.stride_w + p.pad_w,
    )


STRIDES = (1, 2)


# The most images a layer's config is selected for, by every pass (fprop, dgrad, wgrad): a batch
# of N images is selected for at N rounded up to a power of two, at most SELECT_BATCH. A layer then
# runs one config per bucket, whatever batch size a process saw first, and a new batch size loads a
# new variant only in a bucket the process has not run. Re-timed on an H100 (docs/tuning.md,
# "Twenty-sixth session"), the picks of held-out layers at N = 128-256 ran, median / p90 / max of
# the best config's time: fprop 1.016 / 1.200 / 1.327 at the bucket against 1.559 / 2.104 / 2.972
# under the earlier rule (a layer's first batch size's config served every later one: a first call
# at one image fixed it); wgrad 1.018 / 1.095 / 1.229 against 1.031 / 1.132 / 2.003 capped at 64
# (inside whole training steps its first kernel went 410.9 -> 376.0 µs per regnetx_002 step and
# 348.8 -> 349.4 per regnety_004 step).
SELECT_BATCH = 256


def select_batch(n: int) -> int:
    """The batch size a layer's config is selected for at N images (see SELECT_BATCH)."""
    return pow2_bucket(n, SELECT_BATCH)


def select_at_batch_bucket(p: Conv2dGw8Params) -> Conv2dGw8Params:
    """The conv passes' selection rule (`KernelDef.select_key`): the layer at `select_batch(p.n)`
    images. The weight's dtype (float32 under autocast; wgrad's reduction and the fused
    backward's kernel read it, rounding it as they load) and layout do not enter the selection."""
    return replace(p, n=select_batch(p.n), wdtype=None, weight_cl=False)


def normalize_stride(stride: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """The stride as (stride_h, stride_w), each 1 or 2."""
    if isinstance(stride, int) and not isinstance(stride, bool):
        pair = (stride, stride)
    elif (
        isinstance(stride, (tuple, list))
        and len(stride) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in stride)
    ):
        pair = (int(stride[0]), int(stride[1]))
    else:
        raise TypeError(f"spio conv2d_gw8: stride must be an int or a pair of ints, got {stride!r}")
    if any(v not in STRIDES for v in pair):
        raise ValueError(
            f"spio conv2d_gw8: stride must be 1 or 2 on each axis, got {pair}; use "
            "torch.nn.functional.conv2d for other strides"
        )
    return pair


def normalize_padding(
    padding: int | tuple[int, int] | list[int] | None, r: int, s: int
) -> tuple[int, int]:
    """Padding as (pad_h, pad_w); None means "same" for odd kernels (k // 2)."""
    if padding is None:
        return (r // 2, s // 2)
    if isinstance(padding, bool):
        raise TypeError(
            f"spio conv2d_gw8: padding must be an int or a pair of ints, got {padding!r}"
        )
    if isinstance(padding, int):
        pads = (padding, padding)
    elif (
        isinstance(padding, (tuple, list))
        and len(padding) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in padding)
    ):
        pads = (int(padding[0]), int(padding[1]))
    else:
        raise TypeError(
            f"spio conv2d_gw8: padding must be an int or a pair of ints, got {padding!r}"
        )
    if min(pads) < 0:
        raise ValueError(f"spio conv2d_gw8: padding must be >= 0, got {pads}")
    return pads


@dataclass(frozen=True, slots=True, repr=False)
class Conv2dGw8Config:
    """Tiling of the fprop kernel (dgrad runs the same kernel on the transposed problem).

    Attributes:
        block_p: output rows per CTA (streamed one input row at a time).
        block_q: output columns per CTA, a multiple of 16 (one m16n8k8 M tile per 16 columns),
            or 8: two images side by side in one M tile, 8 columns each (maps with Q <= 8).
        warps: channel groups per CTA (one warp per group of 8 channels).
        stages: input rows in flight in shared memory (cp.async pipeline depth).
        carveout: the preferred shared-memory carveout its launches carry, in percent of
            the SM's maximum shared memory, or -1 for none (the driver's choice: enough shared
            memory for the most resident CTAs, the rest L1). Not part of the cubin: two configs
            that differ only here compile to the same one (`fprop.CARVEOUT_CHOICES` says where the
            space has them).
    """

    block_p: int = 8
    block_q: int = 16
    warps: int = 4
    stages: int = 2
    carveout: int = field(default=-1, metadata=OMIT_DEFAULT)

    def __repr__(self) -> str:
        tail = f", carveout={self.carveout}" if self.carveout != -1 else ""
        return (
            f"Conv2dGw8Config(block_p={self.block_p}, block_q={self.block_q}, "
            f"warps={self.warps}, stages={self.stages}{tail})"
        )

    def __post_init__(self) -> None:
        if self.block_p < 1:
            raise ValueError(f"Conv2dGw8Config.block_p must be >= 1, got {self.block_p}")
        if self.block_q != 8 and (self.block_q < 16 or self.block_q % 16):
            raise ValueError(
                "Conv2dGw8Config.block_q must be 8 or a positive multiple of 16, "
                f"got {self.block_q}"
            )
        if self.warps not in (1, 2, 4, 8):
            raise ValueError(f"Conv2dGw8Config.warps must be 1, 2, 4 or 8, got {self.warps}")
        if self.stages not in (2, 3, 4, 6, 8):
            raise ValueError(f"Conv2dGw8Config.stages must be 2, 3, 4, 6 or 8, got {self.stages}")
        if not -1 <= self.carveout <= 100:
            raise ValueError(
                "Conv2dGw8Config.carveout must be a percent in [0, 100] or -1 (no preference), "
                f"got {self.carveout}"
            )


@dataclass(frozen=True, slots=True)
class Conv2dGw8WgradConfig:
    """Tiling of the weight-gradient kernel.

    Attributes:
        block_p: output-gradient rows per task; a CTA streams the BLOCK_P + R - 1 input rows.
        block_q: output columns per CTA, a multiple of 8 (the mma reduces 8 columns at a time).
        warps: channel groups per CTA.
        stages: input rows in flight (cp.async pipeline depth).
        splits_per_sm: partial-sum slices per SM; the (n, row-chunk) tasks are divided among
            that many CTAs in order, each writing its own fp32 partial (deterministic).
    """

    block_p: int = 8
    block_q: int = 32
    warps: int = 4
    stages: int = 2
    splits_per_sm: int = 2

    def __post_init__(self) -> None:
        if self.block_p < 1:
            raise ValueError(f"Conv2dGw8WgradConfig.block_p must be >= 1, got {self.block_p}")
        if self.block_q < 8 or self.block_q % 8:
            raise ValueError(
                f"Conv2dGw8WgradConfig.block_q must be a positive multiple of 8, got {self.block_q}"
            )
        if self.warps not in (1, 2, 4, 8):
            raise ValueError(f"Conv2dGw8WgradConfig.warps must be 1, 2, 4 or 8, got {self.warps}")
        if self.stages not in (2, 3, 4, 6, 8):
            raise ValueError(
                f"Conv2dGw8WgradConfig.stages must be 2, 3, 4, 6 or 8, got {self.stages}"
            )
        if self.splits_per_sm not in (1, 2, 4, 8, 16, 32):
            raise ValueError(
                "Conv2dGw8WgradConfig.splits_per_sm must be 1, 2, 4, 8, 16 or 32, got "
                f"{self.splits_per_sm}"
            )


REDUCE_THREADS = (128, 256, 512, 1024)  # the wgrad reduction's CTA sizes (4..32 warps)


@dataclass(frozen=True, slots=True)
class Conv2dGw8ReduceConfig:
    """Threads per CTA of the ordered reduction of wgrad partials."""

    threads: int = 256

    def __post_init__(self) -> None:
        if self.threads not in REDUCE_THREADS:
            raise ValueError(
                f"Conv2dGw8ReduceConfig.threads must be one of {REDUCE_THREADS}, got {self.threads}"
            )


def ctas_per_sm(
    grid_ctas: int, regs: int, warps: int, smem: int, dev: Any, max_ctas: int = 32
) -> int:
    """CTAs one SM runs at once: the grid spread over the SMs, capped by registers (rounded up
    to the allocation granule of 8 per thread), threads, shared memory (plus the 1 KB the
    driver reserves per CTA) and the hardware's CTA limit."""
    regs = min(255, -(-regs // 8) * 8)
    threads = 32 * warps
    return max(
        1,
        min(
            -(-grid_ctas // dev.sm_count),
            dev.regs_per_sm // (regs * threads),
            dev.max_threads_per_sm // threads,
            dev.max_smem_per_sm // (smem + 1024),
            max_ctas,
        ),
    )


# Rows through the tensor memory accelerator (fprop/dgrad: `fprop.tma_rows`, wgrad:
# `wgrad_tiling.tma_rows`) need sm_90+, CTAs of at least TMA_MIN_WARPS warps (a box of >= 32
# bytes per pixel: 1-warp CTAs' 16-byte boxes streamed slower than cp.async) and filters of at
# most TMA_MAX_TAPS taps (7x7 lost a few percent). Measured for fprop/dgrad (fourteenth session,
# docs/ops/conv2d_gw8.md); wgrad takes the same rule (fifteenth).
TMA_MIN_WARPS = 2
TMA_MAX_TAPS = 9


def tma_capable(p: Conv2dGw8Params, warps: int, dev: Any) -> bool:
    """The part of both TMA-rows rules that does not depend on the kernel: sm_90+ (`dev` known),
    CTAs of TMA_MIN_WARPS+ warps, filters of at most TMA_MAX_TAPS taps."""
    return (
        warps >= TMA_MIN_WARPS
        and p.r * p.s <= TMA_MAX_TAPS
        and dev is not None
        and tuple(dev.compute_capability) >= (9, 0)
    )


def idle_warps(groups: int, warps: int) -> int:
    """Warps of the last group block that have no group (0 when warps divides groups)."""
    return -groups % warps


def warps_allowed(groups: int, warps: int) -> bool:
    """Whether a CTA of `warps` warps (one channel group each) is in the space:
    - warps divides the groups;
    - or the idle warps of the last group block are at most a quarter of the groups, so an odd
      group count (7, 19, 55) gets 2-8 warps per CTA instead of 1, at most 20% of the launched
      warps idle;
    - or one CTA spans every group with at most a quarter of its warps idle: 3 groups (C24) get
      4 warps, 6 (C48) and 7 (C56) get 8. Its rows are whole pixels, one contiguous copy each
      (H200: C24 112² stride-2 dgrad 1.47x, fprop 1.09x faster at the space's best;
      docs/ops/conv2d_gw8.md, "Fortieth session")."""
    if warps > groups:
        return 4 * (warps - groups) <= warps
    return 4 * idle_warps(groups, warps) <= groups
