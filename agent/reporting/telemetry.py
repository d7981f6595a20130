"""The report's telemetry parts: energy next to throughput, the server's view (KV cache, preemptions, queue),
throttling, the caveat under a recommendation built on throttled windows, and the power/temperature timelines.
Numbers come from judging/telemetry.py; everything shown is escaped (escape.md), since hosts wrote it."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.escape import md
from agent.judging import telemetry as tj

if TYPE_CHECKING:
    from agent.judging.stats import Recommendation
    from agent.judging.summary import CellSummary

MAX_TIMELINE_PLOTS = 24  # cells; a sweep of more gets the first ones (their windows are in the export anyway)

ENERGY_COLUMNS = [
    "host",
    "checkpoint",
    "backend",
    "c",
    "tok/s (median)",
    "J/token",
    "tok/J",
    "power W (mean / max)",
    "temp max °C",
    "SM MHz",
    "KV max",
    "preemptions",
    "waiting max",
    "throttled",
]


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def energy_table(summaries: Sequence[CellSummary]) -> list[str]:
    """Energy per token next to throughput, and the server's gauges, per point with telemetry."""
    rows = []
    for s in summaries:
        per_point = tj.cell_telemetry(s.cell)
        for c, p in s.points.items():
            t = per_point.get(c)
            if t is None or (not t.windows and t.kv_usage_max is None):
                continue
            clocks = f"{t.sm_clock_range[0]:.0f}–{t.sm_clock_range[1]:.0f}" if t.sm_clock_range else "–"
            kv = "–" if t.kv_usage_max is None else f"{100 * t.kv_usage_max:.0f}%"
            flag = f"YES ({', '.join(t.throttle_reasons)})" if t.throttled else "no" if t.windows else "–"
            rows.append(
                [
                    s.cell.get("host", ""),
                    s.checkpoint,
                    s.backend,
                    str(c),
                    _n(p.throughput.median if p.throughput else None),
                    _n(t.joules_per_token, 3),
                    _n(t.tokens_per_joule, 2),
                    f"{_n(t.power_mean_w)} / {_n(t.power_max_w)}",
                    _n(t.temp_max_c, 0),
                    clocks,
                    kv,
                    _n(t.preemptions, 0),
                    _n(t.waiting_max, 0),
                    flag,
                ]
            )
    if not rows:
        return []
    head = "| " + " | ".join(ENERGY_COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in ENERGY_COLUMNS) + "|"
    return [head, rule] + ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]


def no_telemetry_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Cells measured without GPU telemetry, and why (a host without nvidia-smi is not an error)."""
    out = []
    for s in summaries:
        notes = sorted({t.no_telemetry for t in tj.cell_telemetry(s.cell).values() if t.no_telemetry})
        if notes and s.points:
            out.append(
                f"- {md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend)}: {md('; '.join(notes))}"
            )
    return out


def throttling_lines(summaries: Sequence[CellSummary]) -> list[str]:
    out = []
    for s in summaries:
        for t in tj.throttled_points(s.cell):
            out.append(
                f"- **THROTTLED** {md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend)} c={t.concurrency}: "
                f"{t.throttled_windows} of {t.windows} window(s) above {t.threshold:g}% of their time "
                f"(worst {t.throttle_share_max:.0f}%), reasons: {md(', '.join(t.throttle_reasons))}; "
                f"max {_n(t.temp_max_c, 0)} °C, SM clock down to {_n(t.sm_clock_range[0] if t.sm_clock_range else None, 0)} MHz. "
                "Its median is not the backend's number."
            )
    return out


def not_gpu_bound_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Per point, its windows whose mean GPU utilisation was below tj.GPU_BOUND_PCT (only where telemetry was read)."""
    out = []
    for s in summaries:
        for t in not_gpu_bound(s):
            if t.not_gpu_bound:
                said = ", ".join(f"r{k} {u:.0f}%" for k, u in t.not_gpu_bound)
                out.append(
                    f"- {md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend)} c={t.concurrency}: "
                    f"{len(t.not_gpu_bound)} of {t.windows} window(s) not GPU-bound ({md(said)} mean utilisation)"
                )
    return out


def cooldown_lines(summaries: Sequence[CellSummary]) -> list[str]:
    out = []
    for s in summaries:
        for run in s.cell.get("runs", []):
            tele = run.get("telemetry")
            if isinstance(tele, dict) and tele.get("cooldown_s", 0) > 0:
                out.append(
                    f"- {md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend)} before c={run.get('concurrency')}: "
                    f"waited {tele['cooldown_s']:.1f} s ({md(str(tele.get('cooldown_note', '')))})"
                )
    return out


def token_check_lines(summaries: Sequence[CellSummary]) -> list[str]:
    return [
        f"- {md(s.cell.get('host', '?'))} · {md(s.checkpoint)} · {md(s.backend)} c={t.concurrency} {md(d)}"
        for s in summaries
        for t in tj.cell_telemetry(s.cell).values()
        for d in t.token_disagreements
    ]


def sections(summaries: Sequence[CellSummary]) -> list[str]:
    """The report's telemetry sections, after the medians."""
    out = ["## Energy and the server's view", ""]
    table = energy_table(summaries)
    out += (table or ["No window carries GPU telemetry."]) + [""]
    missing = no_telemetry_lines(summaries)
    if missing:
        out += ["No GPU telemetry for:", ""] + missing + [""]
    out += ["## Throttling", ""] + (throttling_lines(summaries) or ["None."]) + [""]
    cooled = cooldown_lines(summaries)
    if cooled:
        out += ["Cool-down before cells:", ""] + cooled + [""]
    idle = not_gpu_bound_lines(summaries)  # only points with telemetry: none read, nothing said
    if idle:
        out += ["## Windows not GPU-bound", ""]
        out += (
            [
                f"Mean GPU utilisation below {tj.GPU_BOUND_PCT:.0f}% during the window: the host's CPU (scheduler, API "
                "server, load driver), not the GPU, bounded it, so its tok/s says more about the host than about the "
                "kernels being compared (a small or dummy model, a shared VM).",
                "",
            ]
            + idle
            + [""]
        )
    out += ["## Server vs client token counts", ""]
    out += (token_check_lines(summaries) or ["Every window agrees within the cut-request bound."]) + [""]
    return out


def throttled(s: CellSummary) -> list:
    """The cell's throttled points (its windows above the threshold), for the report's Problems count."""
    return list(tj.throttled_points(s.cell))


def not_gpu_bound(s: CellSummary) -> list:
    """The cell's points with windows below tj.GPU_BOUND_PCT mean GPU utilisation (telemetry read)."""
    return [t for t in tj.cell_telemetry(s.cell).values() if t.not_gpu_bound]


def point_throttled(cell: dict, concurrency: int) -> bool:
    """For the medians table's flags column."""
    return any(t.concurrency == concurrency for t in tj.throttled_points(cell))


def recommendation_caveat(rec: Recommendation) -> list[str]:
    """Said under a recommendation whose winning cells have throttled points: never silently built on them."""
    lines = []
    for s in rec.winner_cells:
        for t in tj.throttled_points(s.cell):
            lines.append(
                f"- **Caution: built on throttled windows**: {md(s.checkpoint)} c={t.concurrency} "
                f"({md(', '.join(t.throttle_reasons))}, up to {t.throttle_share_max:.0f}% of a window); see Throttling."
            )
    return lines + [""] if lines else []


# ---------------------------------------------------------------- timelines


def render_timelines(summaries: Sequence[CellSummary]) -> dict[str, bytes]:
    """telemetry-<cell>.png per cell with telemetry: power and temperature over its windows, laid end to end,
    throttled samples marked."""
    images: dict[str, bytes] = {}
    for s in summaries:
        if len(images) >= MAX_TIMELINE_PLOTS:
            break
        series = tj.timelines(s.cell)
        if series:
            images[f"telemetry-{s.cell.get('cell_id', 'cell')}.png"] = _timeline_plot(s, series)
    return images


def _timeline_plot(s: CellSummary, series: list[tuple[str, dict[str, list[float]]]]) -> bytes:
    import matplotlib.pyplot as plt

    fig, power_ax = plt.subplots(figsize=(10, 3.2))
    temp_ax = power_ax.twinx()
    offset = 0.0
    for name, line in series:
        t = [offset + x for x in line.get("t_s", [])]
        power = line.get("power_w", [])
        temp = line.get("temp_c", [])
        power_ax.plot(t, [p if p >= 0 else float("nan") for p in power], color="C0", lw=1)
        temp_ax.plot(t, [c if c >= 0 else float("nan") for c in temp], color="C3", lw=1)
        hot = [(x, p) for x, p, th in zip(t, power, line.get("throttled", []), strict=False) if th > 0 and p >= 0]
        if hot:
            power_ax.scatter([x for x, _ in hot], [p for _, p in hot], color="black", marker="x", s=12, zorder=3)
        power_ax.axvline(offset, color="#bbb", lw=0.5)
        power_ax.text(offset, 0.98, name, transform=power_ax.get_xaxis_transform(), fontsize=6, va="top")
        offset = (t[-1] if t else offset) + 1.0
    power_ax.set_ylabel("power W", color="C0")
    temp_ax.set_ylabel("temperature °C", color="C3")
    power_ax.set_xlabel("seconds of measurement (windows end to end; x = throttled sample)")
    fig.suptitle(f"{s.cell.get('host', '?')} · {s.checkpoint} · {s.backend}", fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.93, bottom=0.17, top=0.88)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()
