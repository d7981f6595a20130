"""`spark-agent report`: report.md, report.html and PNG plots from a results tree; the end-of-sweep terminal table.

The numbers come from agent.judging.stats (pure); this module gathers them into a ReportData, renders it and does the I/O.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.escape import md, md_code, md_fence, rich
from agent.hostside import atomic
from agent.hostside.serving import launch_command
from agent.judging import bandwidth, correctness, replicas, stats
from agent.judging.stats import CANNOT_RANK, CellSummary, Point, Recommendation, Stat
from agent.judging.telemetry import GPU_BOUND_PCT
from agent.planning.matrix import BACKEND_FIELDS, serve_argv
from agent.reporting import correctness as correctness_report
from agent.reporting import loadreport, startup, warmup
from agent.reporting import multinode as multinode_report
from agent.reporting import telemetry as telemetry_report
from agent.results.tree import CELL_FILE, LOST_FILE, load_cells

PLOTS = {  # file name → (title, y label, which Stat of a point)
    "throughput.png": ("Output throughput vs concurrency", "output tok/s (median, min–max bars)", "throughput"),
    "ttft.png": ("TTFT vs concurrency", "median TTFT, ms", "ttft"),
    "tpot.png": ("TPOT vs concurrency", "median TPOT, ms", "tpot"),
}


@dataclass
class ReportData:
    summaries: list[CellSummary]
    recommendations: list[Recommendation]
    provenance: dict[str, Any]
    threshold: float
    seed: int
    tune: list[dict[str, Any]] = field(default_factory=list)  # results/<sweep>/tune.toml records
    lost: list[str] = field(default_factory=list)  # sweep/host/cell of cells started but without results
    rank_by: str = "throughput"  # a key of stats.RANK_BY
    calibration: str = ""  # "results/calibrate, 0.3 days old": host effects also from that calibration


def build(
    cells: Sequence[dict[str, Any]],
    *,
    threshold: float = stats.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
    calibration: Sequence[dict[str, Any]] = (),
) -> ReportData:
    """`calibration`: cells of a recent `spark-agent calibrate` (host effects only, never ranked)."""
    metric = stats.RANK_BY[rank_by][0]
    summaries = stats.with_variants(sorted(stats.summarize_cells(cells, threshold, metric), key=_cell_order))
    calibrated = stats.summarize_cells(calibration, threshold, metric)
    recs = stats.recommend(summaries, seed=seed, metric=metric, calibration=calibrated)
    return ReportData(summaries, recs, provenance(summaries), threshold, seed, rank_by=rank_by)


def _cell_order(s: CellSummary) -> tuple:
    return (s.hardware, s.quant, s.checkpoint, s.cell.get("host", ""), s.backend_text, s.cell.get("cell_id", ""))


# ---------------------------------------------------------------- provenance and small formatting helpers


def provenance(summaries: Sequence[CellSummary]) -> dict[str, Any]:
    once = stats.distinct_cells(summaries)  # a cell with load axes has a summary per (rate, depth): counted once
    cells = [s.cell for s in once]
    runs = [st for c in cells for st in (c.get("starts") or [c])]  # every server start (stats.merge_starts)
    started = sorted(st["started_at"] for st in runs if st.get("started_at"))
    finished = sorted(st["finished_at"] for st in runs if st.get("finished_at"))
    return {
        "sweeps": sorted({c.get("sweep", "") for c in cells}),
        "images": sorted({c.get("config", {}).get("image", "") for c in cells} - {""}),
        "vllm_versions": sorted({c.get("attestation", {}).get("vllm_version", "") for c in cells} - {""}),
        "hosts": sorted(
            {(c.get("host", ""), stats.hardware_label(c), c.get("facts", {}).get("fingerprint", "")) for c in cells}
        ),
        "first_started": started[0] if started else "",
        "last_finished": finished[-1] if finished else "",
        "wall_s": _span_s(started[0], finished[-1]) if started and finished else None,
        "cell_time_s": sum(float(st.get("elapsed_s", 0.0)) for st in runs),
        "cells": len(cells),
        "server_starts": len(runs),
        "verdicts": {v: sum(s.verdict == v for s in once) for v in ("valid", "invalid", "failed", stats.WRONG_OUTPUT)},
        "measurements": sum(len(s.cell.get("runs", [])) for s in summaries),
        "failed_runs": sum(len(s.failed_runs) for s in summaries),
        "unstable_points": sum(len(s.unstable_points) for s in summaries),
    }


def starts_text(p: dict[str, Any]) -> str:
    """ " (6 server starts)" where a config was started more than once, else nothing."""
    return f" ({p['server_starts']} server starts)" if p.get("server_starts", p["cells"]) > p["cells"] else ""


def _span_s(start: str, end: str) -> float | None:
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds()


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    minutes, s = divmod(round(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def pct(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value * 100:.1f}%"


def spread_text(st: Stat | None) -> str:
    """The spread of a point's repeats, or "–" when fewer than two succeeded: one value has no spread (not 0%)."""
    return pct(st.spread) if st is not None and len(st.values) > 1 else "–"


def ratio_text(r: float) -> str:
    """How much faster the winner is: "2.4×" for big gaps, "+9%" for small ones."""
    if math.isinf(r) or math.isnan(r):
        return str(r)
    return f"{r:.2f}×" if r >= 1.5 else f"{(r - 1) * 100:+.0f}%"


def slower_text(r: float) -> str:
    """The loser's side of a winner/loser ratio r: "2.4× slower" or "9% slower" (throughput lost)."""
    if r >= 1.5:
        return f"{r:.1f}× slower"
    return f"{(1 - 1 / r) * 100:.0f}% slower" if r > 0 else "n/a"


def gap_text(r: float) -> str:
    """A winner/loser ratio in words from the loser's side: "9% slower", "2.4× slower", or "5% faster" below 1."""
    if r >= 1 or r <= 0 or math.isnan(r):
        return slower_text(r)
    inverse = 1 / r
    return f"{inverse:.1f}× faster" if inverse >= 1.5 else f"{(inverse - 1) * 100:.0f}% faster"


def gap_range_text(lo: float, hi: float) -> str:
    """ "9% to 16% slower", "5% faster to 16% slower", "2.1× to 3.0× slower": one unit said once where both share it."""
    a, b = gap_text(lo), gap_text(hi)
    if a == b:
        return a
    for unit in ("% slower", "× slower", "% faster", "× faster"):
        if a.endswith(unit) and b.endswith(unit):
            return f"{a.removesuffix(unit)}{'%' if unit[0] == '%' else '×'} to {b}"
    return f"{a} to {b}"


def serve_command(cell: dict[str, Any]) -> str:
    """A copy-pasteable command: the cell's env + its launch argv (or argv rebuilt from [config])."""
    argv = cell.get("launch", {}).get("argv") or serve_argv(cell.get("config", {}))
    return launch_command("process", argv, cell.get("env", {}))


def dropped_env(cell: dict[str, Any]) -> list[str]:
    """Variables the env rules dropped (dead or harmful), with why: worth telling whoever copies the command."""
    return [
        f"{p.get('name')}: {p.get('reason', '')}" for p in cell.get("env_provenance", []) if p.get("action") == "drop"
    ]


def death_text(cell: dict[str, Any]) -> tuple[str, str] | None:
    """For a server that died mid-cell, plain text (escape it where it is shown): ("engine died at <time> during
    c004-r2 (cuda_error)", "<root-cause log line>"); None for any other cell."""
    died = cell.get("died")
    if cell.get("failure_class") != "engine_died" or not isinstance(died, dict):
        return None
    where = str(died.get("window", ""))
    where = where if where.startswith(("after ", "at ")) or not where else f"during {where}"
    said = f"engine died at {died.get('at') or '?'}{' ' + where if where else ''} ({died.get('cause') or 'other'})"
    return said, str(died.get("root_cause") or died.get("how") or "?")


def cell_name(s: CellSummary) -> str:
    """host/checkpoint/backend (and the load slice: "@ 2 req/s, depth 8192"), as Markdown text."""
    load = stats.load_text(s.load) if s.cell.get("load_slice") else ""
    return md(f"{s.cell.get('host', '?')}/{s.checkpoint}/{s.backend_text}" + (f" @ {load}" if load else ""))


MEASURED_ON = ": measured on "  # a lost cell another host of its group measured (requeued): not measured again


def _lost_text(results_dir: Path, lost: Path) -> str:
    """ "host/cell" of a lost cell, and where it was measured instead when another host has it (requeued)."""
    where = str(lost.parent.relative_to(results_dir))
    sweep = lost.parent.parent.parent  # <sweep>/<host>/<cell>/lost.toml
    others = sorted(p.parent.parent.name for p in sweep.glob(f"*/{lost.parent.name}/{CELL_FILE}"))
    return f"{where}{MEASURED_ON}{', '.join(others)} instead" if others else where


def values_text(st: Stat | None) -> str:
    return ", ".join(num(v) for v in st.values) if st else "no successful run"


# ---------------------------------------------------------------- the recommendation in words


def verdict_lines(rec: Recommendation) -> list[str]:
    """Markdown lines for one (hardware, quant): what to run (each axis the data separates) or cannot rank; then,
    per question, who is slower and by how much, and which axes it held equal. Every value is escaped
    (escape.md): GPU names and log-derived text come from hosts."""
    lines = [f"### {md(rec.hardware)} · {md(rec.quant)}", ""]
    undecided = undecided_text(rec)
    if rec.winner and not undecided:
        lines.append(f"**Run {md(rec.winner)}.** {md(rec.reason)}.")
    elif rec.winner:
        lines.append(f"**Run {md(rec.winner)}; {md(undecided)}.** {md(rec.reason)}.")
    else:
        lines.append(f"**{md(nothing_to_run(rec)).capitalize()}.** {md(rec.reason)}.")
    words, key = stats.RANK_BY_WORDS.get(rec.metric, rec.metric), rec.metric
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
            f"Command ({what}, as measured on {md(s.cell.get('host', '?'))}):",
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


def undecided_text(rec: Recommendation) -> str:
    """ "cannot rank checkpoint, unresolved speculative": the axes without a winner, each with why."""
    return ", ".join(f"{stats.UNRESOLVED if q.unresolved else CANNOT_RANK} {q.axis}" for q in rec.undecided)


def _undecided_word(rec: Recommendation) -> str:
    """ "unresolved" when a leader is inside the start-to-start noise (more starts would settle it), else
    "cannot rank"."""
    return stats.UNRESOLVED if any(q.unresolved for q in rec.questions) else CANNOT_RANK


def noise_floor_line(rec: Recommendation) -> str:
    """The machine's noise floor, from its A/A pairs (every config started twice or more is one)."""
    if rec.noise is None:
        return (
            "Noise floor: between server starts unknown (every cell was started once; `server_starts = 2` in "
            "[matrix] measures it), so a margin under "
            f"{stats.RESOLVE_MARGIN:.0%} is not named a winner."
        )
    return f"Noise floor (A/A: the same cell started again, standard deviations): {md(rec.noise.words())}."


def nothing_to_run(rec: Recommendation) -> str:
    """The headline without a winner: the axes were ranked but their winners never ran together, or cannot rank."""
    return "no measured configuration to run" if rec.choice else _undecided_word(rec)


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
        verdict = f"**{md(q.winner)}**" if q.winner else f"**{stats.UNRESOLVED if q.unresolved else CANNOT_RANK}**"
        lines += [f"#### {md(q.axis)}: {verdict}", "", f"{md(q.reason)}.", ""]
    lines.append(f"Held equal: {md(held)} (and always the kind of machine, the load and the schedule).")
    if q.winner and q.versus:
        runner_up = min(q.versus, key=lambda v: v.ratio_median)
        lines += [
            "",
            f"Margin: {ratio_text(runner_up.ratio_median)} over the runner-up, {md(runner_up.backend)} "
            f"(median of the per-point ratios; {runner_up.ratio_lo:.2f}× to {runner_up.ratio_hi:.2f}×).",
        ]
    lines.append("")
    for v in q.versus:
        amount = gap_range_text(v.ratio_lo, v.ratio_hi)
        lines.append(
            f"- measured slower: **{md(v.backend)}**, {amount} "
            f"(median {md(q.winner)} / {md(v.backend)} = {v.ratio_median:.2f}×); beaten at {v.beaten_at}, "
            f"cannot rank at {v.cannot_rank_at}, of {len(v.ratios)} points"
        )
    for alias, target in q.same.items():
        lines.append(f"- {md(alias)} loaded {md(target)}: the same choice, not ranked against it")
    if q.per_concurrency:
        per_c = ", ".join(f"c={c}: {md(w)}" for c, w in q.per_concurrency.items())
        lines += ["", f"Per concurrency: {per_c}."]
    return lines


def _not_ranked_failed(s: CellSummary) -> str:
    death = death_text(s.cell)
    if death:
        said, root = death
        return f"- engine died: {md(s.backend_text)} on {md(s.checkpoint)} ({md(said.removeprefix('engine died '))}: {md_code(root)})"
    return f"- failed to start: {md(s.backend_text)} on {md(s.checkpoint)} (class {md_code(s.cell.get('failure_class') or 'other')})"


# ---------------------------------------------------------------- markdown


def render_markdown(data: ReportData, plots: Iterable[str] = PLOTS) -> str:
    p = data.provenance
    out = [f"# spark-agent report: {md(', '.join(p['sweeps']) or 'results')}", ""]
    out += ["## What to run", ""] + correctness_report.what_to_run_lines(data.summaries)
    if data.calibration:
        out += [f"Host effects also measured by {md(data.calibration)}.", ""]
    for rec in data.recommendations:
        out += verdict_lines(rec) + telemetry_report.recommendation_caveat(rec)
    out += ["## Problems", ""] + problem_lines(data) + [""]
    out += ["## Provenance", ""] + provenance_lines(data) + [""]
    out += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    out += ["## Medians", ""] + medians_table_md(data.summaries) + [""]
    gaps = loadreport.unmeasured(data.summaries)  # what the table leaves empty, why, and what would measure it
    out += [f"- {md(line)}" for line in gaps] + ([""] if gaps else [])
    out += correctness_report.sections(data.summaries)
    out += loadreport.sections(data.summaries)
    out += telemetry_report.sections(data.summaries)
    out += warmup.sections(data.summaries)
    out += ["## Single stream vs the bandwidth ceiling (c=1)", ""]
    out += ceiling_lines(data.summaries) or ["No cell carries checkpoint_info.bytes_per_token: no ceiling.", ""]
    out += ["## Unstable points", ""] + _or_none(unstable_lines(data.summaries, data.threshold)) + [""]
    out += ["## Failed runs (left out of the medians)", ""] + _or_none(failed_run_lines(data.summaries)) + [""]
    once = stats.distinct_cells(data.summaries)  # what is said once per cell, whatever its load slices
    out += ["## INVALID cells (never ranked)", ""] + _or_none(invalid_lines(once)) + [""]
    out += ["## Failed cells (never ranked)", ""] + _or_none(failed_cell_lines(once)) + [""]
    out += ["## Startup and time spent", ""] + startup.time_share_lines(once) + [""]
    out += startup.startup_lines(once) + [""]
    if data.tune:
        out += ["## Adaptive tuning: skipped, stopped, undecided", ""] + startup.tune_lines(data.tune) + [""]
    out += replica_section(data.summaries, data.threshold)
    out += multinode_report.node_lines(stats.distinct_cells(data.summaries))  # once per cell
    return "\n".join(out)


def replica_section(summaries: Sequence[CellSummary], threshold: float) -> list[str]:
    """Cells measured on several hosts (--replicas): spread across hosts next to spread across repeats; a cell
    whose hosts disagree beyond the noise is flagged. Absent when no cell has replicas."""
    points = replicas.replica_points(summaries, threshold)
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


def problem_lines(data: ReportData) -> list[str]:
    """What went wrong, counted, before any detail: failed, INVALID, lost cells, unstable and throttled points,
    failed runs."""
    p, v = data.provenance, data.provenance["verdicts"]
    moved = [x for x in data.lost if MEASURED_ON in x]
    counts = [
        (v["failed"], "failed cell(s)", "Failed cells (never ranked)"),
        (
            v["invalid"],
            "INVALID cell(s) (loaded something other than what was requested)",
            "INVALID cells (never ranked)",
        ),
        (
            v[stats.WRONG_OUTPUT],
            "WRONG OUTPUT cell(s) (fast or not, their outputs failed the correctness probe)",
            "WRONG OUTPUT cells (never ranked)",
        ),
        (len(data.lost) - len(moved), "lost cell(s) (started, no results: measured again on resume)", ""),
        (len(moved), "cell(s) lost on one host and measured on another of its group", ""),
        (p["unstable_points"], "unstable point(s)", "Unstable points"),
        (
            sum(len(telemetry_report.throttled(s)) for s in data.summaries),
            "throttled point(s) (thermal or power throttling during their windows)",
            "Throttling",
        ),
        (p["failed_runs"], "failed run(s)", "Failed runs (left out of the medians)"),
        (
            warmup.jit_dropped(data.summaries),
            "measured window(s) dropped for a JIT compile during them",
            "Windows dropped: JIT compile during the window",
        ),
        (
            sum(len(telemetry_report.not_gpu_bound(s)) for s in data.summaries),
            f"point(s) with windows not GPU-bound (mean GPU utilisation below {GPU_BOUND_PCT:.0f}%)",
            "Windows not GPU-bound",
        ),
    ]
    lines = [f"- **{n}** {what}" + (f" — see {section}" if section else "") for n, what, section in counts if n]
    lines += [f"    - lost: {md(x)}" for x in data.lost[:20]]
    return lines or ["None: every cell valid, every point stable and unthrottled, no failed run."]


def _or_none(lines: list[str]) -> list[str]:
    return lines or ["None."]


def provenance_lines(data: ReportData) -> list[str]:
    p = data.provenance
    v = p["verdicts"]
    hosts = "; ".join(f"{md(h)} ({md(hw)}, fingerprint {md(fp or '?')})" for h, hw, fp in p["hosts"])
    return [
        f"- Image: {md(', '.join(p['images']) or 'unknown')}",
        f"- vLLM version (from the server log): {md(', '.join(p['vllm_versions']) or 'unknown')}",
        f"- Hosts: {hosts}",
        f"- Measured: {md(p['first_started'] or '?')} → {md(p['last_finished'] or '?')} "
        f"(wall {duration_text(p['wall_s'])}, cell time {duration_text(p['cell_time_s'])})",
        f"- Cells: {p['cells']}{starts_text(p)} — {v['valid']} valid, {v['invalid']} INVALID, {v['failed']} failed"
        + (f", {v[stats.WRONG_OUTPUT]} WRONG OUTPUT" if v[stats.WRONG_OUTPUT] else "")
        + "; "
        f"{p['measurements']} measurements, {p['failed_runs']} failed runs, {p['unstable_points']} unstable points",
        f"- Method: median of the successful repeats; spread = (max − min) / median, unstable above "
        f"{data.threshold:.0%}; A beats B only if repeat ranges do not overlap or a bootstrap 95% CI on the "
        f'ratio excludes 1 (seed {data.seed}); otherwise "{CANNOT_RANK}".',
        f"- Ranked by: {md(stats.RANK_BY[data.rank_by][1])} (`--rank-by {md(data.rank_by)}`, window key "
        f"{md_code(stats.RANK_BY[data.rank_by][0])}); each axis is ranked within the other axes held equal.",
    ]


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
                goodput = p.tails.get(stats.GOODPUT) if p else None
                shown = num(goodput.median, 2) if goodput and stats.slos(s) else "–"
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


def unstable_lines(summaries: Sequence[CellSummary], threshold: float) -> list[str]:
    return [
        f"- {cell_name(s)} c={p.concurrency}: spread {pct(p.throughput.spread)} > {threshold:.0%}; "
        f"repeats {values_text(p.throughput)} tok/s"
        for s in summaries
        for p in s.unstable_points
        if p.throughput is not None  # always: a point is unstable by its throughput's spread
    ]


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


def ceiling_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Single-stream decode (c=1) as % of the bandwidth ceiling, for cells that carry
    checkpoint_info.bytes_per_token; and whether bytes explain the differences between checkpoints
    on the same backend (agent.judging.bandwidth)."""
    groups: dict[tuple[str, str], list[CellSummary]] = {}
    for s in summaries:
        if s.rankable and _c1(s) and s.cell.get("checkpoint_info", {}).get("bytes_per_token"):
            groups.setdefault((_arch(s.cell), s.backend), []).append(s)
    lines: list[str] = []
    for (arch, backend), cells in sorted(groups.items()):
        try:
            gbs, source = bandwidth.bandwidth_for(arch)
        except UserError as exc:
            lines += [f"- {md(arch)} · {md(backend)}: no ceiling ({md(exc.message)})", ""]
            continue
        notes = bandwidth.ceiling_notes([_ceiling_point(s) for s in cells], gbs, source)
        lines += [
            f"{md(arch)} · {md(backend)}: {gbs:g} GB/s ({md(source)})",
            "",
            "| checkpoint | bytes/token | ceiling tok/s | c=1 tok/s | % of ceiling | note |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {md(r['label'])} | {r['bytes_per_token']:,} | {num(r['ceiling_tok_s'])} | {num(r['tok_s'])} "
            f"| {num(r['pct_of_ceiling'])} | {md(r['note'])} |"
            for r in notes["rows"]
        ]
        lines += [""] + [f"- {md(p['note'])}" for p in notes["pairs"]] + [""]
    return lines


def _c1(s: CellSummary) -> Point | None:
    p = s.points.get(1)
    return p if p is not None and p.throughput is not None else None


def _arch(cell: dict[str, Any]) -> str:
    facts = cell.get("facts", {})
    return facts.get("arch") or facts.get("gpu_name") or "unknown"


def _ceiling_point(s: CellSummary) -> bandwidth.Point:
    p = _c1(s)
    assert p is not None and p.throughput is not None  # ceiling_lines only passes cells with a c=1 throughput
    medians = {"median_tpot_ms": p.tpot.median if p.tpot else 0.0, "output_throughput": p.throughput.median}
    return bandwidth.Point(
        label=s.checkpoint,
        bytes_per_token=int(s.cell["checkpoint_info"]["bytes_per_token"]),
        tok_s=bandwidth.single_stream_tok_s(medians),
        speculative=bool(s.config.get("speculative")),
    )


# ---------------------------------------------------------------- plots


def render_plots(data: ReportData) -> dict[str, bytes]:
    """PNG bytes per file name: one panel per checkpoint, one line per backend, min–max bars at every point."""
    import matplotlib

    matplotlib.use("Agg")
    images = {name: _plot(data.summaries, title, ylabel, attr) for name, (title, ylabel, attr) in PLOTS.items()}
    return images | loadreport.rate_plot(data.summaries) | telemetry_report.render_timelines(data.summaries)


def _plot(summaries: Sequence[CellSummary], title: str, ylabel: str, attr: str) -> bytes:
    import matplotlib.pyplot as plt

    fig = figure(summaries, title, ylabel, attr)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def figure(summaries: Sequence[CellSummary], title: str, ylabel: str, attr: str) -> Any:
    """One plot of the report as a matplotlib Figure (the tests check that every label lies inside it)."""
    import matplotlib.pyplot as plt

    panels = _panels(summaries)
    cols = min(3, max(1, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    # constrained layout sizes the margins to the labels: titles and y labels are never cut at the figure's edge
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False, layout="constrained")
    backends = sorted({s.backend for cells in panels.values() for s in cells})
    colours = {b: f"C{i % 10}" for i, b in enumerate(backends)}  # one colour per backend in every panel
    for ax, (name, cells) in zip(axes.flat, panels.items(), strict=False):  # the grid may have spare axes
        _panel(ax, name, cells, ylabel, attr, colours)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(f"{title}\n(dotted: INVALID, never ranked; circled: unstable point)", fontsize="medium")
    return fig


def _panels(summaries: Sequence[CellSummary]) -> dict[str, list[CellSummary]]:
    panels: dict[str, list[CellSummary]] = {}
    for s in summaries:
        if s.points and s.verdict != "failed":
            panels.setdefault(f"{s.checkpoint} · {s.hardware}", []).append(s)
    return panels or {"no measurements": []}


def _panel(ax: Any, name: str, cells: list[CellSummary], ylabel: str, attr: str, colours: dict[str, str]) -> None:
    from matplotlib.ticker import NullLocator

    lines = _lines(cells)
    drawn = 0
    for label, members in lines.items():
        pts = _pooled(members, attr)
        if not pts:
            continue
        drawn += 1
        xs = [c for c, _, _ in pts]
        mids = [st.median for _, st, _ in pts]
        err = [[st.median - st.lo for _, st, _ in pts], [st.hi - st.median for _, st, _ in pts]]
        style = "-" if members[0].rankable else ":"
        line = ax.errorbar(
            xs, mids, yerr=err, fmt="o" + style, capsize=3, label=label, color=colours.get(members[0].backend)
        )
        bad = [(c, st.median) for c, st, unstable in pts if unstable]
        if bad:
            ax.scatter(
                [c for c, _ in bad],
                [m for _, m in bad],
                s=140,
                facecolors="none",
                edgecolors=line[0].get_color(),
                linewidths=1.5,
            )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())  # no minor ticks: labels only at measured concurrencies
    ticks = sorted({c for s in cells for c in s.points})
    ax.set_xticks(ticks or [1])
    ax.set_xticklabels([str(t) for t in ticks] or ["1"])
    ax.set_title(_short_title(name), fontsize="medium")
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize="small" if drawn <= 8 else "xx-small")
    else:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")


def _pooled(members: list[CellSummary], attr: str) -> list[tuple[int, Stat, bool]]:
    """(c, Stat over every repeat of every member, any member unstable there): one line per backend, even when
    several hosts measured it (ranking stays per host; the plot shows the fleet's range)."""
    out = []
    for c in sorted({c for s in members for c in s.points}):
        points = [s.points[c] for s in members if c in s.points and getattr(s.points[c], attr) is not None]
        st = stats.describe([v for p in points for v in getattr(p, attr).values])
        if st is not None:
            out.append((c, st, any(p.unstable for p in points)))
    return out


def _lines(cells: list[CellSummary]) -> dict[str, list[CellSummary]]:
    """Line label → its cells: the backend, plus whatever else differs between the cells of one panel (image,
    speculative, ...) except the host, over which a line pools."""
    keys = sorted(
        {k for s in cells for k in s.config} - set(BACKEND_FIELDS) - set(stats.SCHEDULE_FIELDS) - {"checkpoint"}
    )
    varying = [k for k in keys if len({str(s.config.get(k)) for s in cells}) > 1]
    lines: dict[str, list[CellSummary]] = {}
    for s in cells:
        extra = [f"{k}={_short(stats.value_label(s.config, k))}" for k in varying]  # "speculative=off", never empty
        tag = "" if s.rankable else f" ({s.verdict.upper()})"
        lines.setdefault(" ".join([s.backend] + extra) + tag, []).append(s)
    hosts = {label: len({s.cell.get("host") for s in members}) for label, members in lines.items()}
    return {
        (f"{label}, {hosts[label]} hosts" if hosts[label] > 1 else label): members for label, members in lines.items()
    }


def _short_title(name: str, width: int = 48) -> str:
    """A panel title that fits its panel: long checkpoint names keep their start and end."""
    return name if len(name) <= width else name[: width // 2 - 1] + "…" + name[-(width // 2) :]


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:10] + "…" + text[-10:]


# ---------------------------------------------------------------- terminal


def terminal_table(
    cells: Sequence[dict[str, Any]], *, threshold: float = stats.DEFAULT_THRESHOLD, seed: int = stats.DEFAULT_SEED
) -> Any:
    """A rich Table for the end of a sweep: one row per cell, median ± spread per concurrency, the verdict."""
    from rich.table import Table

    data = build(cells, threshold=threshold, seed=seed)
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
            rich(s.backend_text + (f" @ {stats.load_text(s.load)}" if s.cell.get("load_slice") else "")),
            _verdict_markup(s),
            *[_cell_markup(s.points.get(c)) for c in conc],
        )
    return table


def _verdict_markup(s: CellSummary) -> str:
    if s.verdict == "valid" and correctness.not_judged(s.cell):
        return f"[green]valid[/] (speed only: {rich(correctness.not_judged(s.cell))})"
    if s.verdict == "valid":
        return "[green]valid[/]"
    if s.verdict == "invalid":
        return "[yellow]INVALID[/]"
    if s.verdict == stats.WRONG_OUTPUT:
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
    return "  ".join(rich(f"{r.hardware}·{r.quant}: {r.winner or _undecided_word(r)}") for r in recs)


# ---------------------------------------------------------------- I/O


def write_report(
    results_dir: Path,
    out_dir: Path | None = None,
    *,
    threshold: float = stats.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
    said: list[str] | None = None,
) -> list[Path]:
    """Read the tree, write report.md, report.html and the PNGs into out_dir (default: results_dir). `said`, if
    given, gets the "what to run" lines in plain text (what the command prints)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(f"{results_dir}: no such results folder (pass the folder a sweep wrote, e.g. results/)")
    cells = load_cells(results_dir)
    if not cells:
        raise UserError(f"{results_dir}: no finished cell (no cell.toml below it); run a sweep first")
    lost = [_lost_text(results_dir, p) for p in sorted(results_dir.rglob(LOST_FILE))]
    tune = startup.load_tune_records(results_dir)
    out = Path(out_dir or results_dir)
    calibrated = calibration_cells(results_dir, cells)
    return write_report_cells(
        cells,
        out,
        threshold=threshold,
        seed=seed,
        lost=lost,
        tune=tune,
        rank_by=rank_by,
        said=said,
        calibration=calibrated,
    )


def calibration_cells(results_dir: Path, cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recent calibration cells next to a sweep's folder, of the images its cells ran (none for the calibration
    itself, or for a whole results tree, which holds them already)."""
    from agent.running import calibration

    if results_dir.name == calibration.SWEEP or (results_dir / calibration.SWEEP).is_dir():
        return []
    images = {c.get("config", {}).get("image") for c in cells}
    return [c for c in calibration.recent(results_dir.parent) if c.get("config", {}).get("image") in images]


def write_report_cells(
    cells: Sequence[dict[str, Any]],
    out: Path,
    *,
    threshold: float = stats.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    lost: Sequence[str] = (),
    tune: Sequence[dict[str, Any]] = (),
    rank_by: str = "throughput",
    calibration: Sequence[dict[str, Any]] = (),
    said: list[str] | None = None,
) -> list[Path]:
    """report.md, report.html and the PNGs of these cells (a tree's, or a store selection's) into out. A store
    selection has no lost cells or tune records (they are files of the tree, not cells)."""
    from agent.reporting import htmlpage as report_html
    from agent.running.calibration import age_days

    data = build(cells, threshold=threshold, seed=seed, rank_by=rank_by, calibration=calibration)
    ages = [a for a in (age_days(c) for c in calibration) if a is not None]
    if ages:
        data.calibration = f"{len(calibration)} cell(s) of `spark-agent calibrate`, {max(ages):.1f} days old at most"
    data.lost = list(lost)
    data.tune = list(tune)
    images = render_plots(data)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, png in images.items():
        written.append(_write(out / name, png))
    written.append(_write(out / "report.md", render_markdown(data, images).encode()))
    written.append(_write(out / "report.html", report_html.render(data, images).encode()))
    if said is not None:
        said += what_to_run(data)
    return written


def what_to_run(data: ReportData) -> list[str]:
    """The recommendation, one plain line per (hardware, quant): what a person reads first on the terminal."""
    out = []
    for rec in data.recommendations:
        undecided = undecided_text(rec)
        verdict = f"run {rec.winner}" + (f"; {undecided}" if undecided else "") if rec.winner else nothing_to_run(rec)
        out.append(f"{rec.hardware} · {rec.quant}: {verdict} ({rec.reason})")
    return out + loadreport.unmeasured(data.summaries)


def _write(path: Path, data: bytes) -> Path:
    atomic.write_bytes(path, data)
    return path
