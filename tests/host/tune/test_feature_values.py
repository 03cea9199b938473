"""Performance-model features keep their names and values, bit for bit.

The shipped models (spio/tune/models) were trained on these features: a family whose feature
code is restructured (for speed) must still produce the same names, in the same order, with the
same values. `data/feature_digests.json` holds, per family and device, a few layers (every
family's examples plus sampled shapes) with up to MAX_CONFIGS of the configs that were valid for
them when the file was written, and a SHA-256 of the feature rows of those configs. Params and
configs are stored rather than regenerated, so a change of a family's examples or config space
doesn't disturb this test; only a change of the features themselves does.

A deliberate feature change (which needs the models retrained) rewrites the digests of the
families named (all when none is):
    python tests/host/tune/test_feature_values.py --write [FAMILY ...]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.tune.features import feature_columns, features, from_dict, to_dict

GOLDEN = Path(__file__).resolve().parent / "data" / "feature_digests.json"
DEVICES = ("sm_90", "sm_80", "sm_89")
SAMPLED = 3  # sampled layers per family, on top of its examples
MAX_CONFIGS = 40  # configs kept per layer, spread evenly over the config space (first and last)


def _digest(names: list[str], rows: list[list[float]]) -> str:
    text = json.dumps([names, [[float(v).hex() for v in row] for row in rows]])
    return hashlib.sha256(text.encode()).hexdigest()


def _rows(kdef, params, configs, dev) -> tuple[list[str], list[list[float]]]:
    """Feature names and values the way the models were trained on them (one dict per config)."""
    dicts = [features(kdef, params, c, dev) for c in configs]
    names = list(dicts[0]) if dicts else []
    for d in dicts:
        assert list(d) == names, f"{kdef.name}: feature names differ between configs"
    return names, [list(d.values()) for d in dicts]


def _layers(kdef) -> list:
    layers = list(kdef.examples()) if kdef.examples is not None else []
    if kdef.sample_params is not None:
        layers += [kdef.sample_params(random.Random(i)) for i in range(SAMPLED)]
    return layers


def _write(families: list[str]) -> None:
    """Rewrites the digests of `families` (every family when empty), keeping the others."""
    table: dict = json.loads(GOLDEN.read_text()) if GOLDEN.exists() and families else {}
    for name, kdef in KERNELS.items():
        if families and name not in families:
            continue
        cfg_fields = None
        entries = []
        for arch in DEVICES:
            dev = known_device(arch)
            for params in _layers(kdef):
                configs = kdef.configs(params, dev)
                if not configs:
                    continue
                if len(configs) > MAX_CONFIGS:
                    step = (len(configs) - 1) / (MAX_CONFIGS - 1)
                    configs = [configs[round(i * step)] for i in range(MAX_CONFIGS)]
                # Every field, those `to_dict` leaves out at their default too.
                cfg_fields = [f.name for f in dataclasses.fields(configs[0])]
                names, rows = _rows(kdef, params, configs, dev)
                entries.append(
                    {
                        "device": arch,
                        "params": to_dict(params),
                        "configs": [[getattr(c, f) for f in cfg_fields] for c in configs],
                        "names": names,
                        "sha256": _digest(names, rows),
                    }
                )
        table[name] = {"config_fields": cfg_fields, "layers": entries}
    table = {name: table[name] for name in KERNELS if name in table}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(table, separators=(",", ":")) + "\n")


def _cases() -> list[tuple[str, int]]:
    if not GOLDEN.exists():
        return []  # test_golden_covers_every_family fails instead
    table = json.loads(GOLDEN.read_text())
    return [(name, i) for name, fam in table.items() for i in range(len(fam["layers"]))]


def _case(name: str, i: int):
    fam = json.loads(GOLDEN.read_text())[name]
    entry = fam["layers"][i]
    kdef = KERNELS[name]
    params = from_dict(kdef.params_type, entry["params"])
    configs = [
        from_dict(kdef.config_type, dict(zip(fam["config_fields"], v, strict=True)))
        for v in entry["configs"]
    ]
    return kdef, params, configs, known_device(entry["device"]), entry


def test_golden_covers_every_family():
    table = json.loads(GOLDEN.read_text())
    assert set(table) == set(KERNELS), (
        "feature digests and the kernel registry list different families; rewrite the file "
        "(see this module's docstring) when a family is added"
    )
    assert all(fam["layers"] for fam in table.values())


@pytest.mark.parametrize(("name", "i"), _cases())
def test_features_are_unchanged(name, i):
    kdef, params, configs, dev, entry = _case(name, i)
    names, rows = _rows(kdef, params, configs, dev)
    assert names == entry["names"], f"{name}: feature names or their order changed"
    assert _digest(names, rows) == entry["sha256"], (
        f"{name} on {entry['device']}: feature values of {params} changed; the shipped models "
        "were trained on the old ones (retrain and rewrite the digests if that is intended)"
    )


@pytest.mark.parametrize(("name", "i"), _cases())
def test_feature_columns_equal_the_row_by_row_values(name, i):
    # What the model sees: float32 of each value, one column per feature in the model's order.
    kdef, params, configs, dev, entry = _case(name, i)
    names, rows = _rows(kdef, params, configs, dev)
    expected = np.asarray(rows, dtype=np.float32)
    got = feature_columns(kdef, params, configs, dev, tuple(names))
    assert len(got) == len(names) and all(len(c) == len(configs) for c in got)
    assert np.asarray(got, dtype=np.float32).T.tobytes() == expected.tobytes()
    # Another order (a model trained on a permutation): columns follow the model's names.
    got = feature_columns(kdef, params, configs, dev, tuple(reversed(names)))
    assert np.asarray(got, dtype=np.float32).T.tobytes() == expected[:, ::-1].copy().tobytes()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        _write(sys.argv[2:])
        print(f"wrote {GOLDEN}")
    else:
        print(__doc__)
