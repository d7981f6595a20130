"""structlog set-up: readable lines on a terminal, or JSON lines with --log-format json."""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.typing import EventDict, WrappedLogger

from agent.hostside import redact


def redact_event(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    """The last processor before rendering: no log line carries a secret, whatever a caller passed in."""
    return redact.redact(event)


def configure(fmt: str = "console", verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),  # the stream at call time (pytest swaps it)
        cache_logger_on_first_use=False,
    )
