"""Shared fixtures: GPU gating for `@pytest.mark.gpu`, and the per-run random seed."""

from __future__ import annotations

import functools
import random

import pytest

from spio.settings import settings


@functools.cache
def _gpu_skip_reason() -> str | None:
    """Why GPU tests can't run here, or None when a CUDA GPU of sm_80+ is present."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability(0)
    if (major, minor) < (8, 0):
        return f"needs compute capability 8.0+, this GPU is {major}.{minor}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@functools.cache
def _run_seed() -> int:
    fixed = settings().test_seed
    return fixed if fixed is not None else random.SystemRandom().randrange(2**31)


def pytest_report_header(config):
    return f"spio test seed: {_run_seed()} (set SPIO_TEST_SEED={_run_seed()} to reproduce)"


@pytest.fixture
def seed(request) -> int:
    """A seed that changes every run (SPIO_TEST_SEED pins it); shown in failing test reports."""
    value = _run_seed()
    request.node.user_properties.append(("seed", value))
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, value in item.user_properties:
            if name == "seed":
                report.sections.append(("spio", f"SPIO_TEST_SEED={value} reproduces this run"))
