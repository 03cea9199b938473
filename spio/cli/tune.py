"""`spio tune {collect,train,eval,select}`.

A bad option value (an unknown or untuned --kernel, a --device or --params that names nothing,
a --data file that is not there, a count out of range) is a usage error: one line on stderr, exit
2. A precondition the command cannot meet (no usable GPU for collect, too few samples to
evaluate, a dataset's GPU that spio does not know) is one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from spio.settings import settings

if TYPE_CHECKING:
    from spio.cuda import DeviceAttributes


def _usage_error(cmd: str, message: str) -> NoReturn:
    """A bad option value: `spio tune cmd: message` on stderr, exit status 2."""
    print(f"spio tune {cmd}: {message}", file=sys.stderr)
    raise SystemExit(2)


def _number(kind: type[int] | type[float], least: float) -> Callable[[str], float]:
    """An argparse type: a number of `kind` that is at least `least` (else exit 2 with usage)."""

    def parse(text: str) -> float:
        value = kind(text)  # a ValueError becomes argparse's "invalid int value: 'x'"
        if not value >= least:  # NaN too
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _data_path(kernel: str) -> Path:
    return Path(settings().cache_dir) / "tune" / f"{kernel}.jsonl"


def _kernels(name: str, cmd: str) -> list[str]:
    """The registry names `--kernel name` means for `spio tune cmd`; a usage error with the choices
    for an unknown name, or for a family that is not tuned (no sample_params: the reduce passes,
    whose config is derived from their first pass's, so no model ranks them)."""
    from spio.kernels import KERNELS

    tuned = [k for k, d in KERNELS.items() if d.sample_params is not None]
    if name == "all":
        return tuned
    if name not in KERNELS:
        _usage_error(cmd, f"unknown kernel {name!r}; tuned kernels: {', '.join(tuned)} (or 'all')")
    if name not in tuned:
        parent = name.removesuffix("_reduce")
        via = f" from {parent}'s config" if parent in tuned else ""
        _usage_error(
            cmd,
            f"{name} is not tuned: its config is derived{via} (it has no sample_params), so "
            f"there is nothing to collect, train, evaluate or rank; tuned kernels: "
            f"{', '.join(tuned)}",
        )
    return [name]


def _samples(kernel: str, data: list[str], cmd: str) -> list:
    """The samples of `kernel` in the --data files (each with its per-GPU shards, FILE.gpuN, from
    `collect --device all`), by default the cache's dataset; a usage error for a --data file
    that is not there, shards included."""
    from spio.tune.dataset import read

    paths = [Path(p) for p in data] or [_data_path(kernel)]
    files = []
    for p in paths:
        shards = sorted(p.parent.glob(p.name + ".gpu*"))
        if data and not p.exists() and not shards:
            _usage_error(cmd, f"--data {p}: no such file (nor per-GPU shards {p}.gpuN)")
        files += [p, *shards]
    return [s for f in files for s in read(f, kernel)]


def _device_for(name: str, cmd: str, option: bool = False) -> DeviceAttributes:
    """Attributes of a named GPU model: the real one if present, else spio's table. When it is
    neither, the known names: a usage error for an `option` (select --device), else exit 1 (a
    dataset's GPU)."""
    from spio.cuda import device_attributes, device_count, known_device

    for i in range(device_count()):
        if device_attributes(i).name == name:
            return device_attributes(i)
    try:
        return known_device(name)
    except ValueError as e:
        message = str(e).removeprefix("known_device: ")
        if option:
            _usage_error(cmd, message)
        raise SystemExit(f"spio tune {cmd}: {message}") from None


def _collect_ordinals(device: str) -> list[int]:
    """The GPU ordinals `--device` names for collect; SystemExit saying what is missing when
    there is no usable GPU (collect times kernels: it needs one; train/eval/select do not)."""
    import torch

    if not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
        raise SystemExit(
            "spio tune collect: needs a CUDA GPU to time kernels on, and torch sees none "
            f"(torch {torch.__version__}, {build}). Run collect on a GPU machine with a CUDA "
            "build of torch; train, eval and select run without a GPU."
        )
    count = torch.cuda.device_count()
    if device == "all":
        ordinals = list(range(count))
    else:
        try:
            ordinals = [int(device)]
        except ValueError:
            ordinals = [-1]
        if not 0 <= ordinals[0] < count:
            _usage_error(
                "collect", f"--device must be a GPU ordinal 0..{count - 1} or 'all', got {device!r}"
            )
    for i in ordinals:
        cc = torch.cuda.get_device_capability(i)
        if cc < (8, 0):
            raise SystemExit(
                f"spio tune collect: GPU {i} ({torch.cuda.get_device_name(i)}) has compute "
                f"capability {cc[0]}.{cc[1]}; spio's kernels need 8.0 or newer"
                + (" (pick another with --device)" if count > 1 else "")
            )
    return ordinals


def cmd_collect(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.collect import collect, collect_all_gpus

    if a.active and a.max_configs is None:
        _usage_error(
            "collect",
            "--active chooses which configs of a shape to measure, so it needs --max-configs N "
            "(e.g. --max-configs 40 --active); without --max-configs every config is measured",
        )
    kernels = _kernels(a.kernel, "collect")
    shapes = None
    if a.shapes is not None:
        if len(kernels) != 1 or a.device == "all":
            _usage_error(
                "collect",
                "--shapes lists one family's layers for one GPU: name the family with --kernel "
                "and a GPU with --device N",
            )
        shapes, listed = _listed_shapes(KERNELS[kernels[0]], Path(a.shapes))
    ordinals = _collect_ordinals(a.device)
    for k in kernels:
        out = Path(a.out) if a.out else _data_path(k)
        if a.device == "all":
            n = collect_all_gpus(
                k, a.minutes, out, a.seed, a.max_configs, a.active, a.compile_ahead
            )
        else:
            n = collect(
                _with_listed_configs(KERNELS[k], listed) if shapes else KERNELS[k],
                a.minutes,
                out,
                ordinals[0],
                a.seed,
                a.max_configs,
                active=a.active,
                shapes=shapes,
                compile_ahead=a.compile_ahead,
            )
        print(f"{k}: {n} new samples -> {out}")
    return 0


def _listed_shapes(kdef, path: Path) -> tuple[list, dict]:
    """`--shapes FILE`: a JSON list of the family's params as the datasets write them (a row's
    "params"), or one such object a line; each checked by the family's params type. An entry
    may instead be {"params": {...}, "configs": [{...}, ...]}: that shape measures only those
    configs (a row's "config" each), e.g. the rows a kernel change made stale. A name ending in
    .gz is read gzipped. Returns the shapes in order (each once) and the listed configs by
    shape (shapes listed bare are absent: every config)."""
    import gzip

    from spio.tune.features import from_dict

    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode()
    except (OSError, EOFError, UnicodeDecodeError) as e:  # gzip's errors are OSError, EOFError
        _usage_error(
            "collect", f"--shapes: cannot read {path}: {getattr(e, 'strerror', None) or e}"
        )
    try:
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            _usage_error(
                "collect",
                f"--shapes: {path} is neither a JSON list nor JSON lines ({e.msg}, line "
                f"{e.lineno})",
            )
    if not rows:
        _usage_error("collect", f"--shapes: {path} lists no shapes")
    out: list = []
    listed: dict = {}
    bare: set = set()
    for i, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise TypeError(
                    f"a JSON object of {kdef.params_type.__name__}'s fields, got {row!r}"
                )
            configs = None
            if "params" in row:
                if set(row) != {"params", "configs"} or not isinstance(row["configs"], list):
                    raise TypeError(
                        'an entry with "params" takes a "configs" list of the family\'s '
                        f"{kdef.config_type.__name__} fields and nothing else, got keys "
                        f"{sorted(row)}"
                    )
                configs = [from_dict(kdef.config_type, c) for c in row["configs"]]
                row = row["params"]
            params = from_dict(kdef.params_type, row)
        except (TypeError, ValueError) as e:
            _usage_error("collect", f"--shapes: shape {i} of {path} ({kdef.name}): {e}")
        if params not in bare and params not in listed:
            out.append(params)
        if configs is None:
            bare.add(params)
            listed.pop(params, None)
        elif params not in bare:
            listed.setdefault(params, []).extend(configs)
    return out, listed


def _with_listed_configs(kdef, listed: dict):
    """kdef whose `configs` gives a listed shape only its listed configs that are in its space
    on the GPU (in the space's order; those outside it are reported once and skipped)."""
    if not listed:
        return kdef
    wanted = {p: set(cs) for p, cs in listed.items()}
    warned: set = set()

    def configs(p, dev):
        space = kdef.configs(p, dev)
        if p not in wanted:
            return space
        keep = [c for c in space if c in wanted[p]]
        if p not in warned and len(keep) < len(wanted[p]):
            warned.add(p)
            print(
                f"spio tune collect: {len(wanted[p]) - len(keep)} listed configs of {p} are not "
                f"in {kdef.name}'s space on {dev.name}: skipped",
                file=sys.stderr,
            )
        return keep

    return dataclasses.replace(kdef, configs=configs)


def cmd_train(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.evaluate import feature_rows
    from spio.tune.model import PerfModel
    from spio.tune.store import PACKAGE_MODELS, local_models_dir, model_path

    out_dir = PACKAGE_MODELS if a.ship else Path(a.out) if a.out else local_models_dir()
    for k in _kernels(a.kernel, "train"):
        by_device = defaultdict(list)
        for s in _samples(k, a.data, a.cmd):
            by_device[s.device].append(s)
        if not by_device:
            print(f"{k}: no samples (run `spio tune collect --kernel {k}` on a GPU first)")
            continue
        if a.pool_for is not None:
            from spio.tune.evaluate import pooled_rows

            pool, samples = _pooled(k, by_device, a.pool_for, "train")
            model = PerfModel.train(
                k,
                a.pool_for,
                pool[a.pool_for].arch,
                pooled_rows(KERNELS[k], samples, pool),
                [s.latency_us for s in samples],
            )
            path = model_path(out_dir, k, a.pool_for)
            model.save(path)
            print(
                f"{k} on {a.pool_for}: trained on {len(samples)} samples of {len(pool)} GPUs "
                f"with device features -> {path}"
            )
            continue
        for device_name, samples in sorted(by_device.items()):
            dev = _device_for(device_name, "train")
            model = PerfModel.train(
                k,
                device_name,
                samples[0].arch,
                feature_rows(KERNELS[k], samples, dev),
                [s.latency_us for s in samples],
            )
            path = model_path(out_dir, k, device_name)
            model.save(path)
            print(f"{k} on {device_name}: trained on {len(samples)} samples -> {path}")
    return 0


def _pooled(
    kernel: str, by_device: dict[str, list], target: str, cmd: str
) -> tuple[dict[str, DeviceAttributes], list]:
    """--pool-for: every GPU of the data (name -> attributes) and their samples in one list,
    ordered by GPU name (a usage error unless `target` and another GPU of its arch are there)."""
    if target not in by_device or len(by_device) < 2:
        _usage_error(
            cmd,
            f"--pool-for {target!r} needs {kernel} samples of that GPU and of another one in "
            f"--data; the data has {sorted(by_device)}",
        )
    pool = {name: _device_for(name, cmd) for name in sorted(by_device)}
    archs = {d.arch for d in pool.values()}
    if len(archs) > 1:
        _usage_error(
            cmd, f"--pool-for pools GPUs of one arch (a model serves one); the data has {archs}"
        )
    return pool, [s for name in pool for s in by_device[name]]


def cmd_eval(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.tune.evaluate import evaluate, evaluate_seeds

    kernels = _kernels(a.kernel, "eval")
    fixed = None
    if a.model is not None and a.seeds > 1:
        _usage_error("eval", "--seeds trains the folds' models; --model ranks with one model")
    if a.model is not None and a.pool_for is not None:
        _usage_error("eval", "--pool-for trains the folds' models; --model ranks with one model")
    if a.model is not None:
        from spio.tune.model import ModelFormatError, PerfModel

        if len(kernels) != 1:
            _usage_error("eval", "--model scores one family's model: name one --kernel")
        try:
            fixed = PerfModel.load(Path(a.model))
        except (OSError, EOFError, ValueError, ModelFormatError) as e:
            _usage_error("eval", f"--model {a.model}: cannot load it ({e})")
        if fixed.kernel != kernels[0]:
            _usage_error("eval", f"--model {a.model} is a {fixed.kernel} model, not {kernels[0]}")
    for k in kernels:
        by_device = defaultdict(list)
        for s in _samples(k, a.data, a.cmd):
            by_device[s.device].append(s)
        if not by_device:
            print(f"{k}: no samples (run `spio tune collect --kernel {k}` on a GPU first)")
        jobs = sorted(by_device.items())
        pool = None
        if by_device and a.pool_for is not None:
            pool, pooled = _pooled(k, by_device, a.pool_for, "eval")
            jobs = [(a.pool_for, pooled)]
        for device_name, samples in jobs:
            dev = _device_for(device_name, "eval")
            if fixed is not None and fixed.arch != dev.arch:
                _usage_error(
                    "eval",
                    f"--model {a.model} was trained on {fixed.arch}; the {device_name} "
                    f"samples are {dev.arch} (a model serves GPUs of its own arch only)",
                )
            try:
                if a.seeds > 1:
                    print(
                        evaluate_seeds(
                            KERNELS[k],
                            samples,
                            dev,
                            a.seeds,
                            a.folds,
                            as_selected=a.as_selected,
                            worst_shapes=a.worst,
                            pool=pool,
                        )
                    )
                else:
                    print(
                        evaluate(
                            KERNELS[k],
                            samples,
                            dev,
                            folds=a.folds,
                            model=fixed,
                            as_selected=a.as_selected,
                            worst_shapes=a.worst,
                            pool=pool,
                        )
                    )
            except ValueError as e:  # too few layers to hold one out
                raise SystemExit(f"spio tune eval: {str(e).removeprefix('evaluate: ')}") from None
    return 0


def cmd_select(a: argparse.Namespace) -> int:
    from spio.kernels import KERNELS
    from spio.select import Selector
    from spio.tune.features import from_dict

    if a.kernel == "all":
        _usage_error("select", "--kernel needs one kernel's name, not 'all'")
    kdef = KERNELS[_kernels(a.kernel, "select")[0]]
    try:
        params = from_dict(kdef.params_type, json.loads(a.params))
    except (TypeError, ValueError) as e:
        fields = [f.name for f in dataclasses.fields(kdef.params_type)]
        _usage_error("select", f"--params for {kdef.name} needs the fields {fields}: {e}")
    dev = _device_for(a.device, "select", option=True)
    start = time.perf_counter()
    ranked = Selector().ranked(kdef, params, dev)
    ms = (time.perf_counter() - start) * 1e3
    source = "model" if ranked[0][1] is not None else "heuristic (no model for this GPU)"
    print(
        f"{kdef.name} {params} on {dev.name} ({dev.arch}): {len(ranked)} configs, "
        f"ranked by {source} in {ms:.1f} ms"
    )
    for i, (cfg, us) in enumerate(ranked[: a.top]):
        pred = f"{us:9.1f} us" if us is not None else "        -"
        print(f"  {i + 1:3d}. {pred}  {cfg}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spio tune",
        description="performance models: measure samples on a GPU (collect), fit one XGBoost "
        "model per kernel and GPU (train), check it on held-out shapes (eval), rank a layer's "
        "configs (select). See docs/tuning.md.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="measure samples on a GPU")
    c.add_argument("--kernel", required=True, help="registry name, or 'all'")
    c.add_argument(
        "--minutes", type=_number(float, 0.01), default=10.0, help="time budget (default 10)"
    )
    c.add_argument("--device", default="0", help="GPU ordinal, or 'all' (one worker per GPU)")
    c.add_argument("--out", help="dataset file (default: <cache dir>/tune/<kernel>.jsonl)")
    c.add_argument("--seed", type=int, default=0, help="shape sampling seed (default 0)")
    c.add_argument(
        "--max-configs", type=_number(int, 1), default=None, help="configs sampled per shape"
    )
    c.add_argument(
        "--active",
        action="store_true",
        help="with --max-configs: half of each shape's configs from the model's top ranks, the "
        "rest sampled uniformly (uniform alone without a model for the GPU)",
    )
    c.add_argument(
        "--shapes",
        help="measure these layers (a JSON list of the family's params, as the datasets' "
        '"params"), in order, instead of sampled ones; an entry {"params": ..., "configs": '
        "[...]} measures only those configs of its layer (.gz: read gzipped)",
    )
    c.add_argument(
        "--compile-ahead",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compile the next shape's kernels while this one's are timed (niced processes, two "
        "cores left to the timing; the default) instead of before timing them with the GPU idle",
    )
    c.set_defaults(func=cmd_collect)
    t = sub.add_parser("train", help="fit one model per kernel and GPU")
    t.add_argument("--kernel", required=True, help="registry name, or 'all'")
    t.add_argument("--data", action="append", default=[], help="dataset file(s)")
    t.add_argument("--out", help="model directory (default: <cache dir>/models)")
    t.add_argument("--ship", action="store_true", help="write into the package (spio/tune/models)")
    t.add_argument(
        "--pool-for",
        metavar="GPU",
        help="train one model for this GPU (its name as the data has it) on the samples of every "
        "GPU in --data, with each GPU's memory bandwidth and L2 size as features",
    )
    t.set_defaults(func=cmd_train)
    e = sub.add_parser("eval", help="regret of the top-1 pick on held-out shapes")
    e.add_argument("--kernel", required=True, help="registry name, or 'all'")
    e.add_argument("--data", action="append", default=[], help="dataset file(s)")
    e.add_argument(
        "--folds", type=_number(int, 2), default=5, help="cross-validation folds (default 5)"
    )
    e.add_argument(
        "--model",
        help="a trained model file (e.g. another GPU's, spio/tune/models/*.json.gz) that ranks "
        "every shape instead of the folds' models (--folds is then unused): what that model "
        "would pick on this data's GPU",
    )
    e.add_argument(
        "--as-selected",
        action="store_true",
        help="rank each shape as the op selects its config (the family's select_key, e.g. "
        "conv2d_gw8's batch bucket, layernorm's row bucket), not at the shape itself",
    )
    e.add_argument(
        "--seeds",
        type=_number(int, 1),
        default=1,
        help="train the folds' models with seeds 0..N-1 and print each statistic's mean and "
        "range over them (default 1: seed 0, the shipped models' seed)",
    )
    e.add_argument(
        "--worst",
        type=_number(int, 0),
        default=0,
        help="also list the N held-out complete shapes of largest pick regret: their pick's and "
        "autotune's regret, where the model ranked the best config, the two configs (with "
        "--seeds: seed 0's)",
    )
    e.add_argument(
        "--pool-for",
        metavar="GPU",
        help="score this GPU's held-out shapes with folds' models trained as `train --pool-for` "
        "trains (every GPU's samples in --data, device features; a layer held out on all)",
    )
    e.set_defaults(func=cmd_eval)
    s = sub.add_parser("select", help="ranked configs for a layer (no GPU needed)")
    s.add_argument("--kernel", required=True, help="registry name, e.g. conv2d_gw8_fprop")
    s.add_argument("--params", required=True, help="params as JSON, e.g. '{\"n\": 8, ...}'")
    s.add_argument(
        "--device",
        default="NVIDIA H100 80GB HBM3",
        help="GPU name or model (H100, A100, ...) or arch (sm_90); default H100",
    )
    s.add_argument("--top", type=_number(int, 1), default=10, help="configs to list (default 10)")
    s.set_defaults(func=cmd_select)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
