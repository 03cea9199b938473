"""`spio bench e2e`: timm models' training steps with and without `spio.layers.transform`.

For each model (default regnetx_002 at batch 256, regnety_004 and convnext_atto at 128; 224x224
random images, random labels): PyTorch's model and a deep copy of it from the same
initialization, transformed by spio (the TransformReport's counts are printed, and the two
models' logits compared), both channels_last, trained with SGD (momentum 0.9) and cross-entropy
under autocast (fp16 with a GradScaler, or bf16). For each mode (eager, torch.compile default,
torch.compile "reduce-overhead"): both warmed up (compiles, CUDA-graph recording), then timed in
interleaved rounds (spio.bench.interleave: torch and spio alternate going first; a block of steps
is synchronized at its end only). Reported: median ms per step of each, and torch / spio
(> 1: spio faster) with the lowest and highest per-round ratio.

`--layers` instead profiles the layers the transform replaced, each at its shape in the model
(spio's layer next to the PyTorch module, fwd+bwd GPU time), and each model's whole GPU time per
eager step with and without spio (spio.bench.layer_profile; GPU busy time under torch.profiler).

Needs timm (`pip install 'spio[bench]'`). Long: each model compiles twice per compiled mode.

    spio bench e2e [--models regnetx_002,regnety_004,convnext_atto] [--batch N]
                   [--dtype fp16|bf16] [--modes eager,compile,reduce-overhead] [--steps N]
                   [--rounds N] [--warmup N] [--layernorm-under-compile pytorch|spio]
                   [--quick] [--csv out.csv]
    spio bench e2e --layers [--models ...] [--batch N] [--dtype ...] [--steps N] [--csv ...]
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback

import torch

from spio.bench.gpu import gpu_unavailable
from spio.bench.options import bounded_int, choice_list, name_list, output_file
from spio.bench.report import parse_args, print_table, write_csv
from spio.bench.train_step import DTYPES, MODES

# model -> default batch
MODELS = {"regnetx_002": 256, "regnety_004": 128, "convnext_atto": 128}
OTHER_BATCH = 128
NO_TIMM = "needs timm, which is not installed here: pip install 'spio[bench]' (or pip install timm)"
TIMING_COLUMNS = (
    "model", "mode", "batch", "dtype", "torch_ms", "spio_ms", "speedup", "speedup_low",
    "speedup_high",
)  # fmt: skip
LAYER_COLUMNS = ("model", "layer", "shape", "dtype", "count", "torch_us", "spio_us", "speedup")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spio bench e2e",
        description="Training steps of timm models with and without spio.layers.transform "
        "(eager, torch.compile, reduce-overhead), timed in interleaved rounds; --layers "
        "profiles the replaced layers. Needs timm.",
    )
    ap.add_argument(
        "--models",
        type=name_list,
        default=list(MODELS),
        help=f"comma-separated timm model names (default {','.join(MODELS)})",
    )
    ap.add_argument(
        "--batch",
        type=bounded_int(1),
        default=None,
        help="batch size of every model (default: "
        + ", ".join(f"{m} {b}" for m, b in MODELS.items())
        + f", others {OTHER_BATCH})",
    )
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="fp16", help="autocast dtype")
    ap.add_argument(
        "--modes",
        type=choice_list(MODES),
        default=None,
        help=f"comma-separated modes to time (default {','.join(MODES)})",
    )
    ap.add_argument(
        "--steps",
        type=bounded_int(1),
        default=None,
        help="steps per timed block (default 20, --quick 10), or profiled steps with --layers "
        "(default 5)",
    )
    ap.add_argument(
        "--rounds",
        type=bounded_int(1),
        default=None,
        help="interleaved rounds of torch and spio blocks (default 5, --quick 3)",
    )
    ap.add_argument(
        "--warmup",
        type=bounded_int(3, None, "reduce-overhead records its CUDA graphs in the first steps"),
        default=None,
        help="untimed steps of each model before timing (default 10, --quick 5)",
    )
    ap.add_argument(
        "--layernorm-under-compile",
        choices=("pytorch", "spio"),
        default="spio",
        help="what spio's LayerNorm2d layers run while torch.compile traces them "
        "(spio.layers.LayerNorm2d.under_compile; default spio)",
    )
    ap.add_argument("--quick", action="store_true", help="3 rounds of 10 steps, 5 warm-up steps")
    ap.add_argument(
        "--layers",
        action="store_true",
        help="profile the replaced layers (fwd+bwd GPU time) and each model's GPU time per step "
        "instead of timing steps",
    )
    ap.add_argument("--csv", type=output_file, default=None, help="write the table as CSV")
    return ap


def timm_unavailable() -> str | None:
    """Why the benchmark cannot build its models here (timm missing), or None."""
    try:
        import timm  # noqa: F401
    except ImportError:
        return NO_TIMM
    return None


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """timm is installed and knows every model; --layers is not given the timing's options."""
    why = timm_unavailable()
    if why:
        ap.error(why)
    import timm

    unknown = [m for m in args.models if not timm.is_model(m)]
    if unknown:
        ap.error(f"--models: timm has no model {unknown} (timm.list_models('regnet*') lists some)")
    if args.layers and (args.modes or args.rounds or args.warmup):
        ap.error("--layers profiles eager steps; --modes, --rounds and --warmup time steps")


def _models(args: argparse.Namespace, device: torch.device):
    """Yields each model's (pair, inputs, labels, batch), printing what the transform did."""
    from spio.bench.model_pair import build_pair, logits_rel_err, summary, timm_model
    from spio.bench.train_step import batch
    from spio.layers import LayerNorm2d

    for name in args.models:
        size = args.batch or MODELS.get(name, OTHER_BATCH)
        pair = build_pair(name, timm_model(name), device)
        for module in pair.spio.modules():
            if isinstance(module, LayerNorm2d):
                module.under_compile = args.layernorm_under_compile
        x, y = batch(size, getattr(pair.torch, "num_classes", 1000), device)
        err = logits_rel_err(pair, x, DTYPES[args.dtype])
        print(f"\n{name}, batch {size}: {summary(pair.report)}", flush=True)
        print(f"  logits spio vs torch (eval, {args.dtype}): max rel err {err:.2e}", flush=True)
        yield pair, x, y, size
        del pair, x, y
        torch.cuda.empty_cache()


def _time_mode(pair, x, y, args, mode: str, device: torch.device) -> dict:
    from spio.bench.interleave import compare, time_rounds
    from spio.bench.train_step import train_step

    torch._dynamo.reset()  # each mode compiles afresh; frees the last mode's CUDA graphs
    steps = {
        side: train_step(model, x, y, dtype=args.dtype, mode=mode)
        for side, model in (("torch", pair.torch), ("spio", pair.spio))
    }
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    losses = {side: step().item() for side, step in steps.items()}
    times = time_rounds(
        steps, rounds=args.rounds, steps=args.steps, sync=lambda: torch.cuda.synchronize(device)
    )
    c = compare(times["torch"], times["spio"])
    if not all(math.isfinite(v) for v in losses.values()):
        print(f"  {mode}: loss is not finite: {losses}", file=sys.stderr)
    return {
        "torch_ms": c.baseline.median,
        "spio_ms": c.candidate.median,
        "speedup": c.ratio,
        "speedup_low": c.ratio_low,
        "speedup_high": c.ratio_high,
        "torch_p20_ms": c.baseline.p20,
        "torch_p80_ms": c.baseline.p80,
        "spio_p20_ms": c.candidate.p20,
        "spio_p80_ms": c.candidate.p80,
        "torch_loss": losses["torch"],
        "spio_loss": losses["spio"],
    }


def time_models(args: argparse.Namespace, device: torch.device) -> tuple[list[dict], int]:
    rows: list[dict] = []
    failed = 0
    for pair, x, y, size in _models(args, device):
        for mode in args.modes:
            row: dict = {"model": pair.name, "mode": mode, "batch": size, "dtype": args.dtype}
            try:
                row |= _time_mode(pair, x, y, args, mode, device)
            except Exception as e:  # a failed compile or capture: report it, go on
                failed += 1
                error = traceback.format_exception_only(e)[-1].strip()
                print(f"  {mode}: FAILED: {error}", file=sys.stderr, flush=True)
                row |= {c: None for c in TIMING_COLUMNS[4:]} | {"error": error}
            rows.append(row)
            if row.get("speedup"):
                print(
                    f"  {mode:>15}: torch {row['torch_ms']:.2f} ms, spio {row['spio_ms']:.2f} ms "
                    f"per step: torch/spio {row['speedup']:.3f} "
                    f"({row['speedup_low']:.3f}..{row['speedup_high']:.3f})",
                    flush=True,
                )
        torch._dynamo.reset()
    return rows, failed


def profile_models(args: argparse.Namespace, device: torch.device) -> list[dict]:
    from spio.bench.layer_profile import profile_layers, profile_steps

    rows: list[dict] = []
    for pair, x, y, _ in _models(args, device):
        layers = profile_layers(pair, x, args.dtype)
        steps = profile_steps(pair, x, y, args.dtype, args.steps)
        model = {side: t.total_us / 1e3 for side, t in steps.items()}
        own = steps["spio"].only_in(steps["torch"])
        print_table([{c: r[c] for c in LAYER_COLUMNS} for r in layers], LAYER_COLUMNS)
        replaced = {s: sum(r["count"] * r[f"{s}_us"] for r in layers) / 1e3 for s in model}
        print(
            f"  replaced layers, fwd+bwd GPU ms per step: torch {replaced['torch']:.3f}, spio "
            f"{replaced['spio']:.3f}\n  whole model, GPU ms per eager step: torch "
            f"{model['torch']:.3f}, spio {model['spio']:.3f} (torch/spio "
            f"{model['torch'] / model['spio']:.3f})\n  inside the spio step, the kernels the "
            f"torch step lacks (summed µs per step): {own.top(k=8)}",
            flush=True,
        )
        rows += layers
        rows.append(
            {"model": pair.name, "layer": "(whole model, per step)", "shape": "", "dtype": "",
             "count": 1, "torch_us": 1e3 * model["torch"], "spio_us": 1e3 * model["spio"],
             "speedup": model["torch"] / model["spio"], "first": "",
             "torch_kernels": steps["torch"].top(), "spio_kernels": steps["spio"].top(),
             "spio_only_kernels": own.top(k=8)}
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = parse_args(ap, argv, check_args)
    why = gpu_unavailable()
    if why:
        print(f"spio bench e2e: {why}; nothing measured")
        return 2
    args.modes = args.modes or list(MODES)
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.steps = args.steps or (5 if args.layers else 10 if args.quick else 20)
    args.warmup = args.warmup or (5 if args.quick else 10)
    device = torch.device("cuda", torch.cuda.current_device())
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, {args.dtype} autocast")
    if args.layers:
        print("per layer: fwd+bwd GPU busy µs (torch.profiler), layers of one shape once")
        rows, failed = profile_models(args, device), 0
    else:
        print(
            f"ms per training step: median of {args.rounds} interleaved rounds of {args.steps} "
            f"steps; speedup = torch / spio (low..high over rounds)"
        )
        rows, failed = time_models(args, device)
        print()
        print_table([{c: _cell(r.get(c)) for c in TIMING_COLUMNS} for r in rows], TIMING_COLUMNS)
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 1 if failed else 0


def _cell(value: object) -> object:
    return "-" if value is None else value
