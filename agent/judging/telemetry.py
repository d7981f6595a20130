"""What the GPU and the server did at each point (cell x concurrency), from the windows' `telemetry` and `server`
tables (hostside/telemetry.py). Pure functions over cell dicts, like stats.py.

A window is throttled when a power or thermal clocks-event reason was active for more than the spec's share of it
(the host judged it with that threshold and recorded both). A point is throttled when any of its successful
windows was: its median is then not the backend's number, and the report says so wherever it uses it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

KV_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class PointTelemetry:
    concurrency: int
    windows: int  # successful windows with telemetry
    no_telemetry: str  # why there is none ("" when there is)
    throttled_windows: int
    throttle_reasons: tuple[str, ...]
    throttle_share_max: float  # % of a window, the worst one
    threshold: float  # %
    joules_per_token: float | None  # median over windows
    tokens_per_joule: float | None
    power_mean_w: float | None
    power_max_w: float | None
    temp_max_c: float | None
    sm_clock_range: tuple[float, float] | None
    kv_usage_max: float | None  # 0..1
    preemptions: float | None  # sum over the windows
    waiting_max: float | None
    token_disagreements: list[str]  # "r2: server 1900 vs client 1200 (bound 300)"
    # (repeat, mean GPU utilisation %) of each window below GPU_BOUND_PCT: the host, not the GPU, bounded it
    not_gpu_bound: tuple[tuple[int, float], ...] = ()

    @property
    def throttled(self) -> bool:
        return self.throttled_windows > 0


GPU_BOUND_PCT = 90.0  # mean utilisation below which a window measured the host's CPU more than the GPU


def _ok_runs(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if r.get("ok", True)]


def _median(values: Sequence[float]) -> float | None:
    known = [v for v in values if v >= 0]
    return statistics.median(known) if known else None


def _max(values: Sequence[float]) -> float | None:
    known = [v for v in values if v >= 0]
    return max(known) if known else None


def point_telemetry(concurrency: int, runs: Sequence[dict[str, Any]]) -> PointTelemetry:
    ok = _ok_runs(runs)
    tele = [r["telemetry"] for r in ok if isinstance(r.get("telemetry"), dict)]
    seen = [t for t in tele if t.get("available")]
    notes = sorted({str(t.get("note", "")) for t in tele if not t.get("available") and t.get("note")})
    if not tele:
        notes = ["no telemetry recorded (results from before the sampler, or a host that ran none)"]
    reasons: list[str] = []
    for t in seen:
        reasons += [r for r in t.get("throttle_reasons", []) if r not in reasons]
    throttled = [t for t in seen if t.get("throttled")]
    servers = [r["server"] for r in ok if isinstance(r.get("server"), dict) and r["server"].get("scraped")]
    gauges = [s.get("gauges", {}) for s in servers]
    disagreements = [
        f"r{r.get('repeat', '?')}: server {r['server'].get('server_generation_tokens', 0):.0f} vs client "
        f"{r['server'].get('client_output_tokens', 0)} (bound {r['server'].get('token_bound', 0):.0f})"
        for r in ok
        if isinstance(r.get("server"), dict) and r["server"].get("tokens_disagree")
    ]
    sm_lo = [t["sm_clock_min_mhz"] for t in seen if t.get("sm_clock_min_mhz", -1) >= 0]
    sm_hi = [t["sm_clock_max_mhz"] for t in seen if t.get("sm_clock_max_mhz", -1) >= 0]
    return PointTelemetry(
        concurrency=concurrency,
        windows=len(seen),
        no_telemetry="" if seen else ("; ".join(notes) or "no GPU telemetry"),
        throttled_windows=len(throttled),
        throttle_reasons=tuple(reasons),
        throttle_share_max=max((float(t.get("throttle_share_pct", 0.0)) for t in seen), default=0.0),
        threshold=max((float(t.get("throttle_threshold_pct", 0.0)) for t in seen), default=0.0),
        joules_per_token=_median([t.get("joules_per_output_token", -1.0) for t in seen]),
        tokens_per_joule=_median([t.get("tokens_per_watt", -1.0) for t in seen]),
        power_mean_w=_median([t.get("power_mean_w", -1.0) for t in seen]),
        power_max_w=_max([t.get("power_max_w", -1.0) for t in seen]),
        temp_max_c=_max([t.get("temp_max_c", -1.0) for t in seen]),
        sm_clock_range=(min(sm_lo), max(sm_hi)) if sm_lo and sm_hi else None,
        kv_usage_max=_max([g.get(KV_USAGE, {}).get("max", -1.0) for g in gauges]),
        preemptions=sum(s.get("deltas", {}).get(PREEMPTIONS, 0.0) for s in servers) if servers else None,
        waiting_max=_max([g.get(WAITING, {}).get("max", -1.0) for g in gauges]),
        token_disagreements=disagreements,
        not_gpu_bound=tuple(
            (int(r.get("repeat", 0)), float(r["telemetry"]["util_mean_pct"]))
            for r in ok
            if isinstance(r.get("telemetry"), dict)
            and r["telemetry"].get("available")
            and 0 <= float(r["telemetry"].get("util_mean_pct", -1.0)) < GPU_BOUND_PCT
        ),
    )


def cell_telemetry(cell: dict[str, Any]) -> dict[int, PointTelemetry]:
    by_c: dict[int, list[dict[str, Any]]] = {}
    for run in cell.get("runs", []):
        by_c.setdefault(int(run["concurrency"]), []).append(run)
    return {c: point_telemetry(c, runs) for c, runs in sorted(by_c.items())}


def throttled_points(cell: dict[str, Any]) -> list[PointTelemetry]:
    return [p for p in cell_telemetry(cell).values() if p.throttled]


def timelines(cell: dict[str, Any]) -> list[tuple[str, dict[str, list[float]]]]:
    """(window name, timeline) of each window that carries one, in order (warmups apart, named "cN warmup")."""
    out = []
    for run in sorted(cell.get("runs", []), key=lambda r: (r.get("concurrency", 0), r.get("repeat", 0))):
        c, k = run.get("concurrency", 0), run.get("repeat", 0)
        warm = run.get("warmup_telemetry")
        if isinstance(warm, dict) and warm.get("timeline", {}).get("t_s"):
            out.append((f"c{c} warmup", warm["timeline"]))
        tele = run.get("telemetry")
        if isinstance(tele, dict) and tele.get("timeline", {}).get("t_s"):
            out.append((f"c{c} r{k}", tele["timeline"]))
    return out
