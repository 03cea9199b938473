"""Entry point of the `spio` command.

spio info                         versions, NVRTC, driver, GPUs, cache, performance models
spio compile FILE.cu [--arch sm_90] [-I DIR] [-o OUT.cubin] [--ptx]
spio bench [--quick] [FAMILY ...] [options of the family's benchmark, e.g. --csv F --plot F]
spio tune {collect,train,eval,select} ...
"""

from __future__ import annotations

import argparse
import sys


def _cmd_info(args: argparse.Namespace) -> int:
    from spio.cli.info import print_info

    print_info()
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from spio.cli.compile import compile_file

    return compile_file(args.file, args.arch, args.include, args.output, args.ptx, args.define)


def _cmd_bench(args: argparse.Namespace) -> int:
    from spio.cli.bench import run_bench

    return run_bench(args.families, quick=args.quick, extra=args.extra)


def _cmd_tune(args: argparse.Namespace) -> int:
    from spio.tune.cli import main as tune_main

    return tune_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spio", description=__doc__.split("\n")[1].strip())
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="versions, NVRTC, driver, GPUs, cache, performance models")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("compile", help="compile a .cu file (with its @spio blocks) with NVRTC")
    p.add_argument("file", help="the CUDA C++ source")
    p.add_argument("--arch", default="sm_90", help="target, e.g. sm_80, sm_90 (default sm_90)")
    p.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    p.add_argument("-D", dest="define", action="append", default=[], help="macro NAME[=VALUE]")
    p.add_argument("-o", dest="output", help="write the cubin (or PTX) here")
    p.add_argument("--ptx", action="store_true", help="emit PTX instead of a cubin")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("bench", help="benchmark spio's kernels against PyTorch")
    p.add_argument("families", nargs="*", help="conv2d-gw8, layernorm2d, matmul (default: all)")
    p.add_argument("--quick", action="store_true", help="a few shapes per family")
    p.set_defaults(func=_cmd_bench, extra=[])

    p = sub.add_parser("tune", help="performance models: collect, train, eval, select")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="collect|train|eval|select ...")
    p.set_defaults(func=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if args.command != "bench":
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        # Other options go to the family's own benchmark (e.g. --csv, --plot, --sweep 8192).
        args.extra = [a for a in unknown if a != "--"]
    from spio.errors import SpioError

    try:
        return args.func(args)
    except SpioError as e:
        print(f"spio {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
