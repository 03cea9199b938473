"""spio's loggers, with SPIO_LOG_LEVEL applied when spio logs (never at import).

Every module logs through `logger(name)`: it sets the level of the 'spio' logger from
SPIO_LOG_LEVEL at that moment and returns the named logger below it. Below WARNING, when the
application has configured no logging at all (no handler on the root logger), spio adds one stderr
handler of its own, so `SPIO_LOG_LEVEL=INFO` shows its INFO lines; an application that configures
logging gets spio's records through its own handlers instead (no duplicates).
"""

from __future__ import annotations

import logging
import sys

from spio.settings import settings

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_handler: logging.Handler | None = None


def logger(name: str = "spio") -> logging.Logger:
    """The logger `name` ('spio' or 'spio.<part>'), the 'spio' level set from SPIO_LOG_LEVEL."""
    global _handler
    level = settings().log_level.strip().upper()
    if level not in LEVELS:
        raise ValueError(f"SPIO_LOG_LEVEL={level!r}: expected one of {', '.join(LEVELS)}")
    base = logging.getLogger("spio")
    base.setLevel(level)
    if base.level < logging.WARNING and _handler is None and not logging.getLogger().handlers:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        base.addHandler(_handler)
    return logging.getLogger(name)
