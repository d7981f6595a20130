"""The eager starts that only ran the correctness checks ([correctness] eager_start): never ranked, so they are
listed here with what their outputs said; a cell with CUDA graphs is blamed on the graphs path against them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.escape import md
from agent.judging import correctness, summary
from agent.planning.matrix import backend_label

CHECKS_LABEL = "eager, checks only"


def checks_name(cell: dict[str, Any]) -> str:
    """host/checkpoint/backend (eager, checks only), as plain text (escape it where it is shown)."""
    config = cell.get("config", {})
    return f"{cell.get('host', '?')}/{config.get('checkpoint', '?')}/{backend_label(config)} ({CHECKS_LABEL})"


def checks_lines(cells: Sequence[dict[str, Any]]) -> list[str]:
    """One line per checks-only start: its outputs clean, WRONG OUTPUT with the reason, or why it never answered."""
    lines = []
    for cell in cells:
        verdict = summary.cell_verdict(cell)
        found = cell.get("correctness")
        c: dict[str, Any] = found if isinstance(found, dict) else {}
        if verdict == summary.WRONG_OUTPUT:
            said = "WRONG OUTPUT: " + "; ".join(correctness.wrong_reasons(cell))
        elif verdict != "valid":
            said = f"{verdict}: {cell.get('failure_class') or 'never became ready'}"
        elif c.get("probed"):
            long_rows = [r for r in c.get("long", []) if not r.get("error")]
            said = "outputs sane" + (f", {len(long_rows)} long decode(s) clean" if long_rows else "")
        else:
            said = "not probed"
        lines.append(f"- **{md(checks_name(cell))}** ({md(cell.get('cell_id', ''))}): {md(said)}.")
    return lines
