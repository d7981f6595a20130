"""Was a metric measured at all? If not: why, and what would measure it. Pure: no I/O.

A window counts TPOT, end-to-end latency and goodput only over the requests that finished inside it
(hostside/loadgen.py); a closed-loop window starts its requests together, so a window shorter than one request has
none, and those keys read 0: "not measured", never a value. Goodput under SLOs also reads 0 when requests finished
but none met them. A metric that is zero or missing in every window is never ranked (a ratio of zeros says nothing);
the report says why, with the window length or SLO that would measure it, estimated from what the windows did
measure (time to first token, tokens per second per stream).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.hostside import slo

GOODPUT = "request_goodput"
WORDS = {GOODPUT: "goodput", "request_throughput": "request throughput", "median_tpot_ms": "TPOT"}
ENOUGH_REQUESTS = 2.0  # a window this many requests long gives each stream one finished request, with margin


@dataclass(frozen=True)
class Gap:
    """Why a metric has no value anywhere, and what would give it one."""

    metric: str
    why: str  # "no request finished inside any 3 s window"
    fix: str  # "a request takes about 7.4 s here (...): windows of 15 s or more (--duration 15) would measure it"
    window_s: float = 0.0  # the suggested window length, seconds (0: none to suggest)
    zero: bool = False  # measured, as 0: requests finished and none met the SLOs (a value, not a gap in the data)

    def words(self) -> str:
        what = WORDS.get(self.metric, self.metric)
        return f"{what} is not measured: {self.why}; {self.fix}"


def values(runs: Iterable[dict[str, Any]], metric: str) -> list[float]:
    """The metric's values over the successful windows that carry it."""
    return [_num(r.get(metric)) for r in runs if r.get("ok", True) and metric in r]


def measured(runs: Iterable[dict[str, Any]], metric: str) -> bool:
    """True when some successful window has a value above zero (0 is "nothing finished", never a measurement)."""
    return any(v > 0 for v in values(runs, metric))


def gap(cells: Sequence[dict[str, Any]], metric: str) -> Gap | None:
    """None when the metric was measured in some window of these cells; else why not and what would measure it."""
    runs = [r for c in cells for r in c.get("runs", []) if r.get("ok", True)]
    if not runs or measured(runs, metric):
        return None
    if not any(metric in r for r in runs):
        return Gap(metric, f"no window records {metric}", "measure again with this version of spark-agent")
    if not any(_num(r.get("completed")) > 0 for r in runs):
        return _too_short(cells, metric)
    if metric == GOODPUT:
        return _slos_unmet(cells, metric)
    if metric == "median_tpot_ms":  # finished requests of one token: no gap between tokens to time
        return Gap(metric, "every finished request had a single output token", "an output_len of 2 or more would")
    return Gap(metric, "it is zero in every window", "nothing to rank on")


def _too_short(cells: Sequence[dict[str, Any]], metric: str) -> Gap:
    durations = sorted({round(_num(r.get("duration")), 1) for c in cells for r in c.get("runs", [])} - {0.0})
    shown = "/".join(f"{d:g}" for d in durations) or "?"
    need = [t for c in cells if (t := request_seconds(c)) is not None]
    why = f"no request finished inside any {shown} s window"
    if not need:
        return Gap(metric, why, "longer windows (--duration) or a shorter output_len would measure it")
    longest = max(need)
    window = float(math.ceil(ENOUGH_REQUESTS * longest))
    fix = (
        f"a request here takes up to about {longest:.1f} s (time to first token, then its output tokens at the "
        f"measured tokens/s per stream): windows of {window:g} s or more (--duration {window:g}) would measure it"
    )
    return Gap(metric, why, fix, window)


def request_seconds(cell: dict[str, Any]) -> float | None:
    """How long one request of this cell takes, from its windows: median TTFT + output_len / (tok/s per stream).
    The longest over its points (higher concurrency: slower streams); None when nothing was measured."""
    output_len = _num(cell.get("config", {}).get("output_len"))
    out = []
    for r in cell.get("runs", []):
        streams = max(1.0, _num(r.get("max_concurrent_requests")) or _num(r.get("concurrency")))
        per_stream = _num(r.get("output_throughput")) / streams
        if r.get("ok", True) and per_stream > 0 and output_len > 0:
            out.append(_num(r.get("median_ttft_ms")) / 1000.0 + output_len / per_stream)
    return max(out) if out else None


def _slos_unmet(cells: Sequence[dict[str, Any]], metric: str) -> Gap:
    """Requests finished, none met every SLO: the SLOs, and the best median each latency reached."""
    given = sorted({str(x) for c in cells for x in c.get("config", {}).get("goodput", [])})
    why = f"no finished request met every SLO ({', '.join(given)})" if given else "no finished request counted"
    try:
        bounds = slo.parse(given)
    except slo.SloError:
        bounds = {}
    reached = []
    for key, bound in bounds.items():
        best = [v for c in cells for r in c.get("runs", []) if (v := _num(r.get(f"median_{key}_ms"))) > 0]
        if best and min(best) > bound:
            reached.append(f"{key}:{math.ceil(min(best))} (best median {min(best):.0f} ms against {bound:g} ms)")
    fix = (
        f"the fastest point reached {', '.join(reached)}: SLOs at or above those would count its requests"
        if reached
        else "looser SLOs would count requests"
    )
    return Gap(metric, why, fix, zero=bool(given))


def gaps_by_point(cells: Sequence[dict[str, Any]], metric: str) -> list[tuple[dict[str, Any], int, Gap]]:
    """(cell, concurrency, gap) for each point whose windows have the metric nowhere: the report names them."""
    out = []
    for c in cells:
        by_c: dict[int, list[dict[str, Any]]] = {}
        for r in c.get("runs", []):
            by_c.setdefault(int(r.get("concurrency", 0)), []).append(r)
        for level, runs in sorted(by_c.items()):
            found = gap([{**c, "runs": runs}], metric)
            if found is not None:
                out.append((c, level, found))
    return out


def _num(value: Any) -> float:
    try:
        out = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return out if math.isfinite(out) else 0.0
