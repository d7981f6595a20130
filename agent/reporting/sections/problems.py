"""The report's "Problems": what went wrong, counted from the judgement, before any detail."""

from __future__ import annotations

from agent.escape import md
from agent.judging import summary
from agent.judging.judgement import Judgement
from agent.judging.telemetry import GPU_BOUND_PCT


def problem_lines(data: Judgement) -> list[str]:
    """What went wrong, counted, before any detail: failed, INVALID, lost cells, unstable and throttled points,
    failed runs."""
    p, v = data.provenance, data.provenance.verdicts
    moved = data.moved
    counts = [
        (v["failed"], "failed cell(s)", "Failed cells (never ranked)"),
        (
            v["invalid"],
            "INVALID cell(s) (loaded something other than what was requested)",
            "INVALID cells (never ranked)",
        ),
        (
            v[summary.WRONG_OUTPUT],
            "WRONG OUTPUT cell(s) (fast or not, their outputs failed the correctness probe)",
            "WRONG OUTPUT cells (never ranked)",
        ),
        (len(data.lost) - len(moved), "lost cell(s) (started, no results: measured again on resume)", ""),
        (len(moved), "cell(s) lost on one host and measured on another of its group", ""),
        (p.unstable_points, "unstable point(s)", "Unstable points"),
        (
            data.throttled,
            "throttled point(s) (thermal or power throttling during their windows)",
            "Throttling",
        ),
        (p.failed_runs, "failed run(s)", "Failed runs (left out of the medians)"),
        (
            data.jit_dropped,
            "measured window(s) dropped for a JIT compile during them",
            "Windows dropped: JIT compile during the window",
        ),
        (
            data.not_gpu_bound,
            f"point(s) with windows not GPU-bound (mean GPU utilisation below {GPU_BOUND_PCT:.0f}%)",
            "Windows not GPU-bound",
        ),
    ]
    lines = [f"- **{n}** {what}" + (f" — see {section}" if section else "") for n, what, section in counts if n]
    lines += [f"    - lost: {md(x)}" for x in data.lost[:20]]
    return lines or ["None: every cell valid, every point stable and unthrottled, no failed run."]
