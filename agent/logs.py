"""structlog set-up: readable lines on a terminal, or JSON lines with --log-format json."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from agent.escape import plain
from agent.hostside import redact


def redact_event(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    """The last processor before rendering: no log line carries a secret, whatever a caller passed in."""
    return redact.redact(event)


def _plain_strings(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """A host's text (error messages, holder records) can carry terminal escape sequences: not on our console."""
    return {k: _plain(v) for k, v in event.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _keep(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return event


# Said once per run on the console: a command that sweeps in steps (tune) plans again at every step
ONCE = frozenset({"spec_warning", "plan_note", "fleet_plan", "fingerprint_differs", "fingerprint_group"})
_said: set[str] = set()


def _once(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if event.get("event") in ONCE:
        key = repr(sorted((k, repr(v)) for k, v in event.items()))
        if key in _said:
            raise structlog.DropEvent
        _said.add(key)
    return event


def _console_line(_logger: Any, name: str, event: MutableMapping[str, Any]) -> str:
    """A console line a person reads: "warning: budget_exhausted (budget_s=300.0 next_step_s=51)", no timestamp
    (the terminal has one) and no padding; JSON lines (--log-format json) keep every field."""
    level = str(event.pop("level", name))
    event.pop("timestamp", None)
    what = str(event.pop("event", ""))
    rest = " ".join(f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in event.items() if v is not None)
    return f"{level}: {what}" + (f" ({rest})" if rest else "")


FORMAT = {"fmt": "console"}  # what configure() was last given
VERBOSE = {"on": False}  # -v on the command line (cli.main sets it before the command configures its logging)


def say(event: str, line: str) -> None:
    """A line a person must read whatever the log level (a plan, a choice made for them): plain on the console,
    an info event (`event`, line=...) in JSON lines."""
    if FORMAT["fmt"] == "json":
        structlog.get_logger("spark_agent").info(event, line=line)
    else:
        print(plain(redact.redact_text(line)), file=sys.stderr)


def configure(fmt: str = "console", verbose: bool = False) -> None:
    """A person reads the console: there only warnings and errors, unless -v. JSON lines (a machine reads them)
    keep the info events (cell_done, playbook_done...)."""
    FORMAT["fmt"] = fmt
    level = logging.DEBUG if verbose else logging.INFO if fmt == "json" or VERBOSE["on"] else logging.WARNING
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else _console_line
    structlog.configure(
        processors=[
            _once if fmt != "json" else _keep,
            _plain_strings if fmt != "json" else _keep,  # JSON escapes control characters itself
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),  # the stream at call time (pytest swaps it)
        cache_logger_on_first_use=False,
    )
