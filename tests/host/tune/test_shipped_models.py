"""The performance models shipped in the package load and rank every family's configs."""

from __future__ import annotations

import pytest

from spio.cuda import known_device
from spio.kernels import KERNELS
from spio.tune.model import PerfModel
from spio.tune.rank import rank
from spio.tune.store import PACKAGE_MODELS, SUFFIX, find_model

SHIPPED = sorted(p.name.removesuffix(SUFFIX) for p in PACKAGE_MODELS.glob(f"*{SUFFIX}"))


def test_models_ship_for_the_h100():
    assert any(name.endswith("__nvidia-h100-80gb-hbm3") for name in SHIPPED), SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_ranks_every_config_of_its_examples(name):
    """Each shipped model, found for the GPU it was trained on (and for the H100: its own or,
    for a family trained on another sm_90 GPU only, that one's), ranks every config."""
    kernel = name.split("__")[0]
    kdef = KERNELS[kernel]
    own = PerfModel.load(PACKAGE_MODELS / f"{name}{SUFFIX}")
    dev = known_device(own.device)
    model = find_model(kernel, dev.name, dev.arch)
    assert model is not None and model.device == dev.name
    h100 = known_device("H100")
    fallback = find_model(kernel, h100.name, h100.arch)
    assert fallback is not None and fallback.arch == h100.arch
    for params in kdef.examples():
        configs = kdef.configs(params, dev)
        if not configs:
            continue
        ranked = rank(kdef, params, dev, model)  # raises if the family's features changed
        assert sorted(map(repr, (c for c, _ in ranked))) == sorted(map(repr, configs))
        times = [us for _, us in ranked]
        assert times == sorted(times) and all(t > 0 for t in times)
