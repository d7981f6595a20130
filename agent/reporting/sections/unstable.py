"""The report's "Unstable points": each point whose repeats spread beyond the threshold, with the repeats."""

from __future__ import annotations

from collections.abc import Sequence

from agent.judging.summary import CellSummary
from agent.reporting.words import cell_name, pct, values_text


def unstable_lines(summaries: Sequence[CellSummary], threshold: float) -> list[str]:
    return [
        f"- {cell_name(s)} c={p.concurrency}: spread {pct(p.throughput.spread)} > {threshold:.0%}; "
        f"repeats {values_text(p.throughput)} tok/s"
        for s in summaries
        for p in s.unstable_points
        if p.throughput is not None  # always: a point is unstable by its throughput's spread
    ]
