"""The report's PNG plots: throughput, TTFT and TPOT against concurrency, one panel per checkpoint, one line per
backend, min–max bars at every point (plus loadreport's rate plot and telemetry's timelines)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from agent.judging import stats, summary
from agent.judging.judgement import Judgement
from agent.judging.summary import CellSummary, Stat
from agent.planning.matrix import BACKEND_FIELDS
from agent.reporting import loadreport
from agent.reporting import telemetry as telemetry_report

PLOTS = {  # file name → (title, y label, which Stat of a point)
    "throughput.png": ("Output throughput vs concurrency", "output tok/s (median, min–max bars)", "throughput"),
    "ttft.png": ("TTFT vs concurrency", "median TTFT, ms", "ttft"),
    "tpot.png": ("TPOT vs concurrency", "median TPOT, ms", "tpot"),
}


def render_plots(data: Judgement) -> dict[str, bytes]:
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
        st = summary.describe([v for p in points for v in getattr(p, attr).values])
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
