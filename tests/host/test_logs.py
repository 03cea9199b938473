"""SPIO_LOG_LEVEL reaches spio's loggers when they log (not at import)."""

from __future__ import annotations

import logging

import pytest

from spio.logs import logger
from spio.settings import override


def test_level_comes_from_the_knob(caplog):
    caplog.set_level(logging.NOTSET)
    with override(log_level="INFO"):
        logger("spio.compiler").info("shown at INFO")
        assert logging.getLogger("spio").level == logging.INFO
    with override(log_level="error"):  # case-insensitive
        logger().warning("hidden at ERROR")
        assert logging.getLogger("spio").level == logging.ERROR
    messages = [r.getMessage() for r in caplog.records]
    assert "shown at INFO" in messages
    assert "hidden at ERROR" not in messages


def test_default_is_warning():
    with override(log_level=None):
        logger()
        assert logging.getLogger("spio").level == logging.WARNING


def test_bad_level_names_the_knob():
    with override(log_level="LOUD"), pytest.raises(ValueError, match="SPIO_LOG_LEVEL"):
        logger()
