"""`spio bench`: spio's kernels next to PyTorch on a GPU; without one, compile + fallback checks.

usage: spio bench [FAMILY ...] [OPTIONS]   FAMILY: conv2d-gw8, layernorm2d, matmul (the default:
                                          all three), overhead, e2e (each only when named)
       spio bench FAMILY --help           that benchmark's options (--quick, --csv, --plot, ...)

With a GPU each family's benchmark (`spio.bench.<family>.main`) runs: CUDA events, L2 flushed,
median, spio vs PyTorch in the same run. The options go to every chosen family's own parser,
which checks them before anything is measured. With no GPU spio still compiles every kernel
family for sm_90 with NVRTC (the JIT path a GPU run takes) and runs each op's documented PyTorch
fallback on the CPU, then says what a GPU adds. `overhead` (host µs per op call) and `e2e` (timm
models' training steps) measure the ops as users call them; they have nothing to do without a
GPU, and run only when named: their options are not the kernel families' (a plain `spio bench
--dtype bf16` would be refused), and e2e takes many minutes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

# CLI family name -> module under spio.bench
FAMILIES: dict[str, str] = {
    "conv2d-gw8": "spio.bench.conv2d_gw8",
    "layernorm2d": "spio.bench.layernorm_2d",
    "matmul": "spio.bench.matmul",
    "overhead": "spio.bench.overhead",
    "e2e": "spio.bench.e2e",
}
# What `spio bench` with no family runs: the kernel families (compiled and checked without a GPU).
KERNEL_FAMILIES = ("conv2d-gw8", "layernorm2d", "matmul")


def _has_gpu() -> bool:
    from spio.bench.gpu import gpu_unavailable

    return gpu_unavailable() is None


def family_parser(family: str) -> argparse.ArgumentParser:
    """The argument parser of one family's benchmark (its --help is `spio bench FAMILY --help`)."""
    return importlib.import_module(FAMILIES[family]).build_parser()


def check_family_args(family: str, options: list[str]) -> None:
    """Parses one family's options as its benchmark will (its option-combination check, then the
    --plot check); a usage error exits 2."""
    from spio.bench.report import parse_args

    module = importlib.import_module(FAMILIES[family])
    parse_args(module.build_parser(), options, getattr(module, "check_args", None))


def split_args(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(families, options) of `spio bench TOKENS`: family names anywhere, plus the words before
    the first option (so a misspelt family is reported, not passed on as an option value)."""
    families: list[str] = []
    options: list[str] = []
    for t in tokens:
        if t in FAMILIES or (not options and not t.startswith("-")):
            families.append(t)
        elif t != "--":
            options.append(t)
    return families, options


def usage(families: list[str]) -> str:
    """`spio bench --help`: the command's usage, then each chosen family's options."""
    text = [__doc__.split("\n\n")[1], ""]
    for family in families or list(FAMILIES):
        text += [f"== {family} ==", family_parser(family).format_help()]
    return "\n".join(text)


def main(tokens: list[str]) -> int:
    """`spio bench TOKENS`; returns the exit status."""
    families, options = split_args(tokens)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print(
            f"spio bench: unknown family {unknown}; choose from {sorted(FAMILIES)} "
            "(`spio bench --help` lists each family's options)",
            file=sys.stderr,
        )
        return 2
    if "-h" in options or "--help" in options:
        print(usage(families))
        return 0
    return run_bench(families, options)


def run_bench(families: list[str], options: list[str]) -> int:
    chosen = families or list(KERNEL_FAMILIES)
    per_family = {f: per_family_outputs(options, f) if len(chosen) > 1 else options for f in chosen}
    for family in chosen:  # usage errors (exit 2) before a minute of compiling or measuring
        check_family_args(family, per_family[family])
    if not _has_gpu():
        return _no_gpu(chosen, options)
    status = 0
    for family in chosen:
        print(f"\n== spio bench {family} ==", flush=True)
        status |= importlib.import_module(FAMILIES[family]).main(per_family[family])
    return status


OUTPUT_OPTIONS = ("--csv", "--plot")


def per_family_outputs(options: list[str], family: str) -> list[str]:
    """options with each --csv / --plot path given the family's name (out.csv becomes
    out_matmul.csv), so several families in one run do not overwrite each other's files."""

    def renamed(value: str) -> str:
        path = Path(value)
        return str(path.with_name(f"{path.stem}_{family}{path.suffix}"))

    out: list[str] = []
    rename_next = False
    for t in options:
        name, eq, value = t.partition("=")
        if rename_next:
            out.append(renamed(t))
        elif eq and name in OUTPUT_OPTIONS:
            out.append(f"{name}={renamed(value)}")
        else:
            out.append(t)
        rename_next = not rename_next and t in OUTPUT_OPTIONS
    return out


def _no_gpu(chosen: list[str], options: list[str]) -> int:
    """Without a GPU: the kernel families' compile and fallback check; the op-call families
    (overhead, e2e) say they need a GPU (exit 1, after the check of any kernel family)."""
    kernel = [f for f in chosen if f in KERNEL_FAMILIES]
    status = _compile_check(kernel, options) if kernel else 0
    measured = [f for f in chosen if f not in KERNEL_FAMILIES]
    if measured:
        print(
            f"spio bench {' '.join(measured)}: needs a CUDA GPU of compute capability 8.0+ "
            "(none here), to time spio's ops as users call them; nothing measured",
            file=sys.stderr,
        )
        status = status or 1
    return status


def _compile_check(chosen: list[str], options: list[str]) -> int:
    from spio.cuda import known_device
    from spio.kernels import KERNELS
    from spio.kernels.loader import compile_spec

    print(
        "No CUDA GPU of sm_80+ here: compiling every kernel family for an H100 (sm_90) with NVRTC"
    )
    dev = known_device("H100")
    prefixes = tuple(f.replace("-", "_").replace("layernorm2d", "layernorm_2d") for f in chosen)
    rows = []
    for name, kdef in KERNELS.items():
        if not name.startswith(prefixes) or kdef.examples is None:
            continue
        for params in kdef.examples():
            config = kdef.heuristic(params, dev)
            spec = kdef.spec(params, config, dev)
            start = time.perf_counter()
            image = compile_spec(spec, dev.arch)
            rows.append((name, params, config, len(image), time.perf_counter() - start))
    for name, params, config, size, seconds in rows:
        print(f"  {name:<20} {params}\n      config {config}: {size} B cubin in {seconds:.2f} s")
    print(f"compiled {len(rows)} kernel variants (cached on disk: a second run is instant)")

    from spio.cli.fallback_check import check_fallbacks

    ok = check_fallbacks(chosen)
    print(
        "\nOn a GPU (sm_80+), `spio bench --quick` also loads these cubins through the CUDA "
        "driver,\nruns them on PyTorch's stream and prints spio's GB/s or TFLOP/s next to "
        "PyTorch/cuDNN/cuBLAS\nand the device's copy bandwidth. Here the ops ran their documented "
        "PyTorch fallback."
    )
    if [o for o in options if o != "--quick"]:
        print(f"(The options {options} apply to the GPU benchmarks; nothing was measured here.)")
    return 0 if ok else 1
