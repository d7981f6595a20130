"""Small pieces of the report's wording, shared by its sections, compare, history and the site: numbers, ratios,
durations, a cell's name and command, how its server died. Plain text unless a docstring says Markdown."""

from __future__ import annotations

import math
from typing import Any

from agent.escape import md
from agent.hostside.serving import launch_command
from agent.judging import summary
from agent.judging.judgement import Provenance
from agent.judging.summary import CellSummary, Stat
from agent.judging.verdicts import times
from agent.planning.matrix import serve_argv


def starts_text(p: Provenance) -> str:
    """ " (6 server starts)" where a config was started more than once, else nothing."""
    return f" ({p.server_starts} server starts)" if p.server_starts > p.cells else ""


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
        return times(r)
    return f"{r:.2f}×" if r >= 1.5 else f"{(r - 1) * 100:+.0f}%"


def slower_text(r: float) -> str:
    """The loser's side of a winner/loser ratio r: "2.4× slower" or "9% slower" (throughput lost)."""
    if math.isinf(r):
        return "measured 0 (no ratio)"
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
    load = summary.load_text(s.load) if s.cell.get("load_slice") else ""
    return md(f"{s.cell.get('host', '?')}/{s.checkpoint}/{s.backend_text}" + (f" @ {load}" if load else ""))


def values_text(st: Stat | None) -> str:
    return ", ".join(num(v) for v in st.values) if st else "no successful run"
