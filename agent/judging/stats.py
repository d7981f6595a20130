"""Medians, spread and honest ranking. Pure functions over cell dicts (see agent.results.tree.load_cells): no I/O.

The method (from the article): warmup + N measured repeats per (cell, concurrency); the reported value is the
median of the repeats that succeeded; spread = (max - min) / median, and a point whose spread exceeds the threshold
is flagged unstable. A beats B only when their repeat ranges do not overlap, or when a seeded bootstrap confidence
interval on the ratio of medians excludes 1. Anything else is "cannot rank": never an order inside the noise.
Cells whose verdict is not "valid" never rank.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.planning.matrix import BACKEND_FIELDS, backend_label

DEFAULT_THRESHOLD = 0.10  # spread above which a point is unstable
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
MIN_REPEATS = 2  # one value says nothing about noise, so it cannot rank

RANK_METRIC = "output_throughput"
LATENCY_METRICS = ("median_ttft_ms", "median_tpot_ms")
# Config keys that describe the sweep's schedule, not the configuration being measured.
SCHEDULE_FIELDS = ("concurrency", "warmup", "repeats")

CANNOT_RANK = "cannot rank"


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

    @property
    def values(self) -> tuple[float, ...]:
        return self.throughput.values if self.throughput else ()


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


def summarize_point(concurrency: int, runs: Iterable[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD) -> Point:
    """The runs of one concurrency → median + spread; failed runs are left out of the median but kept."""
    ok, failed = [], []
    for run in sorted(runs, key=lambda r: r.get("repeat", 0)):
        if run.get("ok", True):
            ok.append(run)
        else:
            failed.append(
                FailedRun(concurrency, int(run.get("repeat", 0)), str(run.get("error", "")) or "no reason given")
            )
    throughput = describe([r.get(RANK_METRIC, 0.0) for r in ok])
    return Point(
        concurrency=concurrency,
        throughput=throughput,
        # 0 means "not measured" (e.g. no request finished inside a short window), never a real latency.
        ttft=describe([r["median_ttft_ms"] for r in ok if r.get("median_ttft_ms", 0.0) > 0]),
        tpot=describe([r["median_tpot_ms"] for r in ok if r.get("median_tpot_ms", 0.0) > 0]),
        failed=tuple(failed),
        unstable=throughput is not None and throughput.spread > threshold,
    )


# ---------------------------------------------------------------- one cell


@dataclass(frozen=True)
class CellSummary:
    cell: dict[str, Any] = field(repr=False)
    points: dict[int, Point]

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
    """valid | invalid | failed. A cell whose server never became ready is failed whatever else it says."""
    if cell.get("status") == "failed":
        return "failed"
    verdict = str(cell.get("verdict", "")).lower()
    return verdict if verdict in ("valid", "invalid", "failed") else "invalid"


def summarize_cell(cell: dict[str, Any], threshold: float = DEFAULT_THRESHOLD) -> CellSummary:
    by_c: dict[int, list[dict[str, Any]]] = {}
    for run in cell.get("runs", []):
        by_c.setdefault(int(run["concurrency"]), []).append(run)
    points = {c: summarize_point(c, runs, threshold) for c, runs in sorted(by_c.items())}
    return CellSummary(cell, points)


def summarize_cells(cells: Iterable[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD) -> list[CellSummary]:
    return [summarize_cell(c, threshold) for c in cells]


def hardware_label(cell: dict[str, Any]) -> str:
    facts = cell.get("facts", {})
    name = facts.get("arch") or facts.get("gpu_name") or "unknown hardware"
    return f"{name} (simulated)" if facts.get("simulated") else name


def pairing_key(cell: dict[str, Any]) -> str:
    """Everything that must match for two cells to be compared on their backend: host, image and config
    minus the backend fields and the schedule."""
    config = {k: v for k, v in cell.get("config", {}).items() if k not in BACKEND_FIELDS + SCHEDULE_FIELDS}
    return json.dumps({"host": cell.get("host", ""), **config}, sort_keys=True, default=str)


# ---------------------------------------------------------------- ranking two sets of repeats


@dataclass(frozen=True)
class Ranking:
    outcome: str  # "a" | "b" | CANNOT_RANK
    ratio: float  # median(a) / median(b)
    rule: str  # why, in words
    ci: tuple[float, float] | None = None


def ranges_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return min(a) <= max(b) and min(b) <= max(a)


def bootstrap_ratio_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(a) / median(b), resampling each side with replacement."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        mb = statistics.median(rng.choices(b, k=len(b)))
        ma = statistics.median(rng.choices(a, k=len(a)))
        ratios.append(ma / mb if mb else math.inf)
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    lo = ratios[int(tail * (resamples - 1))]
    hi = ratios[math.ceil((1.0 - tail) * (resamples - 1))]
    return lo, hi


def rank_pair(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    min_repeats: int = MIN_REPEATS,
) -> Ranking:
    """Does a beat b (higher is better)? Only outside the noise; otherwise CANNOT_RANK."""
    if len(a) < min_repeats or len(b) < min_repeats:
        ratio = _ratio(a, b)
        return Ranking(CANNOT_RANK, ratio, f"fewer than {min_repeats} successful repeats")
    ratio = _ratio(a, b)
    better = "a" if ratio > 1 else "b"
    if not ranges_overlap(a, b):
        return Ranking(better, ratio, "repeat ranges do not overlap")
    ci = bootstrap_ratio_ci(a, b, seed=seed, resamples=resamples, confidence=confidence)
    pct = f"{confidence:.0%}"
    if ci[0] > 1 or ci[1] < 1:
        return Ranking("a" if ci[0] > 1 else "b", ratio, f"ranges overlap but bootstrap {pct} CI excludes 1", ci)
    return Ranking(CANNOT_RANK, ratio, f"ranges overlap and bootstrap {pct} CI includes 1", ci)


def _ratio(a: Sequence[float], b: Sequence[float]) -> float:
    if not a or not b:
        return math.nan
    mb = statistics.median(b)
    return statistics.median(a) / mb if mb else math.inf


# ---------------------------------------------------------------- "what to run" per (hardware, quant)


@dataclass(frozen=True)
class Matchup:
    """Backend a against backend b on otherwise identical cells, at one concurrency."""

    checkpoint: str
    concurrency: int
    a: str
    b: str
    ranking: Ranking


@dataclass(frozen=True)
class Loser:
    backend: str
    beaten_at: int  # matchups the winner won
    lost_at: int  # matchups the winner lost
    cannot_rank_at: int
    ratios: tuple[float, ...]  # winner / loser throughput, every matchup

    @property
    def ratio_lo(self) -> float:
        return min(self.ratios)

    @property
    def ratio_hi(self) -> float:
        return max(self.ratios)

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.ratios)


@dataclass
class Recommendation:
    hardware: str
    quant: str
    candidates: list[str]
    matchups: list[Matchup]
    winner: str | None  # None: cannot rank
    reason: str  # one line: why this winner, or why none
    versus: list[Loser]  # the winner against each other candidate (empty without a winner)
    winner_cells: list[CellSummary]  # one per checkpoint: where the command line comes from
    per_concurrency: dict[int, str]  # c → winning backend or CANNOT_RANK
    invalid: list[CellSummary]
    failed: list[CellSummary]


def matchups(group: Sequence[CellSummary], *, seed: int = DEFAULT_SEED) -> list[Matchup]:
    """Every pair of rankable cells that differ only in backend, at every concurrency both measured."""
    by_key: dict[str, list[CellSummary]] = {}
    for s in group:
        if s.rankable:
            by_key.setdefault(pairing_key(s.cell), []).append(s)
    out = []
    for key in sorted(by_key):
        cells = sorted(by_key[key], key=lambda s: s.backend)
        for i, x in enumerate(cells):
            for y in cells[i + 1 :]:
                for c in sorted(set(x.points) & set(y.points)):
                    ranking = rank_pair(x.points[c].values, y.points[c].values, seed=seed)
                    out.append(Matchup(x.checkpoint, c, x.backend, y.backend, ranking))
    return out


def _score(ms: Iterable[Matchup]) -> dict[tuple[str, str], list[Ranking]]:
    """(a, b) → rankings oriented so that outcome "a" means the first backend won."""
    table: dict[tuple[str, str], list[Ranking]] = {}
    for m in ms:
        table.setdefault((m.a, m.b), []).append(m.ranking)
        table.setdefault((m.b, m.a), []).append(_flip(m.ranking))
    return table


def _flip(r: Ranking) -> Ranking:
    outcome = {"a": "b", "b": "a"}.get(r.outcome, r.outcome)
    ci = (1 / r.ci[1], 1 / r.ci[0]) if r.ci else None
    return Ranking(outcome, 1 / r.ratio if r.ratio else math.inf, r.rule, ci)


def dominant(candidates: Sequence[str], ms: Sequence[Matchup]) -> str | None:
    """The candidate that beats every other at least once and loses to none; None if there is none."""
    table = _score(ms)
    for w in candidates:
        others = [o for o in candidates if o != w]
        if others and all(_beats(table.get((w, o), [])) for o in others):
            return w
    return None


def _beats(rankings: list[Ranking]) -> bool:
    return any(r.outcome == "a" for r in rankings) and not any(r.outcome == "b" for r in rankings)


def recommend(summaries: Sequence[CellSummary], *, seed: int = DEFAULT_SEED) -> list[Recommendation]:
    """One recommendation per (hardware, quant format), in a stable order."""
    groups: dict[tuple[str, str], list[CellSummary]] = {}
    for s in summaries:
        groups.setdefault((s.hardware, s.quant), []).append(s)
    return [_recommend_group(hw, q, groups[(hw, q)], seed) for hw, q in sorted(groups)]


def _recommend_group(hardware: str, quant: str, group: list[CellSummary], seed: int) -> Recommendation:
    ms = matchups(group, seed=seed)
    candidates = sorted({s.backend for s in group if s.rankable})
    winner = dominant(candidates, ms)
    table = _score(ms)
    versus = [_loser(o, table.get((winner, o), [])) for o in candidates if o != winner] if winner else []
    return Recommendation(
        hardware=hardware,
        quant=quant,
        candidates=candidates,
        matchups=ms,
        winner=winner,
        reason=_reason(winner, candidates, ms, versus),
        versus=versus,
        winner_cells=_one_per_checkpoint([s for s in group if s.rankable and s.backend == winner]),
        per_concurrency=_per_concurrency(candidates, ms),
        invalid=[s for s in group if s.verdict == "invalid"],
        failed=[s for s in group if s.verdict == "failed"],
    )


def _loser(backend: str, rankings: list[Ranking]) -> Loser:
    return Loser(
        backend=backend,
        beaten_at=sum(r.outcome == "a" for r in rankings),
        lost_at=sum(r.outcome == "b" for r in rankings),
        cannot_rank_at=sum(r.outcome == CANNOT_RANK for r in rankings),
        ratios=tuple(r.ratio for r in rankings),
    )


def _reason(winner: str | None, candidates: list[str], ms: list[Matchup], versus: list[Loser]) -> str:
    if not candidates:
        return "no valid cell: nothing to rank"
    if len(candidates) == 1:
        return f"only one valid backend ({candidates[0]}): nothing to compare it with"
    if not ms:
        return "no two valid backends were measured on otherwise identical cells"
    if winner is None:
        return "no backend beats every other outside the noise (ranges overlap, or the order changes with load)"
    won = sum(v.beaten_at for v in versus)
    total = sum(v.beaten_at + v.lost_at + v.cannot_rank_at for v in versus)
    return f"{winner} wins {won} of {total} head-to-head points outside the noise and loses none"


def _one_per_checkpoint(cells: list[CellSummary]) -> list[CellSummary]:
    best: dict[str, CellSummary] = {}
    for s in cells:
        best.setdefault(s.checkpoint, s)
    return [best[k] for k in sorted(best)]


def _per_concurrency(candidates: list[str], ms: list[Matchup]) -> dict[int, str]:
    out = {}
    for c in sorted({m.concurrency for m in ms}):
        present = sorted({m.a for m in ms if m.concurrency == c} | {m.b for m in ms if m.concurrency == c})
        at_c = [m for m in ms if m.concurrency == c]
        out[c] = dominant([x for x in candidates if x in present], at_c) or CANNOT_RANK
    return out
