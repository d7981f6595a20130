"""The report's load-side sections: latency percentiles and goodput per point, and the rate sweep.

A cell's load axes (request rate, context depth) vary inside it; stats.load_slices gives a summary per (rate, depth).
The medians table stays compact (a column per load dimension that varies, goodput when SLOs were set); the tails
(p50/p90/p95/p99 of TTFT, TPOT, ITL and E2EL) go to a detailed table here, and a rate sweep gets its own table:
what each offered rate was served at, its TTFT, and where the server stopped keeping up (loadgen.saturated, the
rule the load driver itself uses).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from agent.hostside import loadgen, loadpoints
from agent.judging import stats
from agent.judging.stats import CellSummary, Stat
from agent.reporting.escape import md

LOAD_COLUMNS: tuple[tuple[str, Callable[[loadpoints.Point], str]], ...] = (
    ("rate req/s", lambda load: f"{load.rate:g}" if load.rate else "closed"),
    ("depth", lambda load: str(load.depth) if load.depth else "–"),
)


def varying_load(summaries: Sequence[CellSummary]) -> list[tuple[str, Callable[[loadpoints.Point], str]]]:
    """The load columns whose value differs between the summaries (none for a sweep at one load)."""
    distinct = (len({s.load.rate for s in summaries if s.points}), len({s.load.depth for s in summaries if s.points}))
    return [col for col, n in zip(LOAD_COLUMNS, distinct, strict=True) if n > 1]


def any_slo(summaries: Sequence[CellSummary]) -> bool:
    return any(stats.slos(s) for s in summaries)


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
    cols = ["cell", *[name for name, _ in varying], "c", "latency", *stats.PERCENTILES]
    cols += ["goodput req/s", "SLOs"] if slo else []
    rows = []
    for s in summaries:
        name = f"{s.cell.get('host', '?')}/{s.checkpoint}/{s.backend_text}"
        for c, p in s.points.items():
            goodput = p.tails.get(stats.GOODPUT) if stats.slos(s) else None
            for latency in stats.LATENCIES:
                tails = [p.tails.get(stats.percentile_key(q, latency)) for q in stats.PERCENTILES]
                if not any(tails):
                    continue
                row = [name, *[value(s.load) for _, value in varying], str(c), latency.upper()]
                row += [_num(t) for t in tails]
                if slo:
                    row += [_num(goodput, 2), " ".join(stats.slos(s)) or "none"] if latency == "ttft" else ["", ""]
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


def rate_sweep_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Per configuration measured at several offered rates (one cell's rate axis, or cells that differ only in
    their rate): per depth and concurrency cap, each rate's served requests/s, output tok/s and TTFT, and the first
    rate the server could not keep up with."""
    groups: dict[tuple[str, int, int], list[tuple[CellSummary, int]]] = {}
    for s in summaries:
        if not s.load.rate or s.verdict == "failed":
            continue
        key = stats.pairing_key(s.cell, "request_rate")
        for c in s.points:
            groups.setdefault((key, s.load.depth, c), []).append((s, c))
    out: list[str] = []
    for members in groups.values():
        if len({s.load.rate for s, _ in members}) < 2:
            continue
        first, c = members[0]
        depth = f", depth {first.load.depth}" if first.load.depth else ""
        cap = f"at most {c} in flight" if c else "no cap"
        out += [
            f"**{md(first.cell.get('host', '?'))}/{md(first.checkpoint)}/{md(first.backend_text)}** ({cap}{depth})",
            "",
            "| offered req/s | served req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | |",
            "|---|---|---|---|---|---|",
        ]
        saturated_at = None
        for s, _ in sorted(members, key=lambda m: m[0].load.rate):
            windows = [r for r in s.cell.get("runs", []) if loadpoints.of_window(r).concurrency == c]
            ok = [r for r in windows if r.get("ok")]
            served = statistics.median(float(r.get("request_throughput", 0.0)) for r in ok) if ok else None
            past = loadgen.saturated(_windows(windows), s.load.rate)
            if past and saturated_at is None:
                saturated_at = s.load.rate
            p = s.points[c]
            out.append(
                f"| {s.load.rate:g} | {f'{served:,.2f}' if served is not None else '–'} | {_num(p.throughput)} "
                f"| {_num(p.tails.get('median_ttft_ms'))} | {_num(p.tails.get('p99_ttft_ms'))} "
                f"| {'**saturated**' if past else ''} |"
            )
        out += [
            "",
            f"Saturates at {saturated_at:g} req/s: the first offered rate served below "
            f"{loadgen.SATURATED:.0%} of it, or with requests that never started."
            if saturated_at is not None
            else "Kept up with every offered rate.",
            "",
        ]
    return out


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
