"""Programmatic dependent launch (PDL) on vs off: end-to-end time of spio's two-pass gradients.

    python benchmarks/pdl_check.py [--reps 100] [--no-side-stream]

Cases (fp16): layernorm_2d backward (dx kernel + ordered dweight/dbias reduce) at C256 14x14 and
C512 7x7, N=128, with weight and bias; conv2d_gw8 weight gradient (wgrad kernel + ordered
reduce) at C64 56x56 k3 N=128 and C512 7x7 k7 N=8, with bias.

Each case is timed three ways with spio.timing.bench (CUDA events, L2 flushed before every
rep, median), PDL off then on:
  launch  the family's tune runner: the two kernel launches with the least Python between them
  op      the public op (torch.ops.spio.layernorm_2d_backward / conv2d_gw8_wgrad), as autograd
          calls it: dispatch, allocations, selection lookup, then the two launches
  graph   the op captured in a CUDA graph and replayed (no host work between the kernels)
on torch's current stream (the legacy default stream unless the caller set one) and on a side
stream. `bench` holds each timed call behind a GPU spin longer than the call's host time, so
"launch" and "op" measure GPU time (with PDL, the gap between the two kernels) and should read
close to "graph"; the numbers recorded before that hold (docs/ops/layernorm_2d.md, third GPU
session) included host time. PDL is switched with SPIO_PDL (read when a kernel is loaded, so
the loaded-kernel cache is cleared at each switch). The `pdl` column says whether the reduce
kernels were loaded with PDL (False on GPUs below sm_90 or drivers below CUDA 12.3: then on and
off are the same launch).
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from spio.cuda import device_attributes
from spio.kernels.loader import default_function_cache
from spio.settings import override
from spio.timing import bench

CL = torch.channels_last
LN_CASES = ((128, 256, 14, 14), (128, 512, 7, 7))  # (N, C, H, W)
CONV_CASES = ((128, 64, 56, 56, 3), (8, 512, 7, 7, 7))  # (N, C, H, W, k)


def _ln(shape):
    """(launch, op) zero-argument callables of the layernorm_2d backward at shape."""
    import spio.functional  # noqa: F401  (registers the ops)
    from spio.functional.layernorm_2d import backward_config
    from spio.kernels import layernorm_2d as k
    from spio.kernels.layernorm_2d_params import LayerNorm2dParams

    n, c, h, w = shape
    x = (3 + torch.randn(shape, device="cuda")).half().contiguous(memory_format=CL)
    dy = torch.randn(shape, device="cuda").half().contiguous(memory_format=CL)
    wt, b = torch.randn(c, device="cuda").half(), torch.randn(c, device="cuda").half()
    p = LayerNorm2dParams.from_tensors(x, wt, b)
    dev = device_attributes(torch.cuda.current_device())
    cfg = backward_config(p, dev)  # the op's selection (per exact shape)
    _, mean, rstd = torch.ops.spio.layernorm_2d(x, wt, b, 1e-6)
    launch = k.BWD.make_runner(p, cfg)
    return launch, lambda: torch.ops.spio.layernorm_2d_backward(dy, x, mean, rstd, wt, b)


def _conv(shape):
    """(launch, op) zero-argument callables of the conv2d_gw8 weight gradient at shape."""
    import spio.functional  # noqa: F401  (registers the ops)
    from spio.functional.conv2d_gw8 import config_for
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params
    from spio.kernels.conv2d_gw8.tune import make_wgrad_runner

    n, c, h, w, r = shape
    pad = r // 2
    p = Conv2dGw8Params(n=n, c=c, h=h, w=w, r=r, s=r, pad_h=pad, pad_w=pad, has_bias=True,
                        dtype="float16")  # fmt: skip
    dev = device_attributes(torch.cuda.current_device())
    cfg = config_for(wg.WGRAD, p, dev)  # the op's selection (per exact shape)
    x = torch.randn(n, c, h, w, device="cuda").half().contiguous(memory_format=CL)
    dy = torch.randn(n, c, h, w, device="cuda").half().contiguous(memory_format=CL)
    launch = make_wgrad_runner(p, cfg)
    return launch, lambda: torch.ops.spio.conv2d_gw8_wgrad(x, dy, [r, r], [pad, pad], True)


def _graphed(op):
    """A replay of op captured in a CUDA graph (op was run once, so everything is loaded)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op()
    return graph.replay


def _reduces_use_pdl() -> bool:
    reduces = ("layernorm_2d_bwd_reduce", "conv2d_gw8_wgrad_reduce")
    loaded = [v for key, v in default_function_cache().items() if key[0] in reduces]
    return bool(loaded) and all(v.pdl for v in loaded)


def _time_case(make, shape, stream, reps: int) -> dict[str, tuple[float, bool]]:
    """way -> (median us, reduce loaded with PDL) under the current SPIO_PDL."""
    default_function_cache().clear()
    out = {}
    with torch.cuda.stream(stream):
        launch, op = make(shape)
        launch()
        op()
        torch.cuda.synchronize()
        replay = _graphed(op)
        pdl = _reduces_use_pdl()
        for way, fn in (("launch", launch), ("op", op), ("graph", replay)):
            out[way] = (bench(fn, reps=reps).median_ms * 1e3, pdl)
        torch.cuda.synchronize()
    del launch, op, replay  # the graph and runners go before the kernels they launch unload
    default_function_cache().clear()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100, help="timed calls per measurement")
    ap.add_argument("--no-side-stream", action="store_true", help="only torch's current stream")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("pdl_check: needs a CUDA GPU")
        return 1
    dev = device_attributes(torch.cuda.current_device())
    print(f"{dev.name} ({dev.arch}); times are medians in us; saved = off - on")
    streams = [("current", torch.cuda.current_stream())]
    if not args.no_side_stream:
        streams.append(("side", torch.cuda.Stream()))
    cases = [(f"layernorm_2d bwd N{s[0]} C{s[1]} {s[2]}x{s[3]}", _ln, s) for s in LN_CASES]
    cases += [(f"conv2d_gw8 wgrad N{s[0]} C{s[1]} {s[2]}x{s[3]} k{s[4]}", _conv, s)
              for s in CONV_CASES]  # fmt: skip
    header = (
        f"{'case':<36} {'way':<7} {'stream':<8} {'off':>8} {'on':>8} {'saved':>7} {'on/off':>7}"
    )
    print(header + "  pdl")
    print("-" * (len(header) + 5))
    for name, make, shape in cases:
        for sname, stream in streams:
            with override(pdl=False):
                off = _time_case(make, shape, stream, args.reps)
            with override(pdl=True):
                on = _time_case(make, shape, stream, args.reps)
            for way in ("launch", "op", "graph"):
                (t_off, _), (t_on, pdl) = off[way], on[way]
                print(
                    f"{name:<36} {way:<7} {sname:<8} {t_off:8.2f} {t_on:8.2f} "
                    f"{t_off - t_on:7.2f} {t_on / t_off:7.3f}  {pdl}"
                )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
