"""The report's failures: failed runs (left out of the medians), INVALID cells and failed cells (never ranked),
each with its evidence from the log."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md, md_code
from agent.judging.summary import CellSummary
from agent.reporting.words import cell_name, death_text


def failed_run_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """One line per failed run; for a cell whose server died, one line with the cause instead of the runs' errors
    (every run after the death fails the same way: "connection refused" says nothing)."""
    lines = []
    for s in summaries:
        death = death_text(s.cell)
        if death and s.failed_runs:
            runs = ", ".join(f"c={f.concurrency} r{f.repeat}" for f in s.failed_runs)
            lines.append(
                f"- {cell_name(s)}: {len(s.failed_runs)} run(s) failed ({md(runs)}) because the {md(death[0].removeprefix('engine '))}: {md_code(death[1])}"
            )
            continue
        lines += [f"- {cell_name(s)} c={f.concurrency} repeat {f.repeat}: {md(f.error)}" for f in s.failed_runs]
    return lines


def invalid_lines(summaries: Sequence[CellSummary]) -> list[str]:
    lines = []
    for s in summaries:
        if s.verdict != "invalid":
            continue
        att = s.cell.get("attestation", {})
        loaded = att.get("moe_backend_raw") or att.get("moe_backend") or "unknown"
        reasons = "; ".join(s.cell.get("verdict_reasons", [])) or "no reason recorded"
        lines.append(
            f"- **{cell_name(s)}** ({md(s.cell.get('cell_id', ''))}): {md(reasons)}. Loaded MoE backend: {md(loaded)}."
        )
        lines += [f"    - evidence: {md_code(e)}" for e in s.cell.get("failure_evidence", [])[:3]]
    return lines


def failed_cell_lines(summaries: Sequence[CellSummary]) -> list[str]:
    lines = []
    for s in summaries:
        if s.verdict != "failed":
            continue
        death = death_text(s.cell)
        if death:
            died = s.cell["died"]
            lines.append(f"- **{cell_name(s)}**: {md(death[0])}: {md_code(death[1])}")
            lines.append(
                f"    - noticed {md(str(died.get('detection_s', '?')))} s later ({md(str(died.get('how', '?')))}); "
                f"{len(died.get('windows_kept', []))} window(s) measured before the crash kept, "
                f"{len(died.get('windows_skipped', []))} skipped"
            )
        else:
            reasons = "; ".join(s.cell.get("verdict_reasons", []))
            lines.append(
                f"- **{cell_name(s)}**: class {md_code(s.cell.get('failure_class') or 'other')}"
                + (f" — {md(reasons)}" if reasons else "")
            )
        lines += [f"    - evidence: {md_code(e)}" for e in s.cell.get("failure_evidence", [])[:3]]
    return lines
