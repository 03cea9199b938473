"""`spio.functional.matmul` and the op `torch.ops.spio.matmul`: C = A @ B (+ bias).

Runs spio's tensor-core kernel (spio/src/matmul.cu) on CUDA GPUs of compute capability 8.0+.
Fallback (documented): CPU tensors and older GPUs run PyTorch: on the CPU in float32 (fp16/bf16
operands upcast, the result rounded once to out_dtype: PyTorch's CPU fp16 matmul is ~40x slower
and no more exact), on an older GPU `torch.matmul` in the operand dtype, or in fp32 when
out_dtype is float32; SPIO_DISABLE_FALLBACK=1 makes that an error. The op has a fake (meta)
implementation and autograd: dA = dC·Bᵀ and dB = Aᵀ·dC run through the same kernel using its
B-layout flag.

Call path: the first call with a signature (shapes, strides, dtypes, devices, bias, out_dtype,
layout) validates it, selects the config (for the bucketed token count) and binds the launch in
a plan; later calls look it up and launch. Eager calls that nothing traces run the plan directly
(autograd through a torch.autograd.Function); traced calls go through `torch.ops.spio.matmul`,
whose CUDA implementation runs the same plans (see spio.functional.conv2d_gw8).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from spio.functional import _plans
from spio.functional._autograd import first_order
from spio.functional._dispatch import (
    PLAIN_TYPES,
    device_attributes,
    fallback_reason,
    raw_stream,
    untraced,
    use_fallback,
)

__all__ = ["matmul"]

_DTYPES = (torch.float16, torch.bfloat16)
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_empty = torch.empty


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    b_transposed: bool = False,
) -> torch.Tensor:
    """C = A @ B (+ bias), fp32 accumulation.

    Args:
        a: (M, K) fp16 or bf16; K a multiple of 8.
        b: (K, N), or (N, K) when b_transposed (the layout of nn.Linear.weight); same dtype as a.
        bias: optional (N,), same dtype as a.
        out_dtype: None (a's dtype) or torch.float32.
        b_transposed: b is given as (N, K).

    Returns:
        (M, N) tensor of out_dtype.
    """
    if _compiling():
        return _through_op(a, b, bias, out_dtype, b_transposed)
    if (
        type(a) in PLAIN_TYPES
        and type(b) in PLAIN_TYPES
        and (bias is None or type(bias) in PLAIN_TYPES)
        and a.is_cuda
        and untraced()
    ):
        key = _key(a, b, bias, out_dtype, b_transposed)
        try:
            plan = _PLANS.get(key)
        except TypeError:  # an unhashable argument: the op path reports it
            return _through_op(a, b, bias, out_dtype, b_transposed)
        if plan is None:
            plan = _PLANS[key] = _plan(a, b, bias, out_dtype, b_transposed)
        if plan is not _plans.DISPATCH:
            if _grad_enabled() and (
                a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
            ):
                return _matmul_apply(a, b, bias, plan)
            return plan.forward(a, b, bias)
    return _through_op(a, b, bias, out_dtype, b_transposed)


def _key(a, b, bias, out_dtype, b_transposed) -> tuple:
    """A call's signature: what its plan depends on."""
    return (
        a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device,
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
        out_dtype, type(b_transposed), b_transposed,
    )  # fmt: skip


def _through_op(a, b, bias, out_dtype, b_transposed) -> torch.Tensor:
    """The call through the dispatcher (torch.compile, tensor subclasses, dispatch modes, the
    fallback)."""
    _validate(a, b, bias, out_dtype, b_transposed)
    return torch.ops.spio.matmul(a, b, bias, out_dtype, b_transposed)


def _validate(a, b, bias, out_dtype, b_transposed) -> None:
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"spio matmul: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"spio matmul: {name} must be 2-D, got shape {tuple(t.shape)}")
    if a.dtype not in _DTYPES:
        raise TypeError(
            f"spio matmul: a must be float16 or bfloat16 (tensor-core operands), got {a.dtype}; "
            "convert with a.half() or a.bfloat16()"
        )
    if b.dtype != a.dtype:
        raise TypeError(f"spio matmul: b must have a's dtype {a.dtype}, got {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"spio matmul: a is on {a.device} but b is on {b.device}")
    if not isinstance(b_transposed, bool):
        raise TypeError(f"spio matmul: b_transposed must be a bool, got {b_transposed!r}")
    k = a.shape[1]
    kb = b.shape[1] if b_transposed else b.shape[0]
    if kb != k:
        layout = "(N, K) since b_transposed=True" if b_transposed else "(K, N)"
        raise ValueError(
            f"spio matmul: b must be {layout} with K = a.shape[1] = {k}, got shape "
            f"{tuple(b.shape)}; pass b_transposed={not b_transposed} if b is stored the other way"
        )
    if k % 8:
        raise ValueError(
            f"spio matmul: K = a.shape[1] must be a multiple of 8 (16-byte rows), got {k}; "
            f"zero-pad A's columns and B's K rows to {k + (-k) % 8}"
        )
    n = b.shape[0] if b_transposed else b.shape[1]
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(
                f"spio matmul: bias must be a torch.Tensor of shape ({n},) or None, got "
                f"{type(bias).__name__}"
            )
        if bias.shape != (n,):
            raise ValueError(
                f"spio matmul: bias must have shape ({n},) (one per output column), got "
                f"{tuple(bias.shape)}"
            )
        if bias.dtype != a.dtype or bias.device != a.device:
            raise TypeError(
                f"spio matmul: bias must be {a.dtype} on {a.device}, got {bias.dtype} on "
                f"{bias.device}"
            )
    if out_dtype is not None and out_dtype not in (a.dtype, torch.float32):
        raise TypeError(
            f"spio matmul: out_dtype must be None, {a.dtype} or torch.float32, got {out_dtype}"
        )


def _fallback(a, b, bias, out_dtype, b_transposed) -> torch.Tensor:
    """PyTorch's matmul. On the CPU, fp16/bf16 operands are multiplied in float32 and the result
    rounded once to out_dtype (PyTorch's own CPU fp16 matmul is ~40x slower than fp32 there and
    no more exact); on an older GPU, in the operand dtype unless out_dtype is float32."""
    bm = b.t() if b_transposed else b
    if out_dtype == torch.float32 or a.device.type == "cpu":
        out = a.float() @ bm.float()
        return out + bias.float() if bias is not None else out
    out = torch.matmul(a, bm)
    return out + bias if bias is not None else out


# ---- launch plans ----------------------------------------------------------------------------

_PLANS = _plans.PlanCache("matmul")


def _plan(a, b, bias, out_dtype, b_transposed) -> Any:
    """The plan of a call signature, or DISPATCH when the op decides (the fallback, an empty
    product). Raises on invalid arguments."""
    _validate(a, b, bias, out_dtype, b_transposed)
    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    if fallback_reason(a, b, bias) is not None or m == 0 or n == 0 or k == 0:
        return _plans.DISPATCH
    return _Plan(a, b, bias, out_dtype or a.dtype, b_transposed)


def kernel_choice(p: Any, dev: Any) -> tuple[str, Any]:
    """The kernel and config the op runs for `p` (a MatmulParams) on `dev`: ("sm90", the
    config the selector picks: its cost model's `heuristic`, or under SPIO_AUTOTUNE the fastest
    measured of its ranking, persisted) on sm_90 GPUs, the Hopper TMA + wgmma kernel (B either
    way); else ("mma_sync", the config the selector picks for the bucketed token count)."""
    from spio.kernels import matmul as mm
    from spio.kernels import matmul_sm90 as k90
    from spio.select import op_config

    if k90.supported(p, dev):
        return "sm90", op_config(k90.DEF, p, dev)
    return "mma_sync", op_config(mm.DEF, p, dev)


class _Plan:
    """One call signature on one GPU: the operands' layout fixes, the bound launch, the output."""

    __slots__ = (
        "launch", "size", "out_dtype", "device", "index", "a_contig", "b_contig", "bias_contig",
        "pad_n", "b_transposed", "has_bias", "workspace", "a_t",
    )  # fmt: skip

    def __init__(self, a, b, bias, out_dtype: torch.dtype, b_transposed: bool) -> None:
        from spio.kernels import matmul as mm
        from spio.kernels import matmul_sm90 as k90
        from spio.kernels.loader import default_function_cache

        m, k = a.shape
        n = b.shape[0] if b_transposed else b.shape[1]
        p = mm.MatmulParams(
            m=m, n=n, k=k, dtype=str(a.dtype).removeprefix("torch."),
            out_dtype=str(out_dtype).removeprefix("torch."), b_transposed=b_transposed,
            has_bias=bias is not None,
        )  # fmt: skip
        self.index = a.device.index
        dev = device_attributes(self.index)
        # Rows of a row-major B must start 16-byte aligned: its columns are padded to 8.
        self.pad_n = 0 if b_transposed else (-n) % 8
        self.launch: Any
        self.workspace = None
        self.a_t = False
        # On the tensors' GPU: an autotune measures there, and the kernel is loaded into that
        # GPU's context (the function cache files it under dev's ordinal).
        with torch.cuda.device(a.device):
            family, cfg = kernel_choice(p, dev)
            if family == "sm90":
                # An A that is the transposed view of a contiguous (K, M) tensor with 16-byte
                # rows (dB = dC^T A's dC^T) is read as it lies, M-major: no copy. That layout
                # runs without clusters (the heuristic's LARGE_PICK has one: dropped here) and
                # unswapped (a swapped decode pick gives way to the heuristic's unswapped one).
                self.a_t = m > 1 and m % 8 == 0 and a.stride() == (1, m)
                if self.a_t:
                    if cfg.swap_ab:
                        cfg = k90.unswapped(p, dev)
                    cfg = replace(cfg, a_transposed=True, cluster_m=1)
                # A row-major B's rows are padded to a multiple of 8 (TMA's 16-byte rule).
                self.launch = k90.bound(p, cfg, dev, ldb=None if b_transposed else n + self.pad_n)
                self.workspace = self.launch.workspace
            else:
                kernel = default_function_cache().get(mm.DEF, mm.DEF.compiled(p), cfg, dev)
                ldb = k if b_transposed else n + self.pad_n
                self.launch = mm.MatmulLaunch(kernel, p, cfg, ldb)
        self.size = (m, n)
        self.out_dtype = out_dtype
        self.device = a.device
        self.a_contig = a.is_contiguous()
        self.b_contig = b.is_contiguous()
        self.bias_contig = bias is None or bias.is_contiguous()
        self.b_transposed = b_transposed
        self.has_bias = bias is not None

    def forward(self, a, b, bias) -> torch.Tensor:
        if self.a_t:  # the (K, M) storage behind A is read; a misaligned one is copied
            if a.data_ptr() & 15:
                a = a.t().clone().t()
        elif not self.a_contig or a.data_ptr() & 15:
            a = a.contiguous() if not self.a_contig else a.clone()
        if self.pad_n:
            b = torch.nn.functional.pad(b, (0, self.pad_n))
        elif not self.b_contig or b.data_ptr() & 15:
            b = b.contiguous() if not self.b_contig else b.clone()
        if bias is not None and (not self.bias_contig or bias.data_ptr() & 15):
            bias = bias.contiguous() if not self.bias_contig else bias.clone()
        out = _empty(self.size, dtype=self.out_dtype, device=self.device)
        if self.workspace is None:
            self.launch(out, a, b, bias, raw_stream(self.index))
        else:  # split-K or a split tail (sm90): fp32 partials, allocated for the current stream
            ws = _empty(self.workspace, dtype=torch.float32, device=self.device)
            self.launch(out, a, b, bias, raw_stream(self.index), ws)
        return out


class _Matmul(torch.autograd.Function):
    """The eager path's autograd: the plan's launch, and the gradient products through
    `matmul` itself (their own plans)."""

    @staticmethod
    def forward(ctx, a, b, bias, plan):
        ctx.save_for_backward(a, b)
        ctx.b_transposed = plan.b_transposed
        ctx.has_bias = plan.has_bias
        return plan.forward(a, b, bias)

    @staticmethod
    @first_order
    def backward(ctx, grad):
        grads = _gradients(ctx, grad, matmul)
        return (*grads, None)


# torch.autograd.Function.apply without its Python wrapper, which binds default arguments and
# unwraps dead functorch wrappers (2-3 µs): the eager path calls it only when no functorch
# transform is active (`untraced()`), with no defaults to bind.
_matmul_apply = super(torch.autograd.Function, _Matmul).apply


# ---- the op ---------------------------------------------------------------------------------

# define + impl + register_fake + register_autograd: the dispatcher's cheapest registration that
# keeps opcheck, torch.compile and autograd (docs/ops/overhead.md has the measurements).
_LIB = torch.library.Library("spio", "FRAGMENT")
_LIB.define(
    "matmul(Tensor a, Tensor b, Tensor? bias, ScalarType? out_dtype, bool b_transposed) -> Tensor"
)


def _matmul_op(a, b, bias, out_dtype, b_transposed):
    out_dtype = out_dtype or a.dtype
    plan = _PLANS.get(_key(a, b, bias, out_dtype, b_transposed))
    if plan is not None and plan is not _plans.DISPATCH:  # a signature seen before: launch
        return plan.forward(a, b, bias)
    if use_fallback("matmul", a, b, bias):
        return _fallback(a, b, bias, out_dtype, b_transposed).to(out_dtype).contiguous()
    return _run_kernel(a, b, bias, out_dtype, b_transposed)


def _run_kernel(a, b, bias, out_dtype, b_transposed) -> torch.Tensor:
    """The op on a supported GPU: empty products here, the rest through the call's plan."""
    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    if m == 0 or n == 0 or k == 0:
        out = torch.empty(m, n, dtype=out_dtype, device=a.device)
        if m and n:  # K = 0: C = bias (or zeros)
            return out.copy_(bias.expand(m, n)) if bias is not None else out.zero_()
        return out
    key = _key(a, b, bias, out_dtype, b_transposed)
    plan = _PLANS.get(key)
    if plan is None or plan is _plans.DISPATCH:
        _validate(a, b, bias, out_dtype, b_transposed)
        plan = _PLANS[key] = _Plan(a, b, bias, out_dtype, b_transposed)
    return plan.forward(a, b, bias)


def _matmul_fake(a, b, bias, out_dtype, b_transposed):
    n = b.shape[0] if b_transposed else b.shape[1]
    return a.new_empty((a.shape[0], n), dtype=out_dtype or a.dtype)


_LIB.impl("matmul", _matmul_op, "CPU")
_LIB.impl("matmul", _matmul_op, "CUDA")
torch.library.register_fake("spio::matmul", _matmul_fake, lib=_LIB)


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0])) if rows != t.shape[0] else t


def _gradients(ctx, grad, product) -> tuple:
    """(dA, dB, dbias) through `product(a, b, bias, out_dtype, b_transposed)`: the op when
    traced, `matmul` (the eager path's plans) in an eager backward."""
    a, b = ctx.saved_tensors
    bt = ctx.b_transposed
    g = grad.to(a.dtype).contiguous()
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        # dA (M, K) = dC (M, N) @ Bᵀ; B stored (K, N) is Bᵀ stored (out=K, red=N): transposed.
        # The reduction runs over N, which the kernel needs as a multiple of 8: zero-pad N.
        n = g.shape[1]
        pad = (-n) % 8
        gn = torch.nn.functional.pad(g, (0, pad)) if pad else g
        bn = (_pad_rows(b, n + pad) if bt else torch.nn.functional.pad(b, (0, pad))) if pad else b
        grad_a = product(gn, bn.contiguous(), None, None, not bt)
    if ctx.needs_input_grad[1]:
        # The reduction runs over M, which the kernel needs as a multiple of 8: zero rows add 0.
        m8 = a.shape[0] + (-a.shape[0]) % 8
        if bt:  # dB (N, K) = dCᵀ (N, M) @ A (M, K)
            lhs, rhs = _pad_rows(g, m8).t(), _pad_rows(a, m8)
        else:  # dB (K, N) = Aᵀ (K, M) @ dC (M, N)
            lhs, rhs = _pad_rows(a, m8).t(), _pad_rows(g, m8)
        # lhs is a transposed view: the Hopper kernel reads it as it lies (a_transposed), the
        # mma.sync path copies it contiguous.
        grad_b = product(lhs, rhs, None, None, False)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_bias = grad.float().sum(0).to(a.dtype)
    return grad_a, grad_b, grad_bias


def _backward(ctx, grad):
    return (*_gradients(ctx, grad, torch.ops.spio.matmul), None, None)


def _setup_context(ctx, inputs, output):
    a, b, bias, _out_dtype, b_transposed = inputs
    ctx.save_for_backward(a, b)
    ctx.b_transposed = b_transposed
    ctx.has_bias = bias is not None


torch.library.register_autograd("spio::matmul", _backward, setup_context=_setup_context, lib=_LIB)
