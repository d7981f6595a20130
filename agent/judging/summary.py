"""A cell's summary: its points (the repeats of each concurrency: median, spread, unstable), its verdict, its
server starts merged and its load slices. Pure functions over cell dicts (see agent.results.tree.load_cells): no I/O.

Ranking (agent.judging.stats) and the host effects (agent.judging.hosteffect) both read these summaries; this module
imports neither, so the two never import each other.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.hostside import loadpoints
from agent.judging import correctness, nested
from agent.planning.matrix import SCHEDULE_FIELDS, backend_label, start_key

DEFAULT_THRESHOLD = 0.10  # spread above which a point is unstable
RANK_METRIC = "output_throughput"

# ---------------------------------------------------------------- one point: repeats of one concurrency


@dataclass(frozen=True)
class Stat:
    values: tuple[float, ...]
    median: float
    lo: float
    hi: float
    spread: float  # (hi - lo) / median


@dataclass(frozen=True)
class FailedRun:
    concurrency: int
    repeat: int
    error: str


@dataclass(frozen=True)
class Point:
    concurrency: int
    throughput: Stat | None  # None when every repeat failed
    ttft: Stat | None
    tpot: Stat | None
    failed: tuple[FailedRun, ...]
    unstable: bool
    ranked: Stat | None = None  # the metric the report ranks by (--rank-by); None: no repeat carries it
    # window key -> its repeats (PERCENTILE_KEYS, request_goodput): the report's detailed table; only keys measured
    tails: dict[str, Stat] = field(default_factory=dict)
    jit_dropped: tuple[int, ...] = ()  # repeats whose server log showed a JIT compile: flagged, never ranked
    starts: tuple[tuple[float, ...], ...] = ()  # the ranked metric's windows grouped by server start

    @property
    def noise(self) -> nested.Nested:
        """Between-start and between-window variance of this point (judging/nested.py)."""
        return nested.estimate(self.starts or (self.values,))

    @property
    def values(self) -> tuple[float, ...]:
        """The repeats a ranking compares: those of the ranked metric."""
        return self.ranked.values if self.ranked else ()


def spread(values: Sequence[float]) -> float:
    """(max - min) / median; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mid = statistics.median(values)
    width = max(values) - min(values)
    if mid == 0:
        return 0.0 if width == 0 else math.inf
    return width / mid


def describe(values: Sequence[float]) -> Stat | None:
    if not values:
        return None
    vals = tuple(float(v) for v in values)
    return Stat(vals, statistics.median(vals), min(vals), max(vals), spread(vals))


def summarize_point(
    concurrency: int, runs: Iterable[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD, metric: str = RANK_METRIC
) -> Point:
    """The runs of one concurrency → median + spread; failed runs are left out of the median but kept, and so are
    windows during which the server compiled kernels (`jit_lines`, hostside/steady.py): a latency spike, not the
    configuration's speed. `metric` is the window key rankings compare (a run without it gives no value)."""
    ok, failed, jit = [], [], []
    for run in sorted(runs, key=lambda r: r.get("repeat", 0)):
        if run.get("ok", True) and run.get("jit_lines", 0):
            jit.append(int(run.get("repeat", 0)))
        elif run.get("ok", True):
            ok.append(run)
        else:
            failed.append(
                FailedRun(concurrency, int(run.get("repeat", 0)), str(run.get("error", "")) or "no reason given")
            )
    throughput = describe([r.get(RANK_METRIC, 0.0) for r in ok])
    ranked = throughput if metric == RANK_METRIC else describe([float(r[metric]) for r in ok if metric in r])
    by_start: dict[int, list[float]] = {}
    for r in ok:
        if metric in r or metric == RANK_METRIC:
            by_start.setdefault(int(r.get("server_start", 1)), []).append(float(r.get(metric, 0.0)))
    return Point(
        concurrency=concurrency,
        throughput=throughput,
        # 0 means "not measured" (e.g. no request finished inside a short window), never a real latency.
        ttft=describe([r["median_ttft_ms"] for r in ok if r.get("median_ttft_ms", 0.0) > 0]),
        tpot=describe([r["median_tpot_ms"] for r in ok if r.get("median_tpot_ms", 0.0) > 0]),
        failed=tuple(failed),
        unstable=throughput is not None and throughput.spread > threshold,
        ranked=ranked,
        tails=_tails(ok),
        jit_dropped=tuple(jit),
        starts=tuple(tuple(v) for _, v in sorted(by_start.items())),
    )


# The percentiles a window holds (hostside/loadgen.summarize_window; p50 is the median), and goodput.
PERCENTILES = ("p50", "p90", "p95", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
GOODPUT = "request_goodput"


def percentile_key(q: str, latency: str) -> str:
    """The window key of one percentile: p50 is recorded as median_* (as `vllm bench serve` names it)."""
    return f"median_{latency}_ms" if q == "p50" else f"{q}_{latency}_ms"


PERCENTILE_KEYS = tuple(percentile_key(q, m) for m in LATENCIES for q in PERCENTILES)


def _tails(ok: list[dict[str, Any]]) -> dict[str, Stat]:
    """Each percentile and goodput over the successful repeats that carry it (0 ms is "no sample", never a
    latency: a window without a finished request); windows measured before issue 15 lack p90/p95."""
    out: dict[str, Stat] = {}
    for key in PERCENTILE_KEYS:
        st = describe([float(r[key]) for r in ok if float(r.get(key, 0.0) or 0.0) > 0])
        if st is not None:
            out[key] = st
    goodput = describe([float(r[GOODPUT]) for r in ok if GOODPUT in r])  # = request throughput without SLOs
    if goodput is not None:
        out[GOODPUT] = goodput
    return out


def slos(summary: CellSummary) -> list[str]:
    """The SLOs goodput was counted under ([load] goodput, as recorded in [config]); [] = none set, and then
    goodput is just the request throughput."""
    return [str(x) for x in summary.config.get("goodput", [])]


# ---------------------------------------------------------------- one cell


@dataclass(frozen=True)
class CellSummary:
    cell: dict[str, Any] = field(repr=False)
    points: dict[int, Point]
    variant: str = ""  # its values on the report's other varying axes ("env_variant=no-dg"): see with_variants
    load: loadpoints.Point = field(default_factory=loadpoints.Point)  # its request rate and context depth

    @property
    def backend_text(self) -> str:
        """The backend and, where other axes vary in the report, this cell's values on them."""
        return f"{self.backend} {self.variant}" if self.variant else self.backend

    @property
    def verdict(self) -> str:
        return cell_verdict(self.cell)

    @property
    def rankable(self) -> bool:
        return self.verdict == "valid"

    @property
    def config(self) -> dict[str, Any]:
        return self.cell.get("config", {})

    @property
    def backend(self) -> str:
        return backend_label(self.config)

    @property
    def hardware(self) -> str:
        return hardware_label(self.cell)

    @property
    def quant(self) -> str:
        return self.config.get("quant", "") or "unknown"

    @property
    def checkpoint(self) -> str:
        return self.config.get("checkpoint", "") or self.config.get("model", "") or "unknown"

    @property
    def unstable_points(self) -> list[Point]:
        return [p for p in self.points.values() if p.unstable]

    @property
    def failed_runs(self) -> list[FailedRun]:
        return [f for p in self.points.values() for f in p.failed]


def cell_verdict(cell: dict[str, Any]) -> str:
    """valid | invalid | failed | wrong output. A cell whose server never became ready is failed whatever else it
    says; a valid cell whose probe outputs are wrong (judging/correctness.py) is "wrong output": never ranked."""
    if cell.get("status") == "failed":
        return "failed"
    verdict = str(cell.get("verdict", "")).lower()
    if verdict == "valid" and correctness.wrong_reasons(cell):
        return WRONG_OUTPUT
    return verdict if verdict in ("valid", "invalid", "failed") else "invalid"


WRONG_OUTPUT = "wrong output"  # shown upper-case, as INVALID is


def not_valid(cells: Iterable[dict[str, Any]]) -> list[str]:
    """'host/cell: verdict' for each cell without a valid measurement (failed, invalid, WRONG OUTPUT): any one makes
    sweep, collect and tune exit 1 (README: exit codes). `cells` as results.load_cells reads a sweep (WRONG OUTPUT
    is judged against the whole tree)."""
    out = []
    for c in cells:
        verdict = cell_verdict(c)
        if verdict != "valid":
            why = f" ({c['failure_class']})" if verdict == "failed" and c.get("failure_class") else ""
            out.append(f"{c.get('host', '')}/{c.get('cell_id', '')}: {verdict}{why}")
    return sorted(out)


def summarize_cell(
    cell: dict[str, Any], threshold: float = DEFAULT_THRESHOLD, metric: str = RANK_METRIC
) -> CellSummary:
    """The points of a cell at one request rate and context depth (a cell with load axes: one of load_slices)."""
    by_c: dict[int, list[dict[str, Any]]] = {}
    for run in cell.get("runs", []):
        by_c.setdefault(int(run["concurrency"]), []).append(run)
    points = {c: summarize_point(c, runs, threshold, metric) for c, runs in sorted(by_c.items())}
    loads = {(p.rate, p.depth) for p in map(loadpoints.of_window, cell.get("runs", []))}
    rate, depth = loads.pop() if len(loads) == 1 else (0.0, 0)
    return CellSummary(cell, points, load=loadpoints.Point(rate, depth))


def summarize_cells(
    cells: Iterable[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD, metric: str = RANK_METRIC
) -> list[CellSummary]:
    """One summary per cell, and per (request rate, context depth) of a cell with load axes (load_slices). The
    server starts of one config on one host are one summary (merge_starts). A checks-only start ([config] probe_only:
    planning/matrix.eager_starts) has no windows: it is never summarized, so never ranked or compared (checks_only)."""
    measured = [c for c in cells if not is_checks_only(c)]
    return [summarize_cell(part, threshold, metric) for c in merge_starts(measured) for part in load_slices(c)]


def is_checks_only(cell: Mapping[str, Any]) -> bool:
    """A server start that only ran the correctness checks (the eager start of [correctness] eager_start)."""
    config = cell.get("config")
    return isinstance(config, Mapping) and bool(config.get("probe_only"))


def merge_starts(cells: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server starts of one config on one host (planning/matrix.nth_start: [config] server_start), with one
    verdict, as one cell: the first start's record, every start's windows (each tagged with its server_start),
    and `starts`: each start's cell id, start time and elapsed seconds. A start that failed, or whose verdict
    differs, stays a cell of its own (the report says so). A cell of one start reads as before."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for c in cells:
        key = (str(c.get("sweep", "")), str(c.get("host", "")), start_key(c.get("config", {})), cell_verdict(c))
        groups.setdefault(key, []).append(c)
    out = []
    for same in groups.values():
        for group in _one_per_start(same):
            group.sort(key=server_start)
            runs = [{**r, "server_start": server_start(c)} for c in group for r in c.get("runs", [])]
            merged = {**group[0], "runs": runs, "starts": [_start_of(c) for c in group]}
            out.append(merged if len(group) > 1 else group[0])
    return out


def _one_per_start(group: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Two cells of one config and the same start number are not two starts (a spec asking the same config on
    two schedules): then each schedule is its own cell."""
    if len({server_start(c) for c in group}) == len(group):
        return [group]
    split: dict[str, list[dict[str, Any]]] = {}
    for c in group:
        config = c.get("config", {})
        schedule = [config.get(k) for k in SCHEDULE_FIELDS if k != "server_start"]  # what start_key leaves out
        split.setdefault(json.dumps(schedule, default=str), []).append(c)
    return list(split.values())


def server_start(cell: dict[str, Any]) -> int:
    return int(cell.get("config", {}).get("server_start", 1))


def _start_of(cell: dict[str, Any]) -> dict[str, Any]:
    elapsed = float(cell.get("elapsed_s", 0.0) or 0.0) or float(cell.get("startup_s", 0.0) or 0.0) + float(
        cell.get("measure_s", 0.0) or 0.0
    )
    return {
        "cell_id": cell.get("cell_id", ""),
        "server_start": server_start(cell),
        "started_at": str(cell.get("started_at", "")),
        "finished_at": str(cell.get("finished_at", "")),
        "elapsed_s": elapsed,
    }


def starts_of(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """Each server start of a (merged) cell: [{cell_id, server_start, started_at, elapsed_s}]."""
    return cell.get("starts") or [_start_of(cell)]


LOAD_LISTS = ("request_rates", "context_depths")


def load_slices(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """A cell whose windows span several request rates or context depths (the load axes inside a cell), as one
    cell per (rate, depth): its windows there, and a [config] that reads as a cell measured at that one rate and
    depth. Every question is then ranked within the load held equal (the load keys are in the pairing key), and
    such a slice compares with a cell that was given that rate alone. A cell of one load point is itself."""
    groups: dict[tuple[float, int], list[dict[str, Any]]] = {}
    for run in cell.get("runs", []):
        p = loadpoints.of_window(run)
        groups.setdefault((p.rate, p.depth), []).append(run)
    if len(groups) <= 1:
        return [cell]
    out = []
    for (rate, depth), runs in sorted(groups.items()):
        config = {k: v for k, v in cell.get("config", {}).items() if k not in LOAD_LISTS}
        for key, value in (("request_rate", rate), ("context_depth", depth)):
            config.pop(key, None)
            if value:  # at its default the key is left out, as a cell planned at that load records it
                config[key] = value
        out.append({**cell, "config": config, "runs": runs, "load_slice": True, "whole_config": cell.get("config", {})})
    return out


def whole_cell(s: CellSummary) -> dict[str, Any]:
    """The cell a summary came from, with its own [config] (a load slice's says the one rate and depth)."""
    return {**s.cell, "config": s.cell["whole_config"]} if s.cell.get("load_slice") else s.cell


def distinct_cells(summaries: Iterable[CellSummary]) -> list[CellSummary]:
    """The first summary of each cell: what is said once per cell (its verdict, failure, startup, time) is said
    once, however many load slices it has."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for s in summaries:
        key = (str(s.cell.get("sweep", "")), str(s.cell.get("host", "")), str(s.cell.get("cell_id", "")))
        if key not in seen or not s.cell.get("cell_id"):
            seen.add(key)
            out.append(s)
    return out


def load_text(load: loadpoints.Point) -> str:
    """ "2 req/s, depth 8192": a slice's load in words; "" for a closed loop at the [load] lengths."""
    parts = ([f"{load.rate:g} req/s"] if load.rate else []) + ([f"depth {load.depth}"] if load.depth else [])
    return ", ".join(parts)


def hardware_label(cell: dict[str, Any]) -> str:
    facts = cell.get("facts", {})
    name = facts.get("arch") or facts.get("gpu_name") or "unknown hardware"
    return f"{name} (simulated)" if facts.get("simulated") else name


def logged_version(cell: dict[str, Any]) -> str:
    """The vLLM version the cell's server log gave ("" when it said none)."""
    return str((cell.get("attestation") or {}).get("vllm_version", "") or "")


def comparable(cell: dict[str, Any]) -> str:
    """What must be equal for two hosts' measurements of one cell to be replicas: the host's facts fingerprint and
    the vLLM version its server logged (the image digest is one per sweep: provisioning refuses any other)."""
    return f"{cell.get('facts', {}).get('fingerprint', '')}/{logged_version(cell)}"
