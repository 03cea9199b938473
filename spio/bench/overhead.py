"""`spio bench overhead`: what one call of each spio op costs from Python, next to PyTorch's own.

For every case of spio.bench.overhead_cases (conv2d_gw8 vs F.conv2d, layernorm_2d vs timm's
LayerNorm2d, matmul vs F.linear / torch.matmul; fp16) and each pass (fwd; fwd with inputs that
require grad; fwd+bwd), spio's op and PyTorch's, in the same run (µs per call):

  host       making back-to-back calls, no synchronize or GPU spin in between (the host path:
             Python, dispatch, allocation, launches); median over batches
             (spio.bench.host_timing)
  kernel     the GPU time of the same calls captured into a CUDA graph and replayed (kernels only,
             no host time; L2 warm, as in back-to-back calls) (spio.bench.graph_timing); "-" with
             a note when the capture failed
  called     the wall time of a batch of back-to-back calls including the synchronize after the
             last one, per call: what a loop of such calls takes, about max(host, kernel)
  host_x     spio's host time over PyTorch's (1.0 = as cheap as PyTorch's own)
  spread     the widest relative p20..p80 of the row's host and called times, in percent

Every call's compiles, config selection and loading happen in warm-up calls first; the timed
calls run under SPIO_ASSERT_NO_COMPILE=1. Each case also checks spio's forward against PyTorch's.

    spio bench overhead [--quick] [--ops conv2d_gw8,layernorm_2d,matmul] [--calls N]
                        [--batches N] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import sys

import torch

from spio.bench.gpu import gpu_unavailable
from spio.bench.host_timing import time_calls
from spio.bench.options import bounded_int, choice_list, output_file
from spio.bench.overhead_cases import OPS, PASSES, Case, cases, grad_leaves, pass_call
from spio.bench.progress import progress
from spio.bench.report import parse_args, print_table, write_csv
from spio.bench.stats import Stats

COLUMNS = (
    "op", "case", "pass", "spio_host_us", "torch_host_us", "spio_kernel_us", "torch_kernel_us",
    "spio_called_us", "torch_called_us", "host_x", "spread_pct",
)  # fmt: skip
GRAPH_CALLS = 10  # op calls captured in one graph
GRAPH_REPLAYS = 20  # graph replays per timed sample
MAX_REL_ERR = 1e-2


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spio bench overhead",
        description="Host µs per call of each spio op (fwd, fwd with grad, fwd+bwd) next to its "
        "PyTorch equivalent, with the kernel time (CUDA-graph replay) and the as-called time.",
    )
    ap.add_argument("--quick", action="store_true", help="5 batches, 3 graph samples")
    ap.add_argument(
        "--ops",
        type=choice_list(OPS),
        default=list(OPS),
        help=f"comma-separated ops to time (default {','.join(OPS)})",
    )
    ap.add_argument(
        "--calls",
        type=bounded_int(
            10,
            1000,
            "fewer: the clock and the last call's GPU time weigh too much; more: a GPU-bound op "
            "can fill the driver's queue of pending launches and block the host while timed",
        ),
        default=100,
        help="back-to-back calls per timed batch (default 100)",
    )
    ap.add_argument(
        "--batches",
        type=bounded_int(3, None, "a median and a spread need several"),
        default=None,
        help="timed batches per row (default 20, --quick 5)",
    )
    ap.add_argument("--csv", type=output_file, default=None, help="write the table as CSV")
    return ap


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.double().abs().max().item() or 1.0
    return (got.double() - want.double()).abs().max().item() / scale


def _graph(fn, device: torch.device, samples: int, notes: list[str], what: str) -> Stats | None:
    """The CUDA-graph kernel time of fn, or None (and a note saying why) when it can't be taken."""
    if device.type != "cuda":
        return None
    from spio.bench.graph_timing import graph_time_us

    try:
        return graph_time_us(
            fn, calls=GRAPH_CALLS, replays=GRAPH_REPLAYS, samples=samples, device=device
        )
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        notes.append(f"{what}: no CUDA-graph time, the capture failed: {first}")
        return None


def measure_case(
    case: Case, device: torch.device, *, calls: int, batches: int, graph_samples: int
) -> tuple[list[dict], list[str]]:
    """The case's rows (one per pass) and notes (failed captures, wrong results)."""
    from spio.settings import override

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    notes: list[str] = []
    base = case.inputs(device)
    err = _rel_err(case.spio(*base), case.torch(*base))
    if not err <= MAX_REL_ERR:
        notes.append(f"{case.op} {case.label}: WRONG forward, max rel err {err:.2e} vs PyTorch")
    rows = []
    for pass_ in PASSES:
        args = base if pass_ == "fwd" else grad_leaves(base)
        row: dict = {"op": case.op, "case": case.label, "pass": pass_}
        for impl, op in (("spio", case.spio), ("torch", case.torch)):
            fn = pass_call(op, args, pass_)
            fn()  # first call of this pass: compiles and loads its kernels
            sync()
            with override(assert_no_compile=True):
                t = time_calls(fn, sync, calls=calls, batches=batches)
                what = f"{impl} {case.op} {case.label} {pass_}"
                k = _graph(fn, device, graph_samples, notes, what)
            row[f"{impl}_host_us"] = t.host.median
            row[f"{impl}_kernel_us"] = k.median if k else None
            row[f"{impl}_called_us"] = t.as_called.median
            row[f"{impl}_stats"] = (t.host, t.as_called, k)
        rows.append(_finish(row))
    return rows, notes


def _finish(row: dict) -> dict:
    """Adds the ratio, the spread and the CSV's percentile columns to a measured row."""
    spreads = []
    for impl in ("spio", "torch"):
        host, called, kernel = row.pop(f"{impl}_stats")
        spreads += [host.spread, called.spread]
        for name, s in (("host", host), ("called", called), ("kernel", kernel)):
            row[f"{impl}_{name}_p20_us"] = s.p20 if s else None
            row[f"{impl}_{name}_p80_us"] = s.p80 if s else None
    row["host_x"] = row["spio_host_us"] / row["torch_host_us"]
    row["spread_pct"] = 100 * max(spreads)
    return {**{c: row[c] for c in COLUMNS}, **row}


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = parse_args(ap, argv)
    why = gpu_unavailable()
    if why:
        print(f"spio bench overhead: {why}; nothing measured")
        return 2
    batches = args.batches or (5 if args.quick else 20)
    samples = 3 if args.quick else 5
    device = torch.device("cuda", torch.cuda.current_device())
    print(
        f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}: {batches} batches of "
        f"{args.calls} back-to-back calls per row; CUDA graphs of {GRAPH_CALLS} calls x "
        f"{GRAPH_REPLAYS} replays x {samples}",
        flush=True,
    )
    torch.manual_seed(0)
    rows: list[dict] = []
    notes: list[str] = []
    chosen = cases(args.ops)
    for case in progress(chosen, "overhead", "case"):
        case_rows, case_notes = measure_case(
            case, device, calls=args.calls, batches=batches, graph_samples=samples
        )
        rows += case_rows
        notes += case_notes
    print("\nµs per call (median); spio = spio.functional, torch = the PyTorch call:")
    for op, baseline in dict.fromkeys((c.op, c.baseline) for c in chosen):
        print(f"  {op}: {baseline}")
    print_table([{c: "-" if r[c] is None else r[c] for c in COLUMNS} for r in rows], COLUMNS)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 1 if any("WRONG" in n for n in notes) else 0
