"""Runs each op's documented PyTorch fallback on CPU tensors and checks it against PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _report(name: str, got: torch.Tensor, want: torch.Tensor) -> bool:
    err = (got.double() - want.double()).abs().max().item()
    scale = want.double().abs().max().item() or 1.0
    ok = err / scale < 1e-2
    verdict = "ok" if ok else "FAIL"
    print(f"  {name:<12} CPU fallback vs PyTorch: max rel err {err / scale:.2e} {verdict}")
    return ok


def _conv() -> bool:
    from spio.functional import conv2d_gw8

    x = torch.randn(2, 16, 9, 7, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(16, 8, 3, 3, dtype=torch.bfloat16)
    b = torch.randn(16, dtype=torch.bfloat16)
    want = F.conv2d(x.float(), w.float(), b.float(), padding=1, groups=2)
    return _report("conv2d_gw8", conv2d_gw8(x, w, b), want)


def _layernorm() -> bool:
    from spio.functional import layernorm_2d

    x = 3 + torch.randn(2, 96, 5, 3).to(memory_format=torch.channels_last)
    w, b = torch.randn(96), torch.randn(96)
    want = F.layer_norm(x.permute(0, 2, 3, 1), (96,), w, b, 1e-6).permute(0, 3, 1, 2)
    return _report("layernorm2d", layernorm_2d(x, w, b, eps=1e-6), want)


def _matmul() -> bool:
    from spio.functional import matmul

    a = torch.randn(17, 64, dtype=torch.bfloat16)
    b = torch.randn(64, 40, dtype=torch.bfloat16)
    return _report("matmul", matmul(a, b), a.float() @ b.float())


CHECKS = {"conv2d-gw8": _conv, "layernorm2d": _layernorm, "matmul": _matmul}


def check_fallbacks(families: list[str]) -> bool:
    print("\nPyTorch fallbacks (CPU tensors):")
    torch.manual_seed(0)
    ok = True
    for family in families:
        try:
            ok &= CHECKS[family]()
        except ImportError as e:
            print(f"  {family:<12} op not available in this build ({e})")
            ok = False
    return ok
