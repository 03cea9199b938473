"""The matmul op at decode shapes with and without split-K, PDL on and off, as called.

    python benchmarks/matmul_split_ab.py [--calls 50] [--batches 5]

For each shape, `spio.functional.matmul` (B as (N, K)) is timed as called (back-to-back eager
calls: the host's time to make them and the time until the GPU has run them,
`spio.bench.host_timing.time_calls`) and replayed from a CUDA graph (`graph_time_us`), running the
plain config (the heuristic's tiles without the split) or `matmul_sm90.split_choice`'s (the
split the heuristic picked at these shapes until the eighteenth session; its cost model may
choose another split count now), each with SPIO_PDL on and off (the split sum is the only PDL
launch here), next to torch.matmul. Needs an sm_90 GPU. docs/ops/matmul.md ("Split-K for decode
shapes") has the measurements.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import replace

SHAPES = ((16, 4096, 4096), (1, 4096, 4096), (64, 4096, 4096), (16, 4096, 11008))  # M, N, K


def _time(fn, calls: int, batches: int) -> dict[str, float]:
    import torch

    from spio.bench.graph_timing import graph_time_us
    from spio.bench.host_timing import time_calls

    fn()
    torch.cuda.synchronize()
    t = time_calls(fn, torch.cuda.synchronize, calls=calls, batches=batches)
    graph = graph_time_us(fn, calls=calls).median
    return {"host_us": t.host.median, "as_called_us": t.as_called.median, "graph_us": graph}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50, help="back-to-back calls per batch")
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("matmul_split_ab needs an sm_90 GPU (H100 / H200)")
        return 2
    import importlib

    import spio.functional as sf
    from spio.bench.report import print_table
    from spio.functional import _plans
    from spio.kernels import matmul_sm90 as k90
    from spio.kernels.loader import default_function_cache
    from spio.settings import override

    mm = importlib.import_module("spio.functional.matmul")
    op_choice = mm.kernel_choice  # the op's choice (the heuristic: split-K at these shapes)

    def plain_kernel_choice(p, dev):
        family, cfg = op_choice(p, dev)
        return (family, replace(cfg, split_k=1)) if family == "sm90" else (family, cfg)

    def split_kernel_choice(p, dev):
        family, cfg = op_choice(p, dev)
        split = k90.split_choice(p, dev) if family == "sm90" else None
        return (family, split) if split is not None else (family, cfg)

    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").half()
        b = torch.randn(n, k, device="cuda").half()
        row = {"shape": f"{m}x{n}x{k}"}
        torch_op = functools.partial(torch.matmul, a, b.t())
        spio_op = functools.partial(sf.matmul, a, b, b_transposed=True)
        row.update({f"torch_{key}": v for key, v in _time(torch_op, args.calls,
                                                          args.batches).items()})  # fmt: skip
        for name, choice in (("plain", plain_kernel_choice), ("split", split_kernel_choice)):
            for pdl in (True, False):
                mm.kernel_choice = choice
                _plans.clear()
                default_function_cache().clear()
                try:
                    with override(pdl=pdl):
                        times = _time(spio_op, args.calls, args.batches)
                finally:
                    mm.kernel_choice = op_choice
                    _plans.clear()
                    default_function_cache().clear()
                tag = f"{name}{'' if pdl else '_nopdl'}"
                row.update({f"{tag}_{key}": v for key, v in times.items()})
        rows.append(row)
        print(row, flush=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
