"""The report's startup and tuning sections: where each cell's start went (hostside/startuplog.py's [startup]),
the share of sweep time spent measuring, and what `tune` decided (results/<sweep>/tune.toml)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.escape import md
from agent.judging.summary import CellSummary
from agent.results import tree as results

COLUMNS = [
    "host",
    "checkpoint",
    "backend",
    "weights s",
    "compile s",
    "cache",
    "capture s",
    "warmup s",
    "KV etc. s",
    "ready s",
]


def _s(value: Any) -> str:
    return f"{float(value):.1f}" if isinstance(value, int | float) and value >= 0 else "–"


def startup_lines(summaries: Sequence[CellSummary]) -> list[str]:
    rows = []
    for s in summaries:
        b = s.cell.get("startup") or {}
        if not b:
            continue
        ready = s.cell.get("startup_s", 0.0) or b.get("ready_s", -1.0)
        rows.append(
            [
                md(str(s.cell.get("host", ""))),
                md(s.checkpoint),
                md(s.backend),
                _s(b.get("weights_s", -1)),
                _s(b.get("compile_s", -1)),
                md(str(b.get("compile_cache", "")) or "?"),
                _s(b.get("graph_capture_s", -1)),
                _s(b.get("kernel_warmup_s", -1)),  # older cell.toml files lack it: "–"
                _s(b.get("kv_cache_s", -1)),
                _s(ready),
            ]
        )
    if not rows:
        return ["No cell recorded a startup breakdown."]
    head = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    notes = [
        "",
        "Seconds as the server log states them (a simulated Spark states simulated seconds). `cache`: warm = the",
        "compiled graphs were loaded from the image's cache folder, cold = compiled; `warmup` = kernels JIT-built at start",
        "(vLLM 0.24's DeepGEMM warmup); `KV etc.` = engine init minus compile, capture and warmup (profiling, KV",
        "cache); `ready` = until /health answered.",
    ]
    return head + ["| " + " | ".join(r) + " |" for r in rows] + notes


def time_share(summaries: Sequence[CellSummary]) -> dict[str, float]:
    """Sums over the cells: wall time per cell (elapsed), the load driver's measuring time, server starts."""
    elapsed = sum(float(s.cell.get("elapsed_s", 0.0) or 0.0) for s in summaries)
    measure = sum(float(s.cell.get("measure_s", 0.0) or 0.0) for s in summaries)
    startup = sum(float(s.cell.get("startup_s", 0.0) or 0.0) for s in summaries)
    compile_s = sum(max(0.0, float((s.cell.get("startup") or {}).get("compile_s", -1.0))) for s in summaries)
    return {"elapsed_s": elapsed, "measure_s": measure, "startup_s": startup, "compile_s": compile_s}


def time_share_lines(summaries: Sequence[CellSummary]) -> list[str]:
    t = time_share(summaries)
    if not t["elapsed_s"]:
        return ["No cell recorded its wall time."]
    share = t["measure_s"] / t["elapsed_s"]
    return [
        f"- Share of sweep time spent measuring: **{share:.0%}** ({t['measure_s'] / 60:.1f} of "
        f"{t['elapsed_s'] / 60:.1f} cell-minutes; the rest is server starts, provisioning and collection).",
        f"- Server starts: {t['startup_s'] / 60:.1f} min until ready, of which torch.compile "
        f"{t['compile_s'] / 60:.1f} min (as the logs state it).",
    ]


def load_tune_records(results_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(results_dir).rglob("tune.toml")):
        try:
            out.append(results.read_toml(path))
        except (OSError, ValueError):
            continue  # a damaged record is not shown; the cells still are
    return out


def tune_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for r in records:
        st = r.get("settings", {})
        out += [
            f"- Adaptive (`spark-agent tune`): {len(r.get('steps', []))} cell runs in "
            f"{float(r.get('elapsed_s', 0.0)) / 60:.1f} min; confidence {st.get('confidence', '?')} over at most "
            f"{st.get('looks', '?')} looks per point (Bonferroni: {float(st.get('look_alpha', 0.0)):.3g} each), "
            f"{st.get('min_repeats', '?')}–{st.get('max_repeats', '?')} windows, carry margin "
            f"{st.get('carry_margin', '?')}x.",
        ]
        for s in r.get("stopped", []):
            out.append(f"- Stopped after screening: {md(str(s.get('label', '')))} — {md(str(s.get('reason', '')))}")
        for s in r.get("skipped", []):
            out.append(f"- Skipped (cannot change the recommendation): {md(str(s.get('label', '')))} — "
                       f"{md(str(s.get('reason', '')))}")  # fmt: skip
        for p in r.get("open_points", []):
            out.append(f"- Undecided: {md(str(p))}")
        for p in r.get("tied", []):
            out.append(f"- Tied at the spec's schedule (undecided: the verdict above says its price): {md(str(p))}")
        for b in r.get("budget_left", []):
            out.append(f"- Not run, budget spent: {md(str(b))}")
        if r.get("interrupted"):
            out.append("- Interrupted: re-run `spark-agent tune` to resume.")
    return out
