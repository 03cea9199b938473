"""`spio.functional.matmul` and the op `torch.ops.spio.matmul`: C = A @ B (+ bias).

Runs spio's tensor-core kernel (spio/src/matmul.cu) on CUDA GPUs of compute capability 8.0+.
Fallback (documented): CPU tensors and older GPUs run PyTorch: `torch.matmul` in the operand
dtype (plus bias), or in fp32 when out_dtype is float32; SPIO_DISABLE_FALLBACK=1 makes that an
error. The op has a fake (meta) implementation and autograd: dA = dC·Bᵀ and dB = Aᵀ·dC run through
the same kernel using its B-layout flag.
"""

from __future__ import annotations

import functools

import torch

from spio.functional._dispatch import stream_of, use_fallback

__all__ = ["matmul"]

_DTYPES = (torch.float16, torch.bfloat16)


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
    bm = b.t() if b_transposed else b
    if out_dtype == torch.float32:
        out = a.float() @ bm.float()
        return out + bias.float() if bias is not None else out
    out = torch.matmul(a, bm)
    return out + bias if bias is not None else out


@functools.cache
def _device(index: int):
    from spio.cuda import device_attributes

    return device_attributes(index)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _run_kernel(a, b, bias, out_dtype, b_transposed) -> torch.Tensor:
    from spio.kernels import matmul as mm
    from spio.select import op_config

    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.copy_(bias.expand(m, n)) if bias is not None else out.zero_()
    a, b = _aligned(a), _aligned(b)
    bias = _aligned(bias) if bias is not None else None
    if not b_transposed and n % 8:
        # Rows of a row-major B must start 16-byte aligned: pad its columns with zeros.
        b = torch.nn.functional.pad(b, (0, (-n) % 8))
    p = mm.MatmulParams(
        m=m,
        n=n,
        k=k,
        dtype=str(a.dtype).removeprefix("torch."),
        out_dtype=str(out_dtype).removeprefix("torch."),
        b_transposed=b_transposed,
        has_bias=bias is not None,
    )
    dev = _device(a.device.index if a.device.index is not None else 0)
    cfg = op_config(mm.DEF, p, dev)  # selected for the bucketed token count
    with torch.cuda.device(a.device):
        mm.launch(p, cfg, out, a, b, bias, ldb=b.shape[1], stream=stream_of(a), device=dev)
    return out


@torch.library.custom_op("spio::matmul", mutates_args=())
def _matmul_op(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    b_transposed: bool,
) -> torch.Tensor:
    out_dtype = out_dtype or a.dtype
    if use_fallback("matmul", a, b, bias):
        return _fallback(a, b, bias, out_dtype, b_transposed).to(out_dtype).contiguous()
    return _run_kernel(a, b, bias, out_dtype, b_transposed)


@_matmul_op.register_fake
def _(a, b, bias, out_dtype, b_transposed):
    n = b.shape[0] if b_transposed else b.shape[1]
    return a.new_empty((a.shape[0], n), dtype=out_dtype or a.dtype)


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0])) if rows != t.shape[0] else t


def _backward(ctx, grad):
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
        grad_a = torch.ops.spio.matmul(gn, bn.contiguous(), None, None, not bt)
    if ctx.needs_input_grad[1]:
        # The reduction runs over M, which the kernel needs as a multiple of 8: zero rows add 0.
        m8 = a.shape[0] + (-a.shape[0]) % 8
        if bt:  # dB (N, K) = dCᵀ (N, M) @ A (M, K)
            lhs, rhs = _pad_rows(g, m8).t().contiguous(), _pad_rows(a, m8)
        else:  # dB (K, N) = Aᵀ (K, M) @ dC (M, N)
            lhs, rhs = _pad_rows(a, m8).t().contiguous(), _pad_rows(g, m8)
        grad_b = torch.ops.spio.matmul(lhs, rhs, None, None, False)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_bias = grad.float().sum(0).to(a.dtype)
    return grad_a, grad_b, grad_bias, None, None


def _setup_context(ctx, inputs, output):
    a, b, bias, _out_dtype, b_transposed = inputs
    ctx.save_for_backward(a, b)
    ctx.b_transposed = b_transposed
    ctx.has_bias = bias is not None


_matmul_op.register_autograd(_backward, setup_context=_setup_context)
