"""Entry point of the `spio` command.

spio info                         versions, NVRTC, driver, GPUs, cache, performance models
spio compile FILE.cu [--arch sm_90] [-I DIR] [-o OUT.cubin] [--ptx]
spio bench [FAMILY ...] [--quick] [the family's options: spio bench FAMILY --help]
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
    from spio.cli.bench import main as bench_main

    return bench_main(args.tokens)


def _cmd_tune(args: argparse.Namespace) -> int:
    from spio.cli.tune import main as tune_main

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

    # Listed for `spio --help`; `main` hands everything after "bench" to spio.cli.bench, whose
    # families parse their own options (`spio bench FAMILY --help`).
    p = sub.add_parser(
        "bench", help="benchmark spio's kernels against PyTorch (spio bench FAMILY --help)"
    )
    p.add_argument("tokens", nargs=argparse.REMAINDER, help="[FAMILY ...] [OPTIONS]")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("tune", help="performance models: collect, train, eval, select")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="collect|train|eval|select ...")
    p.set_defaults(func=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        # Everything after "bench" (families, --help, the families' options such as --csv F,
        # --sweep 8192) is spio.cli.bench's to parse: argparse would take an option's value
        # for a family name, or answer --help itself.
        args = argparse.Namespace(command="bench", func=_cmd_bench, tokens=argv[1:])
    elif argv[:1] == ["tune"]:  # likewise: `spio tune --help` lists tune's subcommands
        args = argparse.Namespace(command="tune", func=_cmd_tune, rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    from spio.errors import SpioError

    try:
        return args.func(args)
    except SpioError as e:
        print(f"spio {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
