"""report.md: the judgement's sections, in the order a reader needs them (what to run first, then what went wrong,
where the numbers came from, the plots and tables, and the detail). Each section is its own module
(agent/reporting/sections/, and the load, telemetry, correctness, warmup, startup and multi-node ones beside it);
this module only puts them in order. Decides nothing: agent.judging.judgement did."""

from __future__ import annotations

from collections.abc import Iterable

from agent.escape import md
from agent.judging.judgement import Judgement
from agent.planning import memory as memory_plan
from agent.reporting import correctness as correctness_report
from agent.reporting import loadreport, startup, warmup
from agent.reporting import multinode as multinode_report
from agent.reporting import telemetry as telemetry_report
from agent.reporting.charts import PLOTS
from agent.reporting.sections.ceiling import ceiling_lines
from agent.reporting.sections.checks import checks_lines
from agent.reporting.sections.failures import failed_cell_lines, failed_run_lines, invalid_lines
from agent.reporting.sections.medians import medians_table_md
from agent.reporting.sections.problems import problem_lines
from agent.reporting.sections.provenance import provenance_lines
from agent.reporting.sections.replicas import replica_lines
from agent.reporting.sections.unstable import unstable_lines
from agent.reporting.sections.whattorun import verdict_lines


def render_markdown(data: Judgement, plots: Iterable[str] = PLOTS) -> str:
    p = data.provenance
    out = [f"# spark-agent report: {md(', '.join(p.sweeps) or 'results')}", ""]
    out += ["## What to run", ""] + correctness_report.what_to_run_lines(data.summaries)
    if data.calibration:
        out += [f"Host effects also measured by {md(data.calibration)}.", ""]
    for rec in data.recommendations:
        out += verdict_lines(rec, data.slos) + telemetry_report.recommendation_caveat(rec)
    out += ["## Problems", ""] + problem_lines(data) + [""]
    out += ["## Provenance", ""] + provenance_lines(data) + [""]
    out += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    out += ["## Medians", ""] + medians_table_md(data.summaries) + [""]
    # what the table leaves empty, why, and what would measure it
    out += [f"- {md(line)}" for line in data.unmeasured] + ([""] if data.unmeasured else [])
    out += correctness_report.sections(data.summaries)
    out += loadreport.sections(data.summaries)
    out += telemetry_report.sections(data.summaries)
    cells = [s.cell for s in data.once]
    out += memory_plan.report_lines(cells) + memory_plan.pressure_lines(cells)  # [memory] and flagged windows
    out += warmup.sections(data.summaries)
    out += ["## Single stream vs the bandwidth ceiling (c=1)", ""]
    out += ceiling_lines(data.ceilings) or ["No cell carries checkpoint_info.bytes_per_token: no ceiling.", ""]
    out += ["## Unstable points", ""] + _or_none(unstable_lines(data.summaries, data.threshold)) + [""]
    out += ["## Failed runs (left out of the medians)", ""] + _or_none(failed_run_lines(data.summaries)) + [""]
    once = data.once  # what is said once per cell, whatever its load slices
    out += ["## INVALID cells (never ranked)", ""] + _or_none(invalid_lines(once)) + [""]
    out += ["## Failed cells (never ranked)", ""] + _or_none(failed_cell_lines(once)) + [""]
    if data.checks_only:  # [correctness] eager_start: the graphs path's yardstick
        out += ["## Eager starts, checks only (never ranked)", ""] + checks_lines(data.checks_only) + [""]
    out += ["## Startup and time spent", ""] + startup.time_share_lines(once) + [""]
    out += startup.startup_lines(once) + [""]
    if data.tune:
        out += ["## Adaptive tuning: skipped, stopped, undecided", ""] + startup.tune_lines(data.tune) + [""]
    out += replica_lines(data.replicas)
    out += multinode_report.node_lines(once)
    return "\n".join(out)


def _or_none(lines: list[str]) -> list[str]:
    return lines or ["None."]
