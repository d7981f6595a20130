"""The report's warmup parts: how long each point warmed up before it was steady (hostside/steady.py), and the
measured windows left out because the server compiled kernels during them. Host text is escaped (escape.md)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md
from agent.judging.summary import CellSummary


def _name(s: CellSummary) -> str:
    return f"{md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend_text)}"


def jit_dropped(summaries: Sequence[CellSummary]) -> int:
    """Measured windows left out of every ranking for a JIT compile during them."""
    return sum(len(p.jit_dropped) for s in summaries for p in s.points.values())


def jit_lines(summaries: Sequence[CellSummary]) -> list[str]:
    out = []
    for s in summaries:
        for p in s.points.values():
            if not p.jit_dropped:
                continue
            runs = {int(r.get("repeat", 0)): r for r in s.cell.get("runs", []) if r.get("concurrency") == p.concurrency}
            first = next((runs[k].get("jit_evidence", "") for k in p.jit_dropped if k in runs), "")
            out.append(
                f"- {_name(s)} c={p.concurrency}: dropped {', '.join(f'r{k}' for k in p.jit_dropped)}"
                + (f" — `{md(first[:160])}`" if first else "")
            )
    return out


def warmup_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """One line per point that warmed up until steady: windows, seconds, and whether it settled."""
    out = []
    for s in summaries:
        for run in sorted(s.cell.get("runs", []), key=lambda r: (r.get("concurrency", 0), r.get("repeat", 0))):
            w = run.get("warmup")
            if not isinstance(w, dict):
                continue
            tok = ", ".join(f"{x:.0f}" for x in w.get("output_throughputs", []))
            flag = "" if w.get("steady") else "**not steady** "
            out.append(
                f"- {_name(s)} c={run.get('concurrency')}: {flag}{w.get('windows', 0)} window(s), "
                f"{float(w.get('seconds', 0.0)):.1f} s (tok/s {tok}; {w.get('jit_lines', 0)} JIT line(s)): "
                f"{md(str(w.get('reason', '')))}"
            )
    return out


def sections(summaries: Sequence[CellSummary]) -> list[str]:
    """Absent when no point warmed up until steady and no window was dropped."""
    warm, dropped = warmup_lines(summaries), jit_lines(summaries)
    out = []
    if warm:
        out += ["## Warmup until steady", ""]
        out += (
            [
                "Each point warmed up until no JIT or autotune line reached the server log for a window and the last two "
                "warmup windows agreed within the spec's warmup_tolerance, or until warmup_max (docs/load-shapes.md).",
                "",
            ]
            + warm
            + [""]
        )
    if dropped:
        out += ["## Windows dropped: JIT compile during the window", ""]
        out += (
            [
                f"{jit_dropped(summaries)} measured window(s) left out of the medians and every ranking: the server log "
                "shows a kernel compiled while they ran (a latency spike, not the configuration's speed).",
                "",
            ]
            + dropped
            + [""]
        )
    return out
