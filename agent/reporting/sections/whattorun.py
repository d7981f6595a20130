"""The report's "What to run": per (hardware, quant), the answer the judgement gave, each axis's winner and margin
or why none, the noise floor, the host effects, the command to copy, and what was never ranked. Every value is
escaped (escape.md): GPU names and log-derived text come from hosts."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from agent.escape import md, md_code, md_fence
from agent.judging import stats, verdicts
from agent.judging.judgement import headline
from agent.judging.stats import Recommendation
from agent.judging.summary import CellSummary
from agent.reporting.words import death_text, dropped_env, gap_range_text, ratio_text, serve_command


def verdict_lines(rec: Recommendation, slos: Sequence[str] = ()) -> list[str]:
    """Markdown lines for one (hardware, quant): what to run (each axis decided) or what deciding would cost; then,
    per question, who is slower and by how much, and which axes it held equal. Every value is escaped
    (escape.md): GPU names and log-derived text come from hosts."""
    lines = [f"### {md(rec.hardware)} · {md(rec.quant)}", ""]
    verdict, reason = headline(rec)
    lines.append(f"**{md(verdict[:1].upper() + verdict[1:])}.** {md(reason)}.")
    words, key = stats.rank_words(rec.metric, slos), rec.metric
    lines += ["", f"Ranked by {md(words)} ({md_code(key)}), each axis within the others held equal."]
    lines += ["", noise_floor_line(rec)]
    if len(rec.questions) == 1:
        lines += _question_lines(rec.questions[0], heading=False)
    else:
        for q in rec.questions:
            lines += _question_lines(q, heading=True)
    lines += host_lines(rec)
    if rec.effects:
        lines += ["", "Effect on startup (all else held equal):", ""] + [f"- {md(e)}" for e in rec.effects]
    for s in rec.winner_cells:
        what = md(s.checkpoint) + (f", {md(s.variant)}" if s.variant else "")
        lines += [
            "",
            f"Command ({what}, as measured on {md(s.cell.get('host', '?'))}{_excluded(rec, s)}):",
            "",
            *md_fence(serve_command(s.cell), "sh"),
        ]
        lines += [f"- dropped by the env rules: {md(d)}" for d in dropped_env(s.cell)]
    if rec.invalid or rec.failed:
        lines += [
            "",
            f"Not ranked: {len(rec.invalid)} INVALID cell(s), {len(rec.failed)} failed cell(s) (details below).",
        ]
        lines += [
            f"- INVALID: {md(s.backend_text)} on {md(s.checkpoint)} "
            f"({md('; '.join(s.cell.get('verdict_reasons', [])) or 'no reason')})"
            for s in rec.invalid
        ]
        lines += [_not_ranked_failed(s) for s in rec.failed]
    return lines + [""]


def noise_floor_line(rec: Recommendation) -> str:
    """The machine's noise floor, from its A/A pairs (every config started twice or more is one)."""
    if rec.noise is None:
        return (
            "Noise floor: between server starts unknown (every cell was started once; `server_starts = 2` in "
            "[matrix] measures it), so a margin under "
            f"{stats.RESOLVE_MARGIN:.0%} is not named a winner."
        )
    return f"Noise floor (A/A: the same cell started again, standard deviations): {md(rec.noise.words())}."


def host_lines(rec: Recommendation) -> list[str]:
    """Which comparisons crossed hosts, the host effects divided out of them and what they cost in noise; the
    hosts whose comparisons were refused. Nothing when every comparison stayed on one host."""
    crossed = [(q.axis, m) for q in rec.questions for m in q.matchups if m.ranking.across]
    shown = rec.hosts.shown()
    if not crossed and not shown:
        return []
    total = sum(len(q.matchups) for q in rec.questions)
    per_axis: dict[str, int] = {}
    for axis, _ in crossed:
        per_axis[axis] = per_axis.get(axis, 0) + 1
    used = [m.ranking.widened for _, m in crossed if m.ranking.ci is not None]
    lines = ["", f"Across hosts: {len(crossed)} of {total} comparisons crossed hosts of this kind"]
    if per_axis:
        lines[-1] += " (" + ", ".join(f"{md(a)}: {n}" for a, n in per_axis.items()) + ")"
    if used:
        lines[-1] += (
            f"; each host's measured effect was divided out, and its uncertainty added "
            f"{statistics.median(used):.0%} to their standard errors (median)"
        )
    lines[-1] += "."
    lines.append("")
    lines += [f"- host effect: {md(e.words())}" + (f"; **{md(e.outlier)}**" if e.outlier else "") for e in shown]
    refused = sorted({m.ranking.rule.split("refused: ", 1)[1] for _, m in crossed if "refused: " in m.ranking.rule})
    lines += [f"- not compared: {md(why)}" for why in refused]
    return lines


def _question_lines(q: stats.Question, *, heading: bool) -> list[str]:
    """One axis: its winner and margin (or why none), the values measured slower, per concurrency, what was held."""
    held = ", ".join(q.held) if q.held else "every other setting"
    lines = [""]
    if heading:
        lines += [f"#### {md(q.axis)}: **{md(q.verdict.headline())}**", "", f"{md(q.reason)}.", ""]
    lines.append(f"Held equal: {md(held)} (and always the kind of machine, the load and the schedule).")
    if q.verdict.kind == verdicts.EQUIVALENT:
        lines += ["", f"Verdict: {md(q.verdict.words())}."]
    if q.quality:
        lines += ["", "Quality beside the speed: " + "; ".join(f"{md(v)}: {md(w)}" for v, w in q.quality.items()) + "."]
    if q.verdict.kind == verdicts.FASTER and q.versus:
        runner_up = min(q.versus, key=lambda v: v.ratio_median)
        if math.isinf(runner_up.ratio_median):
            lines += ["", f"Margin: none to give: the runner-up, {md(runner_up.backend)}, measured 0 (no ratio)."]
        else:
            lines += [
                "",
                f"Margin: {ratio_text(runner_up.ratio_median)} over the runner-up, {md(runner_up.backend)} "
                f"(median of the per-point ratios; {_span(runner_up.ratio_lo, runner_up.ratio_hi)}).",
            ]
    lines.append("")
    for v in q.versus:
        amount = gap_range_text(v.ratio_lo, v.ratio_hi)
        if not math.isinf(v.ratio_median):
            amount += f" (median {md(q.winner)} / {md(v.backend)} = {verdicts.times(v.ratio_median)})"
        lines.append(
            f"- measured slower: **{md(v.backend)}**, {amount}; beaten at {v.beaten_at}, "
            + (f"equivalent at {v.equivalent_at}, " if v.equivalent_at else "")
            + f"undecided at {v.cannot_rank_at}, of {len(v.ratios)} points"
        )
    for alias, target in q.same.items():
        lines.append(f"- {md(alias)} loaded {md(target)}: the same choice, not ranked against it")
    if q.per_level:
        lines += ["", "Per concurrency:", ""]
        lines += [f"- c={c}: {md(v.words())}" for c, v in q.per_level.items()]
    return lines


def _excluded(rec: Recommendation, s: CellSummary) -> str:
    """Where the only cell of the winning configuration is on a host no ranking crosses to: said, with why (its
    comparisons were made on that host alone; its speeds are not the fleet's)."""
    effect = rec.hosts.effects.get(str(s.cell.get("host", "")))
    if effect is None or not effect.outlier:
        return ""
    return f", the only host that measured it, excluded from every cross-host comparison: {md(effect.outlier)}"


def _span(lo: float, hi: float) -> str:
    """ "1.10× to 1.30×", with a bound over a zero said as such."""
    return f"{verdicts.times(lo)} to {verdicts.times(hi)}"


def _not_ranked_failed(s: CellSummary) -> str:
    death = death_text(s.cell)
    if death:
        said, root = death
        return f"- engine died: {md(s.backend_text)} on {md(s.checkpoint)} ({md(said.removeprefix('engine died '))}: {md_code(root)})"
    return f"- failed to start: {md(s.backend_text)} on {md(s.checkpoint)} (class {md_code(s.cell.get('failure_class') or 'other')})"
