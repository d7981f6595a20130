"""The report's "Replicas across hosts": spread across hosts next to spread across repeats (judging/replicas.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md
from agent.judging import replicas
from agent.judging.summary import CellSummary
from agent.reporting.words import num, pct


def replica_section(summaries: Sequence[CellSummary], threshold: float) -> list[str]:
    """Cells measured on several hosts (--replicas): spread across hosts next to spread across repeats; a cell
    whose hosts disagree beyond the noise is flagged. Absent when no cell has replicas."""
    return replica_lines(replicas.replica_points(summaries, threshold))


def replica_lines(points: Sequence[replicas.ReplicaPoint]) -> list[str]:
    """The section for the judgement's replica points; nothing when there are none."""
    if not points:
        return []
    out = ["## Replicas across hosts", "", "| cell | c | hosts | medians tok/s | across hosts | across repeats | |"]
    out.append("|---|---|---|---|---|---|---|")
    for p in points:
        flag = "**hosts disagree**" if p.disagree else ""
        medians = ", ".join(num(m) for m in p.medians)
        out.append(
            f"| {md(p.cell_id + (' @ ' + p.load if p.load else ''))} | {p.concurrency} | {md(', '.join(p.hosts))} | {medians} | {pct(p.across_hosts)} | "
            f"{pct(p.across_repeats)} | {flag} |"
        )
    return [*out, ""]
