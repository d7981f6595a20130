"""The report's load-side sections: latency percentiles and goodput per point, and the rate sweep.

A cell's load axes (request rate, context depth) vary inside it; summary.load_slices gives a summary per (rate, depth).
The medians table stays compact (a column per load dimension that varies, goodput when SLOs were set); the tails
(p50/p90/p95/p99 of TTFT, TPOT, ITL and E2EL) go to a detailed table here, and a rate sweep gets its own table:
what each offered rate was served at, its TTFT, and where the server stopped keeping up (loadgen.saturated, the
rule the load driver itself uses).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.escape import md
from agent.hostside import loadgen, loadpoints
from agent.judging import stats, summary
from agent.judging.summary import CellSummary, Stat

LOAD_COLUMNS: tuple[tuple[str, Callable[[loadpoints.Point], str]], ...] = (
    ("rate req/s", lambda load: f"{load.rate:g}" if load.rate else "closed"),
    ("depth", lambda load: str(load.depth) if load.depth else "–"),
)


def varying_load(summaries: Sequence[CellSummary]) -> list[tuple[str, Callable[[loadpoints.Point], str]]]:
    """The load columns whose value differs between the summaries (none for a sweep at one load)."""
    distinct = (len({s.load.rate for s in summaries if s.points}), len({s.load.depth for s in summaries if s.points}))
    return [col for col, n in zip(LOAD_COLUMNS, distinct, strict=True) if n > 1]


def any_slo(summaries: Sequence[CellSummary]) -> bool:
    return any(summary.slos(s) for s in summaries)


def sections(summaries: Sequence[CellSummary]) -> list[str]:
    out = ["## Latency percentiles and goodput", ""] + percentile_lines(summaries) + [""]
    sweep = rate_sweep_lines(summaries)
    if sweep:
        out += ["## Rate sweep: served vs offered", ""] + sweep + [""]
    return out


def _num(st: Stat | None, digits: int = 1) -> str:
    return f"{st.median:,.{digits}f}" if st else "–"


def percentile_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """One row per point and latency measured: the median over the repeats of each percentile, ms."""
    varying = varying_load(summaries)
    slo = any_slo(summaries)
    cols = ["cell", *[name for name, _ in varying], "c", "latency", *summary.PERCENTILES]
    cols += ["goodput req/s", "SLOs"] if slo else []
    rows = []
    for s in summaries:
        name = f"{s.cell.get('host', '?')}/{s.checkpoint}/{s.backend_text}"
        for c, p in s.points.items():
            goodput = p.tails.get(summary.GOODPUT) if summary.slos(s) else None
            for latency in summary.LATENCIES:
                tails = [p.tails.get(summary.percentile_key(q, latency)) for q in summary.PERCENTILES]
                if not any(tails):
                    continue
                row = [name, *[value(s.load) for _, value in varying], str(c), latency.upper()]
                row += [_num(t) for t in tails]
                if slo:
                    row += [_num(goodput, 2), " ".join(summary.slos(s)) or "none"] if latency == "ttft" else ["", ""]
                rows.append(row)
    if not rows:
        return ["No window carries latency percentiles."]
    head = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    notes = [
        "",
        "Each figure is the median over the successful repeats of that window percentile, ms (p50 is the window's"
        " median). Goodput: completed requests per second that met every SLO (`vllm bench serve --goodput`),"
        + (" shown where the sweep set SLOs." if slo else " not shown: no cell set SLOs ([load] goodput)."),
    ]
    return head + ["| " + " | ".join(md(x) for x in r) + " |" for r in rows] + notes


@dataclass(frozen=True)
class RatePoint:
    rate: float  # offered requests/s
    served: float | None  # median completed requests/s over the successful repeats
    throughput: Stat | None
    ttft_p50: Stat | None
    ttft_p99: Stat | None
    saturated: bool  # loadgen.saturated: served below SATURATED x rate, or requests that never started


@dataclass(frozen=True)
class RateSweep:
    """One configuration at one depth and concurrency cap, measured at several offered rates."""

    host: str
    name: str  # checkpoint/backend (and variant)
    concurrency: int
    depth: int
    points: tuple[RatePoint, ...]

    @property
    def saturated_at(self) -> float | None:
        return next((p.rate for p in self.points if p.saturated), None)

    @property
    def title(self) -> str:
        cap = f"at most {self.concurrency} in flight" if self.concurrency else "no cap"
        return f"{self.host}/{self.name} ({cap}" + (f", depth {self.depth})" if self.depth else ")")


def rate_sweeps(summaries: Sequence[CellSummary]) -> list[RateSweep]:
    """Per configuration measured at several offered rates (one cell's rate axis, or cells that differ only in
    their rate), per depth and concurrency cap: each rate's served requests/s, output tok/s and TTFT."""
    groups: dict[tuple[str, int, int], list[CellSummary]] = {}
    for s in summaries:
        if not s.load.rate or s.verdict == "failed":
            continue
        key = stats.pairing_key(s.cell, "request_rate")  # a slice's [config] says its one rate: skipped here
        for c in s.points:
            groups.setdefault((key, s.load.depth, c), []).append(s)
    out = []
    for (_, depth, c), members in groups.items():
        if len({s.load.rate for s in members}) < 2:
            continue
        points = []
        for s in sorted(members, key=lambda m: m.load.rate):
            windows = [r for r in s.cell.get("runs", []) if loadpoints.of_window(r).concurrency == c]
            ok = [r for r in windows if r.get("ok")]
            served = statistics.median(float(r.get("request_throughput", 0.0)) for r in ok) if ok else None
            p = s.points[c]
            points.append(
                RatePoint(
                    rate=s.load.rate,
                    served=served,
                    throughput=p.throughput,
                    ttft_p50=p.tails.get("median_ttft_ms"),
                    ttft_p99=p.tails.get("p99_ttft_ms"),
                    saturated=loadgen.saturated(_windows(windows), s.load.rate),
                )
            )
        first = members[0]
        out.append(
            RateSweep(
                str(first.cell.get("host", "?")), f"{first.checkpoint}/{first.backend_text}", c, depth, tuple(points)
            )
        )
    return out


def rate_sweep_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """A table per rate sweep: served vs offered, TTFT, and the first rate the server could not keep up with."""
    out: list[str] = []
    for sweep in rate_sweeps(summaries):
        out += [
            f"**{md(sweep.title)}**",
            "",
            "| offered req/s | served req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | |",
            "|---|---|---|---|---|---|",
        ]
        for p in sweep.points:
            served = f"{p.served:,.2f}" if p.served is not None else "–"
            out.append(
                f"| {p.rate:g} | {served} | {_num(p.throughput)} | {_num(p.ttft_p50)} | {_num(p.ttft_p99)} "
                f"| {'**saturated**' if p.saturated else ''} |"
            )
        at = sweep.saturated_at
        out += [
            "",
            f"Saturates at {at:g} req/s: the first offered rate served below {loadgen.SATURATED:.0%} of it, or with "
            "requests that never started."
            if at is not None
            else "Kept up with every offered rate.",
            "",
        ]
    return out


def rate_plot(summaries: Sequence[CellSummary]) -> dict[str, bytes]:
    """rate_sweep.png: served requests/s and TTFT p50 against the offered rate, a line per sweep, a cross where it
    saturated; {} when nothing was measured at several rates."""
    sweeps = rate_sweeps(summaries)
    if not sweeps:
        return {}
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (served_ax, ttft_ax) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    top = max(p.rate for sw in sweeps for p in sw.points)
    served_ax.plot([0, top], [0, top], ":", color="grey", label="served = offered")
    for i, sw in enumerate(sweeps):
        colour, label = f"C{i % 10}", _short(sw.title)
        rates = [p.rate for p in sw.points]
        served_ax.plot(rates, [p.served or 0.0 for p in sw.points], "o-", color=colour, label=label)
        ttft_ax.plot(rates, [p.ttft_p50.median if p.ttft_p50 else float("nan") for p in sw.points], "o-", color=colour)
        bad = [p for p in sw.points if p.saturated]
        served_ax.scatter([p.rate for p in bad], [p.served or 0.0 for p in bad], marker="x", s=120, color=colour)
    served_ax.set(xlabel="offered requests/s", ylabel="served requests/s (median)", title="Served vs offered")
    ttft_ax.set(xlabel="offered requests/s", ylabel="TTFT p50, ms (median)", title="TTFT vs offered rate")
    for ax in (served_ax, ttft_ax):
        ax.grid(True, alpha=0.3)
    served_ax.legend(fontsize="small" if len(sweeps) <= 6 else "xx-small")
    fig.suptitle("Rate sweep (x: saturated)", fontsize="medium")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return {"rate_sweep.png": buf.getvalue()}


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2) :]


def _windows(runs: list[dict[str, Any]]) -> Any:
    """The stored windows as loadgen.saturated reads them (ok, request_throughput, missed_starts)."""
    return [
        {
            "ok": bool(r.get("ok")),
            "request_throughput": float(r.get("request_throughput", 0.0)),
            "missed_starts": r.get("missed_starts", 0),
        }
        for r in runs
    ]
