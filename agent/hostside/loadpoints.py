"""The load points of a cell, and the names of their windows. Standard library only: the host and the controller
import this one module.

A cell is one server configuration. Its load-side axes (request rate, context depth, concurrency) vary inside it,
against that one running server: every (rate, depth, concurrency) is a point, measured as its own warmup and
windows. A window file is named by its point and repeat:

    c008-r1            closed loop at concurrency 8, repeat 1 (the only form before the load axes)
    q2.5-c008-r1       open loop at 2.5 requests/s, at most 8 in flight
    q2.5-c008-d8192-r1 ... with every prompt 8192 tokens (the context-depth axis)

WINDOW is that grammar exactly: the archive allow-list, the results tree and the store read names with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# rate as f"{rate:g}" writes it: at most 6 significant digits, an exponent only below 1e-4 (spec rates are >= 0.001)
_RATE = r"(?:0|[1-9][0-9]{0,5})(?:\.[0-9]{1,6})?(?:e-[0-9]{2})?"
WINDOW = re.compile(
    rf"(?:q(?P<rate>{_RATE})-)?c(?P<concurrency>[0-9]{{3,7}})(?:-d(?P<depth>[1-9][0-9]{{0,6}}))?-r(?P<repeat>[0-9]{{1,6}})"
)


@dataclass(frozen=True, order=True)
class Point:
    """One load point of a cell. Ordered as a cell runs them: rates outermost, then depths, then concurrency."""

    rate: float = 0.0  # offered requests/s; 0 = closed loop
    depth: int = 0  # every prompt this many tokens; 0 = the [load] lengths
    concurrency: int = 0  # closed loop: in flight; open loop: the cap (0 = none)

    @property
    def name(self) -> str:
        return level_name(self.concurrency, self.rate, self.depth)

    def window(self, repeat: int) -> str:
        """The window's name without an extension: q2-c008-d1024-r1."""
        return f"{self.name}-r{repeat}"


def level_name(concurrency: int, rate: float = 0.0, depth: int = 0) -> str:
    """c008 for a closed loop at 8; q2.5-c008 at 2.5 req/s capped at 8 (c000: no cap); -d8192 at a context depth."""
    name = f"c{concurrency:03d}"
    if rate:
        name = f"q{rate:g}-{name}"
    return f"{name}-d{depth}" if depth else name


def names_exactly(rate: float) -> bool:
    """Does the window name keep this rate exactly? (Two rates must never share a name.)"""
    return float(f"{rate:g}") == rate


def parse_window(stem: str) -> tuple[Point, int] | None:
    """(point, repeat) of a window name without its extension; None when it is not one."""
    m = WINDOW.fullmatch(stem)
    if not m:
        return None
    point = Point(float(m["rate"] or 0.0), int(m["depth"] or 0), int(m["concurrency"]))
    return point, int(m["repeat"])


def of_window(window: Mapping[str, Any]) -> Point:
    """The point a window measured, from its own keys (windows from before the load axes read as closed loop)."""
    return Point(
        float(window.get("request_rate", 0.0) or 0.0),
        int(window.get("context_depth", 0) or 0),
        int(window.get("concurrency", 0)),
    )


def rates(shape: Mapping[str, Any]) -> list[float]:
    """The cell's request rates: the [load] list when it gave one, else its one rate (0 = closed loop)."""
    return [float(r) for r in shape.get("request_rates") or [shape.get("request_rate", 0.0)]]


def depths(shape: Mapping[str, Any]) -> list[int]:
    return [int(d) for d in shape.get("context_depths") or [shape.get("context_depth", 0)]]


def cell_points(concurrency: Sequence[int], shape: Mapping[str, Any] | None) -> list[Point]:
    """Every point of a cell, in the order it runs: the one list both cell.yml's bench loop (through the plan's
    cell.points) and the detached runner walk. `shape` is the plan's cell.shape (planning/matrix.shape_vars)."""
    shape = shape or {}
    return [Point(r, d, int(c)) for r in rates(shape) for d in depths(shape) for c in concurrency]
