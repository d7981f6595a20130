"""The report's "Provenance": image, vLLM version, hosts, when, how many, and the method."""

from __future__ import annotations

from agent.escape import md, md_code
from agent.judging import stats, summary
from agent.judging.judgement import Judgement
from agent.reporting.words import duration_text, starts_text


def provenance_lines(data: Judgement) -> list[str]:
    p = data.provenance
    v = p.verdicts
    hosts = "; ".join(f"{md(h)} ({md(hw)}, fingerprint {md(fp or '?')})" for h, hw, fp in p.hosts)
    return [
        f"- Image: {md(', '.join(p.images) or 'unknown')}",
        f"- vLLM version (from the server log): {md(', '.join(p.vllm_versions) or 'unknown')}",
        f"- Hosts: {hosts}",
        f"- Measured: {md(p.first_started or '?')} → {md(p.last_finished or '?')} "
        f"(wall {duration_text(p.wall_s)}, cell time {duration_text(p.cell_time_s)})",
        f"- Cells: {p.cells}{starts_text(p)} — {v['valid']} valid, {v['invalid']} INVALID, {v['failed']} failed"
        + (f", {v[summary.WRONG_OUTPUT]} WRONG OUTPUT" if v[summary.WRONG_OUTPUT] else "")
        + "; "
        f"{p.measurements} measurements, {p.failed_runs} failed runs, {p.unstable_points} unstable points",
        f"- Method: median of the successful repeats; spread = (max − min) / median, unstable above "
        f"{data.threshold:.0%}; A beats B only if repeat ranges do not overlap or a bootstrap 95% CI on the "
        f"ratio excludes 1 (seed {data.seed}), and with two or more server starts each on the start means; the "
        f"two are equivalent when the start means' 95% interval lies inside ±{data.equivalence:.0%}; otherwise "
        "the question is undecided, with the starts that would decide it.",
        f"- Ranked by: {md(stats.rank_words(data.rank_by, data.slos))} (`--rank-by {md(data.rank_by)}`, window key "
        f"{md_code(stats.RANK_BY[data.rank_by][0])}); each axis is ranked within the other axes held equal.",
    ]
