"""The performance models shipped in the package load and rank every family's configs."""

from __future__ import annotations

import pytest

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.tune.rank import rank
from spio.tune.store import PACKAGE_MODELS, SUFFIX, find_model

SHIPPED = sorted(p.name.split("__")[0] for p in PACKAGE_MODELS.glob(f"*{SUFFIX}"))


def test_models_ship_for_the_h100():
    assert SHIPPED, "no performance model in spio/tune/models"


@pytest.mark.parametrize("kernel", SHIPPED)
def test_shipped_model_ranks_every_config_of_its_examples(kernel):
    dev = known_device("H100")
    kdef = KERNELS[kernel]
    model = find_model(kernel, dev.name, dev.arch)
    assert model is not None and model.device == dev.name
    for params in kdef.examples():
        configs = kdef.configs(params, dev)
        if not configs:
            continue
        ranked = rank(kdef, params, dev, model)  # raises if the family's features changed
        assert sorted(map(repr, (c for c, _ in ranked))) == sorted(map(repr, configs))
        times = [us for _, us in ranked]
        assert times == sorted(times) and all(t > 0 for t in times)
