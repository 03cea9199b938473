"""One forward + backward of every spio op at small ragged shapes, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python scripts/sanitizer_smoke.py
    compute-sanitizer --tool racecheck python scripts/sanitizer_smoke.py [PART ...]

PART is one of conv, fused, layernorm, matmul (none: all of them).

Each op runs on fresh random inputs and is compared with PyTorch, so a run that the sanitizer
passes also computed the right answer. Small shapes keep the sanitizer's slowdown bearable.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import spio.functional as sf


def _check(name: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    err = (got.double() - want.double()).abs().max().item() / max(want.abs().max().item(), 1e-30)
    status = "ok" if err <= tol else "WRONG"
    print(f"{name:<28} rel err {err:.2e} (tol {tol:.0e}) {status}", flush=True)
    if err > tol:
        raise SystemExit(1)


def conv(
    n: int, c: int, h: int, w: int, k: int, dtype: torch.dtype, stride: tuple[int, int] = (1, 1)
) -> None:
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    wt = torch.randn(c, 8, k, k, device="cuda", dtype=dtype) * 0.2
    b = torch.randn(c, device="cuda", dtype=dtype)
    x.requires_grad_(), wt.requires_grad_(), b.requires_grad_()
    y = sf.conv2d_gw8(x, wt, b, stride=stride)
    dy = torch.randn_like(y)
    gx, gw, gb = torch.autograd.grad(y, (x, wt, b), dy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, wt, b))
    yr = F.conv2d(xr, wr, br, stride=stride, padding=k // 2, groups=c // 8)
    rx, rw, rb = torch.autograd.grad(yr, (xr, wr, br), dy.double())
    tag = f"conv2d_gw8 {n}x{c}x{h}x{w} k{k} s{stride[0]}{stride[1]}"
    _check(tag + " y", y, yr, 1e-2)
    _check(tag + " dx", gx, rx, 1e-2)
    _check(tag + " dw", gw, rw, 1e-2)
    _check(tag + " db", gb, rb, 1e-2)


def layernorm(n: int, c: int, h: int, w: int, dtype: torch.dtype) -> None:
    x = (3 + torch.randn(n, c, h, w, device="cuda", dtype=dtype)).to(
        memory_format=torch.channels_last
    )
    wt = torch.randn(c, device="cuda", dtype=dtype)
    b = torch.randn(c, device="cuda", dtype=dtype)
    x.requires_grad_(), wt.requires_grad_(), b.requires_grad_()
    y = sf.layernorm_2d(x, wt, b, eps=1e-6)
    dy = torch.randn_like(y)
    gx, gw, gb = torch.autograd.grad(y, (x, wt, b), dy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, wt, b))
    yr = F.layer_norm(xr.permute(0, 2, 3, 1), (c,), wr, br, 1e-6).permute(0, 3, 1, 2)
    rx, rw, rb = torch.autograd.grad(yr, (xr, wr, br), dy.double())
    tag = f"layernorm_2d {n}x{c}x{h}x{w}"
    for name, got, want in (("y", y, yr), ("dx", gx, rx), ("dw", gw, rw), ("db", gb, rb)):
        _check(f"{tag} {name}", got, want, 2e-2)


def _direct(
    n: int, c: int, h: int, w: int, k: int, dtype: torch.dtype, stride: int, pick: str
) -> None:
    """fprop and dgrad launched directly on a config the op may not pick: `pick` "phased" (the
    dgrad of a stride-2 layer with its M tiles paired by column parity, the dilation's zero
    columns never loaded), "ragged" (a CTA whose last group block has idle warps) or "tma" (input
    rows by TMA on sm_90; fprop only where no dgrad config has them, as at stride 2; wgrad's x
    and dy rows too, 2, 4 and 8 warps)."""
    from spio.cuda import device_attributes
    from spio.kernels.conv2d_gw8 import fprop as fp
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.kernels.loader import default_function_cache

    p = Conv2dGw8Params(
        n=n, c=c, h=h, w=w, r=k, s=k, pad_h=k // 2, pad_w=k // 2, stride_h=stride,
        stride_w=stride, has_bias=True, dtype=str(dtype).removeprefix("torch."),
    )  # fmt: skip
    dev = device_attributes(torch.cuda.current_device())
    stream = torch.cuda.current_stream().cuda_stream
    cache = default_function_cache()
    ok, ok_fprop = {
        "phased": (lambda cfg: fp.phased(p.dgrad_as_fprop(), cfg), None),
        "ragged": (lambda cfg: p.groups % cfg.warps != 0, lambda cfg: p.groups % cfg.warps != 0),
        "tma": (
            lambda cfg: fp.tma_rows(p.dgrad_as_fprop(), cfg, dev),
            lambda cfg: fp.tma_rows(p, cfg, dev),
        ),
    }[pick]
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    wt = torch.randn(c, 8, k, k, device="cuda", dtype=dtype) * 0.2
    b = torch.randn(c, device="cuda", dtype=dtype)
    dy = torch.randn(n, c, p.p, p.q, device="cuda", dtype=dtype)
    dy = dy.to(memory_format=torch.channels_last)

    def first(configs, want, required=True):
        """The first config `want` accepts; for "tma" and "ragged" the first of each warp count
        (each swizzle: 32, 64 and 128 bytes; each idle-warp block). None is an error unless not
        `required`."""
        found = {}
        for cf in configs:
            if want(cf):
                found.setdefault(cf.warps if pick in ("tma", "ragged") else 0, cf)
        if required and not found:
            raise SystemExit(f"sanitizer smoke: no {pick} config for {p}")
        return list(found.values())

    if ok_fprop is not None:
        for cfg in first(fp.configs(p, dev), ok_fprop):
            y = torch.full((n, c, p.p, p.q), float("nan"), device="cuda", dtype=dtype)
            y = y.to(memory_format=torch.channels_last)
            fp.launch(cache.get(fp.FPROP, p.variant(), cfg, dev), p, cfg, y, x, wt, b, stream)
            want = F.conv2d(
                x.double(), wt.double(), b.double(), stride=stride, padding=k // 2, groups=c // 8
            )
            _check(f"fprop {pick} {n}x{c}x{h}x{w} k{k} s{stride} {cfg}", y, want, 2e-2)
    if pick == "ragged":  # wgrad's idle-warp CTAs, each warp count (TMA rows on sm_90, 3x3)
        for cfg in first(wg.configs(p, dev), ok):
            _wgrad_direct(p, cfg, x, dy, dev, stream, cache, pick)
    if pick == "tma":  # wgrad's x and dy rows by TMA, 8 warps included (WIDE_WARP_CHOICES),
        # per warp count a tile of 16+ columns (m16n8k16, an odd last chunk by m16n8k8) and a
        # narrow one where the layer has them
        wide = wg.configs(p, dev, warp_choices=wg.WIDE_WARP_CHOICES)
        wide_tiles = first(wide, lambda cf: wg.tma_rows(p, cf, dev) and cf.block_q > 8, False)
        narrow = first(wide, lambda cf: wg.tma_rows(p, cf, dev) and cf.block_q == 8, False)
        if not wide_tiles + narrow:
            raise SystemExit(f"sanitizer smoke: no wgrad tma config for {p}")
        for cfg in wide_tiles + narrow:
            _wgrad_direct(p, cfg, x, dy, dev, stream, cache, pick)
    # The dgrad of a stride-2 layer is dilated along W: no TMA-rows config there.
    for cfg in first(fp.dgrad_configs(p, dev), ok, required=pick != "tma" or stride == 1):
        dx = torch.full((n, c, h, w), float("nan"), device="cuda", dtype=dtype)
        dx = dx.to(memory_format=torch.channels_last)
        fp.dgrad_launch(cache.get(fp.DGRAD, p.variant(), cfg, dev), p, cfg, dx, dy, wt, stream)
        want = torch.nn.grad.conv2d_input(
            (n, c, h, w), wt.double(), dy.double(), stride=stride, padding=k // 2, groups=c // 8
        )
        _check(f"dgrad {pick} {n}x{c}x{h}x{w} k{k} s{stride} {cfg}", dx, want, 2e-2)


def _wgrad_direct(p, cfg, x, dy, dev, stream, cache, pick) -> None:
    """The weight gradient of one wgrad config and the op's reduction, into NaN-poisoned
    partials, against fp64."""
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd

    slices = wg.num_slices(p, cfg, dev)
    partial = torch.full((slices * p.c * 8 * p.r * p.s,), float("nan"), device="cuda")
    bias_partial = torch.full((slices * p.c,), float("nan"), device="cuda")
    dw = torch.full((p.c, 8, p.r, p.s), float("nan"), dtype=x.dtype, device="cuda")
    db = torch.full((p.c,), float("nan"), dtype=x.dtype, device="cuda")
    kernel = cache.get(wg.WGRAD, p.variant(), cfg, dev)
    wg.launch(kernel, p, cfg, dev, partial, bias_partial, x, dy, stream)
    rcfg = rd.reduce_config(p, cfg, dev)
    rd.reduce_launch(cache.get(rd.WGRAD_REDUCE, p.variant(), rcfg, dev), p, rcfg, dw, db,
                     partial, bias_partial, slices, stream)  # fmt: skip
    want = torch.nn.grad.conv2d_weight(
        x.double(), (p.c, 8, p.r, p.s), dy.double(), stride=(p.stride_h, p.stride_w),
        padding=(p.pad_h, p.pad_w), groups=p.c // 8,
    )  # fmt: skip
    _check(f"wgrad {pick} {p.n}x{p.c}x{p.h}x{p.w} s{p.stride_h} {cfg}", dw, want, 5e-2)
    _check(f"wgrad {pick} bias {cfg}", db, dy.double().sum((0, 2, 3)), 5e-2)


def fused(
    n: int, c: int, h: int, w: int, dtype: torch.dtype, stride: int = 1, chunked: bool = False
) -> None:
    """The backward's fused kernel (dx, dw and db in one pass, then the op's reduction) launched
    directly: per warp count the first fused config of whole-image tasks, or of row chunks, so
    idle warps and CTAs that span every group (3, 6 or 7 groups) run too; against fp64, dx and
    the partials NaN-poisoned."""
    from spio.cuda import device_attributes
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.kernels.loader import default_function_cache

    p = Conv2dGw8Params(
        n=n, c=c, h=h, w=w, r=3, s=3, pad_h=1, pad_w=1, stride_h=stride, stride_w=stride,
        has_bias=True, dtype=str(dtype).removeprefix("torch."),
    )  # fmt: skip
    dev = device_attributes(torch.cuda.current_device())
    cache = default_function_cache()
    stream = torch.cuda.current_stream().cuda_stream
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    dy = torch.randn(n, c, p.p, p.q, device="cuda", dtype=dtype)
    dy = dy.to(memory_format=torch.channels_last)
    wt = torch.randn(c, 8, 3, 3, device="cuda", dtype=dtype) * 0.2
    picked: dict[int, object] = {}
    for cfg in wg.fused_configs(p, dev, chunked=chunked):
        if (cfg.block_p < p.p) == chunked:
            picked.setdefault(cfg.warps, cfg)
    if not picked:
        raise SystemExit(f"sanitizer smoke: no fused config for {p} (chunked {chunked})")
    want_dx = torch.nn.grad.conv2d_input(
        (n, c, h, w), wt.double(), dy.double(), stride=stride, padding=1, groups=c // 8
    )
    want_dw = torch.nn.grad.conv2d_weight(
        x.double(), (c, 8, 3, 3), dy.double(), stride=stride, padding=1, groups=c // 8
    )
    for cfg in picked.values():
        rcfg = rd.reduce_config(p, cfg, dev)
        launch = wg.WgradLaunch(
            cache.get(wg.WGRAD_DGRAD, wg.WGRAD_DGRAD.compiled(p), cfg, dev),
            cache.get(rd.WGRAD_REDUCE, rd.WGRAD_REDUCE.compiled(p), rcfg, dev), p, cfg, dev,
        )  # fmt: skip
        dx = torch.full((n, c, h, w), float("nan"), device="cuda", dtype=dtype)
        dx = dx.to(memory_format=torch.channels_last)
        dw = torch.empty(c, 8, 3, 3, device="cuda", dtype=dtype)
        db = torch.empty(c, device="cuda", dtype=dtype)
        ws = torch.full((launch.workspace_floats,), float("nan"), device="cuda")
        launch(dw, db, ws, x, dy, stream, dx, wt)
        tag = f"fused {n}x{c}x{h}x{w} s{stride} {cfg}"
        _check(tag + " dx", dx, want_dx, 2e-2)
        _check(tag + " dw", dw, want_dw, 5e-2)
        _check(tag + " db", db, dy.double().sum((0, 2, 3)), 5e-2)


def matmul(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    _check(f"matmul {m}x{n}x{k}", sf.matmul(a, b), a.double() @ b.double(), 1e-2)
    _check(
        f"matmul {m}x{n}x{k} b^T",
        sf.matmul(a, b.t().contiguous(), b_transposed=True),
        a.double() @ b.double(),
        1e-2,
    )


PARTS = ("conv", "fused", "layernorm", "matmul")


def main(parts: list[str]) -> None:
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"sanitizer smoke: unknown parts {unknown}; choose from {list(PARTS)}")
    chosen = set(parts or PARTS)
    torch.manual_seed(0)
    if "conv" in chosen:
        conv(2, 16, 9, 7, 3, torch.float16)
        conv(1, 8, 5, 11, 5, torch.bfloat16)
        conv(2, 16, 9, 7, 3, torch.float16, stride=(2, 2))  # odd H, W: dx's last row/column
        conv(1, 24, 6, 11, 5, torch.bfloat16, stride=(1, 2))
        conv(1, 8, 13, 4, 7, torch.float16, stride=(2, 1))
        _direct(2, 16, 6, 37, 3, torch.float16, 2, "phased")
        _direct(1, 8, 5, 40, 5, torch.bfloat16, 2, "phased")
        _direct(2, 56, 9, 11, 3, torch.float16, 1, "ragged")  # 7 groups: idle warps
        _direct(1, 104, 7, 34, 3, torch.bfloat16, 2, "ragged")  # 13 groups, stride 2
        if torch.cuda.get_device_capability() >= (9, 0):
            _direct(2, 64, 9, 13, 3, torch.float16, 1, "tma")  # 2, 4 and 8 warps
            _direct(2, 32, 7, 21, 3, torch.bfloat16, 1, "tma")  # Q 21: 16 + 5, 16 + 8 of 32
            _direct(1, 48, 11, 9, 3, torch.bfloat16, 2, "tma")  # stride 2: fprop only
    if "fused" in chosen:
        fused(2, 56, 9, 11, torch.float16)  # 7 groups: 4-warp blocks with idle warps, 8 spanning
        fused(3, 24, 15, 17, torch.bfloat16, stride=2)  # 3 groups: a 4-warp CTA spans them
        fused(2, 48, 30, 30, torch.float16, chunked=True)  # row chunks; 6 groups
        fused(2, 24, 29, 27, torch.float16, stride=2, chunked=True)  # chunks overlap one row
    if "layernorm" in chosen:
        layernorm(2, 96, 5, 3, torch.float16)
        layernorm(1, 768, 3, 3, torch.bfloat16)
    if "matmul" in chosen:
        matmul(17, 40, 64, torch.float16)
        matmul(130, 264, 96, torch.bfloat16)
        if torch.cuda.get_device_capability() == (9, 0):
            # 16 x 17 tiles of 128 x 256: more than a wave, so B as (N, K) runs the persistent
            # cluster config (matmul_sm90.LARGE_PICK; a row-major B the plain one); short K for
            # the sanitizer.
            matmul(2048, 4352, 64, torch.float16)
            # Decode: B as (N, K) runs swapped (C^T = B A^T in 16-wide tiles), split over K in 4
            # (matmul_sm90.swap_choice), its partials summed by the second kernel.
            matmul(5, 1000, 1032, torch.bfloat16)
    torch.cuda.synchronize()
    print(f"sanitizer smoke: {', '.join(p for p in PARTS if p in chosen)} ran and matched PyTorch")


if __name__ == "__main__":
    main(sys.argv[1:])
