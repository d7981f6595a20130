"""The terminal: the end-of-sweep table (the judgement's points and answers as rich markup), and the console tables
are printed on: a terminal's own width, and when piped (a file, CI, `| less`) wide enough that no name is ever cut
to "flashinfer_…" (a reader or a grep needs the whole name)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from agent.escape import rich
from agent.judging import correctness, judgement, stats, summary
from agent.judging.stats import Recommendation
from agent.judging.summary import CellSummary, Point
from agent.planning.matrix import backend_label
from agent.reporting.sections.checks import CHECKS_LABEL
from agent.reporting.words import death_text, num, spread_text

PIPED_WIDTH = 400  # rich sizes a table to its content: this is only the most a piped row may take


def console(stderr: bool = False, least: int = 0) -> Console:
    """A Console for tables: the terminal's width (at least `least`), or PIPED_WIDTH when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    if not stream.isatty():
        return Console(stderr=stderr, width=max(PIPED_WIDTH, least))
    c = Console(stderr=stderr)
    return Console(stderr=stderr, width=max(c.width, least)) if least > c.width else c


def terminal_table(
    cells: Sequence[dict[str, Any]], *, threshold: float = summary.DEFAULT_THRESHOLD, seed: int = stats.DEFAULT_SEED
) -> Any:
    """A rich Table for the end of a sweep: one row per cell, median ± spread per concurrency, the verdict."""
    from rich.table import Table

    data = judgement.judge(cells, threshold=threshold, seed=seed)
    conc = sorted({c for s in data.summaries for c in s.points})
    table = Table(title="Median output tok/s (spread); ! = unstable", caption=_caption(data.recommendations))
    for col in ["host", "checkpoint", "backend", "verdict"]:
        table.add_column(col, overflow="fold")  # a narrow terminal wraps a name, never cuts it to "flashinfer_…"
    for c in conc:
        table.add_column(f"c={c}", justify="right")
    for s in data.summaries:
        table.add_row(  # cells are rich markup: host-derived text is escaped
            rich(s.cell.get("host", "")),
            rich(s.checkpoint),
            rich(s.backend_text + (f" @ {summary.load_text(s.load)}" if s.cell.get("load_slice") else "")),
            _verdict_markup(s),
            *[_cell_markup(s.points.get(c)) for c in conc],
        )
    for cell in data.checks_only:  # no windows: the verdict of its checks only
        config = cell.get("config", {})
        backend = f"{backend_label(config)} ({CHECKS_LABEL})"
        verdict = summary.cell_verdict(cell)
        shown = "[green]valid[/]" if verdict == "valid" else f"[red]{rich(verdict)}[/]"
        table.add_row(rich(cell.get("host", "")), rich(config.get("checkpoint", "")), rich(backend), shown)
    return table


def _verdict_markup(s: CellSummary) -> str:
    if s.verdict == "valid" and correctness.not_judged(s.cell):
        return f"[green]valid[/] (speed only: {rich(correctness.not_judged(s.cell))})"
    if s.verdict == "valid":
        return "[green]valid[/]"
    if s.verdict == "invalid":
        return "[yellow]INVALID[/]"
    if s.verdict == summary.WRONG_OUTPUT:
        return "[red]WRONG OUTPUT[/]"
    death = death_text(s.cell)
    if death:
        return f"[red]{rich(death[0] + ': ' + death[1])}[/]"
    return f"[red]failed: {rich(s.cell.get('failure_class') or 'other')}[/]"


def _cell_markup(p: Point | None) -> str:
    if p is None:
        return ""
    if p.throughput is None:
        return "[red]all failed[/]"
    text = f"{num(p.throughput.median)} ({spread_text(p.throughput)})"
    return f"[bold red]{text} ![/]" if p.unstable else text


def _caption(recs: Sequence[Recommendation]) -> str:
    return "  ".join(rich(f"{r.hardware}·{r.quant}: {r.winner or judgement.undecided_word(r)}") for r in recs)
