"""The report's "Medians" table: a row per point, a column per load dimension that varies, goodput where SLOs were
set, and each point's flags (unstable, throttled, JIT-dropped windows, not GPU-bound)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md
from agent.judging import summary
from agent.judging.summary import CellSummary, Point
from agent.reporting import loadreport
from agent.reporting import telemetry as telemetry_report
from agent.reporting.words import num, spread_text

MEDIAN_COLUMNS = [
    "host",
    "checkpoint",
    "backend",
    "verdict",
    "c",
    "tok/s (median)",
    "spread",
    "min–max",
    "TTFT ms",
    "TPOT ms",
    "n",
    "flags",
]


def median_columns(summaries: Sequence[CellSummary]) -> list[str]:
    """MEDIAN_COLUMNS, with a column per load dimension that varies (rate, depth) before `c`, and goodput after
    the throughput where a cell set SLOs: a sweep without them reads as before."""
    cols = list(MEDIAN_COLUMNS)
    at = cols.index("c")
    cols[at:at] = [name for name, _ in loadreport.varying_load(summaries)]
    if loadreport.any_slo(summaries):
        cols.insert(cols.index("min–max") + 1, "goodput req/s")
    return cols


def median_rows(summaries: Sequence[CellSummary]) -> list[list[str]]:
    """The rows of the medians table, columns as median_columns(summaries)."""
    varying = loadreport.varying_load(summaries)
    slo = loadreport.any_slo(summaries)
    rows = []
    for s in summaries:
        for p, cells in _base_rows(s):
            at = MEDIAN_COLUMNS.index("c")
            cells[at:at] = [value(s.load) for _, value in varying]
            if slo:
                goodput = p.tails.get(summary.GOODPUT) if p else None
                shown = num(goodput.median, 2) if goodput and summary.slos(s) else "–"
                cells.insert(MEDIAN_COLUMNS.index("min–max") + len(varying) + 1, shown)
            rows.append(cells)
    return rows


def _base_rows(s: CellSummary) -> list[tuple[Point | None, list[str]]]:
    """(point, its MEDIAN_COLUMNS row) per point; a cell without points gets one row of dashes."""
    if not s.points:
        host, reason = s.cell.get("host", ""), s.cell.get("failure_class", "") or "no measurements"
        return [(None, [host, s.checkpoint, s.backend_text, s.verdict.upper(), *["–"] * 6, "0", reason])]
    return [(p, _point_row(s, p)) for p in s.points.values()]


def _point_row(s: CellSummary, p: Point) -> list[str]:
    t = p.throughput
    flags = (["UNSTABLE"] if p.unstable else []) + ([f"{len(p.failed)} failed run(s)"] if p.failed else [])
    if s.cell.get("failure_class") == "engine_died":
        flags.append("before the crash")
    if telemetry_report.point_throttled(s.cell, p.concurrency):
        flags.append("THROTTLED")
    if p.jit_dropped:
        flags.append(f"{len(p.jit_dropped)} dropped (JIT)")
    if any(t.concurrency == p.concurrency for t in telemetry_report.not_gpu_bound(s)):
        flags.append("not GPU-bound")
    return [
        s.cell.get("host", ""),
        s.checkpoint,
        s.backend_text,
        s.verdict.upper() if s.verdict != "valid" else "valid",
        str(p.concurrency),
        num(t.median if t else None),
        spread_text(t),
        f"{num(t.lo)}–{num(t.hi)}" if t and len(t.values) > 1 else "–",
        num(p.ttft.median if p.ttft else None),
        num(p.tpot.median if p.tpot else None, 2),
        str(len(p.values)),
        ", ".join(flags),
    ]


def medians_table_md(summaries: Sequence[CellSummary]) -> list[str]:
    columns = median_columns(summaries)
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return [head, rule] + ["| " + " | ".join(md(c) for c in r) + " |" for r in median_rows(summaries)]
