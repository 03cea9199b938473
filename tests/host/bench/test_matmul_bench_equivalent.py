"""`spio bench matmul`'s PyTorch side for the epilogue variants (`--bias`, `--out-dtype fp32`):
the call a PyTorch user makes for the same product, checked on meta tensors (no GPU)."""

from __future__ import annotations

import pytest
import torch

from spio.bench import matmul as bm


def _operands(dtype=torch.float16):
    a = torch.empty(16, 64, dtype=dtype, device="meta")
    w = torch.empty(32, 64, dtype=dtype, device="meta")  # (N, K): nn.Linear's weight
    bias = torch.empty(32, dtype=dtype, device="meta")
    return a, w.t(), bias


@pytest.mark.parametrize("out", ["same", "fp32"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_equivalent_gives_the_shape_and_dtype_spio_gives(out, with_bias, dtype):
    a, b, bias = _operands(dtype)
    got = bm.torch_equivalent(a, b, bias if with_bias else None, bm.OUT_DTYPES[out])()
    assert got.shape == (16, 32)
    assert got.dtype == (dtype if out == "same" else torch.float32)


def test_fp32_out_with_a_bias_falls_back_to_an_fp32_bias(monkeypatch):
    """A PyTorch whose addmm(out_dtype=float32) takes only an fp32 bias gets one (same values)."""
    a, b, bias = _operands()
    calls = []
    real = torch.addmm

    def strict(bias_arg, *args, out_dtype=None, **kw):
        calls.append(bias_arg.dtype)
        if out_dtype is not None and bias_arg.dtype != out_dtype:
            raise RuntimeError("bias must match out_dtype")
        return real(bias_arg, *args, out_dtype=out_dtype, **kw)

    monkeypatch.setattr(torch, "addmm", strict)
    op = bm.torch_equivalent(a, b, bias, torch.float32)
    assert op().dtype == torch.float32
    assert calls == [torch.float16, torch.float32]  # tried as given once, then fp32
