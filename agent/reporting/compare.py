"""`spark-agent compare A B`, rendered: agent.judging.comparison decides (every point B against A, each configuration
regressed or not, what could not be compared and why); this module writes it as Markdown, one summary line and a
rich table. Every value from a host or a spec is escaped.
"""

from __future__ import annotations

import math
from typing import Any

from agent.escape import md, rich
from agent.judging import regression, stats
from agent.judging.comparison import IMPROVEMENT, REGRESSION, WITHIN_NOISE, Comparison, PointDiff, compare, match_key
from agent.judging.stats import CANNOT_RANK
from agent.judging.summary import Point
from agent.reporting.words import num, spread_text

__all__ = ["IMPROVEMENT", "REGRESSION", "WITHIN_NOISE", "Comparison", "compare", "match_key"]  # decided in judging

# One point alone is slower or faster beyond its own noise; whether a configuration regressed is its ConfigDiff's.
POINT_WORDS = {REGRESSION: "slower", IMPROVEMENT: "faster", WITHIN_NOISE: WITHIN_NOISE}


# ---------------------------------------------------------------- rendering


def render_markdown(cmp: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    lines = [f"# spark-agent compare: A = {md(name_a)}, B = {md(name_b)}", ""]
    lines += [f"**Warning:** {md(w)}." for w in cmp.warnings] + ([""] if cmp.warnings else [])
    lines += [summary_line(cmp), ""]
    n_reg, n_imp = len(cmp.slower_points), sum(d.status == IMPROVEMENT for d in cmp.diffs)
    lines += [
        f"Per point: {len(cmp.diffs)} points compared, {n_reg} slower and {n_imp} faster beyond their own noise, "
        f"{len(cmp.diffs) - n_reg - n_imp} within the noise ({CANNOT_RANK}).",
        "",
        "| configuration | B/A over its points [interval] | verdict |",
        "|---|---|---|",
        *[
            f"| {md(c.label)} | {md(regression.describe(c.change)) if c.change else md(c.why)} | "
            f"{c.status.upper() if c.status == REGRESSION else c.status} |"
            for c in cmp.configs
        ],
        "",
        f"Ranked by: {md(stats.rank_words(cmp.rank_by, cmp.slos))} (`--rank-by {md(cmp.rank_by)}`).",
        "",
    ]
    unit = _unit(cmp.rank_by)
    lines += [
        f"| cell | c | A {unit} | A spread | B {unit} | B spread | B/A | verdict | rule |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in cmp.diffs:
        lines.append(
            f"| {md(d.label)} | {d.concurrency} | {_med(d.a)} | {_spr(d.a)} | {_med(d.b)} | {_spr(d.b)} "
            f"| {_ratio(d)} | {POINT_WORDS[d.status]} "
            f"| {d.ranking.rule} |"
        )
    if cmp.uncompared:
        lines += ["", "## Could not be compared", ""] + [f"- {md(x)}" for x in cmp.uncompared]
    if cmp.same_failure:
        lines += ["", "## Not compared: alike on both sides", ""] + [f"- {md(x)}" for x in cmp.same_failure]
    return "\n".join(lines) + "\n"


def summary_line(cmp: Comparison) -> str:
    """ "1 of 6 configuration(s) regressed beyond the noise (...); 2 could not be compared"."""
    decided = sum(c.change is not None for c in cmp.configs)
    line = (
        f"{len(cmp.regressions)} of {decided} configuration(s) regressed beyond the noise "
        f"(each configuration over all its points; at most {regression.ALPHA:.0%} false alarms per compare)"
    )
    if cmp.uncompared:
        line += f"; {len(cmp.uncompared)} configuration(s) could not be compared"
    return line


def _unit(rank_by: str) -> str:
    return "tok/s" if rank_by == "throughput" else f"{rank_by} req/s"


def _ratio(d: PointDiff) -> str:
    """B/A of the medians shown; across hosts, also the judged ratio with the host effect divided out."""
    shown = f"{d.medians_ratio:.3f}" if math.isfinite(d.medians_ratio) else "–"
    if d.ranking.across and math.isfinite(d.ratio):
        return f"{shown} ({d.ratio:.3f} with the host effect divided out)"
    return shown


def _med(p: Point) -> str:
    """The median of the ranked metric (throughput, or goodput with --rank-by goodput)."""
    return num(p.ranked.median, 1 if p.ranked is p.throughput else 2) if p.ranked else "–"


def _spr(p: Point) -> str:
    return (spread_text(p.ranked) + (" !" if p.unstable else "")) if p.ranked else "–"


def comparison_table(cmp: Comparison) -> Any:
    from rich.table import Table

    title = f"B / A, median {stats.rank_words(cmp.rank_by, cmp.slos)}"
    table = Table(title=rich(title), caption=rich("; ".join(cmp.warnings)) or None)
    for col in ("cell", "c", "A", "B", "B/A", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "verdict") else "right")
    colour = {REGRESSION: "bold red", IMPROVEMENT: "green", WITHIN_NOISE: "dim"}
    for d in cmp.diffs:
        table.add_row(  # rich markup: labels carry spec and host text
            rich(d.label),
            str(d.concurrency),
            f"{_med(d.a)} ({_spr(d.a)})",
            f"{_med(d.b)} ({_spr(d.b)})",
            _ratio(d),
            f"[{colour[d.status]}]{d.status}[/]",
        )
    return table
