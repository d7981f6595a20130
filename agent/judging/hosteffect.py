"""Host effects: how much faster or slower each host of one fingerprint group runs the same cell, and how sure we are.

The fleet's design is a blocked one (docs/fleet-ranking.md): each host is a block, the cells are the treatments, and
hosts share some cells (a reference cell, replicas) so that the blocks can be compared. The model is additive in log
throughput, the usual model of a randomized block design:

    mean log throughput(cell c at level l on host h) = a(c, l) + b(h)

b(h) - b(base) is estimated from the (cell, level) points host h shares with the base host (the best-connected one),
or through one host between them: the mean of the differences, with a variance that is the larger of what the repeats
say and what the scatter of the differences says (a host effect that changes from cell to cell is noise too). A
comparison of two cells on different hosts subtracts the host effect and adds its variance (rank_across): a Welch t
interval on the log ratio, so a few repeats give a wide interval, never a false order. A host whose effect is larger
than MAX_EFFECT is not the same kind of machine, whatever its fingerprint says (a power cap, a throttled GPU, a
neighbour's load): its numbers are kept, and no ranking crosses to it. Pure: no I/O, stdlib only.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.judging.student import t_quantile
from agent.judging.summary import CellSummary, comparable

CONFIDENCE = 0.95
MAX_EFFECT = 0.15  # hosts of one fingerprint whose speeds differ by more than this are not ranked against each other
SCHEDULE = ("concurrency", "warmup", "repeats", "server_start")  # a reference cell: its base with fewer levels


@dataclass(frozen=True)
class Estimate:
    """A value on the log scale with its variance and Welch degrees of freedom."""

    value: float
    var: float
    df: float

    def minus(self, other: Estimate) -> Estimate:
        return combine(self.value - other.value, [self, other])

    def interval(self) -> tuple[float, float]:
        half = t_quantile(0.5 + CONFIDENCE / 2, self.df) * math.sqrt(self.var)
        return self.value - half, self.value + half


def combine(value: float, parts: Sequence[Estimate]) -> Estimate:
    """A sum or difference of independent estimates: variances add, df by Welch-Satterthwaite."""
    var = sum(p.var for p in parts)
    denom = sum(p.var**2 / p.df for p in parts if p.var > 0 and p.df > 0)
    return Estimate(value, var, var**2 / denom if denom > 0 else math.inf)


def of_repeats(values: Sequence[float]) -> Estimate:
    """The mean log of one point's repeats, and its variance (needs two repeats or more)."""
    logs = [math.log(v) for v in values]
    n = len(logs)
    return Estimate(statistics.fmean(logs), statistics.variance(logs) / n, n - 1)


@dataclass(frozen=True)
class HostEffect:
    host: str
    base: str  # the host it is measured against (factor 1)
    factor: float  # this host's throughput / the base host's on the same cell and level
    lo: float  # the interval of factor (CONFIDENCE)
    hi: float
    points: int  # (cell, level) points its estimate rests on
    outlier: str = ""  # why no ranking crosses to this host ("" = it may be compared)
    log: Estimate = field(default=Estimate(0.0, 0.0, math.inf), repr=False)

    def words(self) -> str:
        """ "spark-2 ran 1.8% ± 1.1% slower than spark-1 (3 shared points)"; where the interval holds 1 no way is
        named ("spark-3 ran as fast as spark-1 within the noise: +0.4% ± 1.3%"): a sign inside the noise would flip
        from one estimate to the next (calibrate, then the report with the sweep's points added)."""
        pct = (self.factor - 1.0) * 100
        half = (self.hi - self.lo) / 2 * 100
        shared = f"{self.points} shared point{'s' if self.points != 1 else ''}"
        if self.lo <= 1.0 <= self.hi:
            return f"{self.host} ran as fast as {self.base} within the noise: {pct:+.1f}% ± {half:.1f}% ({shared})"
        way = "slower" if pct < 0 else "faster"
        return f"{self.host} ran {abs(pct):.1f}% ± {half:.1f}% {way} than {self.base} ({shared})"


@dataclass
class HostEffects:
    """The host effects of one group of comparable hosts (empty when no cell was measured on two hosts)."""

    base: str = ""
    effects: dict[str, HostEffect] = field(default_factory=dict)  # every host linked to base, base included
    hosts: tuple[str, ...] = ()  # every host that measured a valid cell

    def across(self, ha: str, hb: str) -> tuple[Estimate | None, str]:
        """log(speed of ha / speed of hb), or (None, why the two cannot be compared)."""
        for h in (ha, hb):
            if h not in self.effects:
                return None, f"no cell was measured valid on both {h} and another host of its group (no reference)"
            if self.effects[h].outlier:
                return None, self.effects[h].outlier
        gap = self.effects[ha].log.minus(self.effects[hb].log)
        if abs(gap.value) > math.log1p(MAX_EFFECT):
            slow, fast = (ha, hb) if gap.value < 0 else (hb, ha)
            return None, (
                f"{slow} ran {-math.expm1(-abs(gap.value)):.0%} slower than {fast} on shared cells, more than the "
                f"{MAX_EFFECT:.0%} a group's hosts may differ: not one kind of machine"
            )
        return gap, ""

    def shown(self) -> list[HostEffect]:
        """The effects a report lists: every host but the base."""
        return [e for h, e in sorted(self.effects.items()) if h != self.base]


def point_key(cell: dict[str, Any]) -> str:
    """What two hosts must share for their measurements to be one point: the configuration minus the schedule (a
    reference cell runs fewer levels of the same server), and the group's fingerprint and logged vLLM."""
    config = {k: v for k, v in cell.get("config", {}).items() if k not in SCHEDULE}
    return json.dumps({"group": comparable(cell), **config}, sort_keys=True, default=str)


def estimate(valid: Sequence[CellSummary]) -> HostEffects:
    """The host effect of every host of these (valid, comparable) cells, from the points hosts share."""
    points: dict[tuple[str, int], dict[str, Estimate]] = {}
    hosts: set[str] = set()
    for s in valid:
        host = str(s.cell.get("host", ""))
        hosts.add(host)
        for c, p in s.points.items():
            if len(p.values) >= 2 and all(v > 0 for v in p.values):
                points.setdefault((point_key(s.cell), c), {}).setdefault(host, of_repeats(p.values))
    shared = [per_host for per_host in points.values() if len(per_host) >= 2]
    out = HostEffects(hosts=tuple(sorted(hosts)))
    if not shared:
        return out
    degree = {h: sum(h in p for p in shared) for h in hosts}
    base = min(degree, key=lambda h: (-degree[h], h))  # the best-connected host; ties by name
    direct = {h: _pairwise(h, base, shared) for h in sorted(hosts) if h != base}
    logs: dict[str, tuple[Estimate, int]] = {base: (Estimate(0.0, 0.0, math.inf), 0)}
    logs.update({h: d for h, d in direct.items() if d is not None})
    for h in sorted(hosts - set(logs)):  # through one host that shares points with both
        via = [(m, _pairwise(h, m, shared)) for m in sorted(logs) if m != base]
        chained = [(m, d) for m, d in via if d is not None]
        if chained:
            m, (d, n) = min(chained, key=lambda md: md[1][0].var)
            logs[h] = (combine(d.value + logs[m][0].value, [d, logs[m][0]]), n)
    centre = statistics.median(e.value for e, _ in logs.values())
    for h, (e, n) in logs.items():
        lo, hi = e.interval() if h != base else (0.0, 0.0)
        off = e.value - centre
        outlier = ""
        if len(logs) >= 3 and abs(off) > math.log1p(MAX_EFFECT):
            outlier = (
                f"{h} ran {abs(math.expm1(off)):.0%} {'slower' if off < 0 else 'faster'} than its group's typical "
                f"host on shared cells, outside the {MAX_EFFECT:.0%} a group's hosts may differ: not ranked across hosts"
            )
        out.effects[h] = HostEffect(h, base, math.exp(e.value), math.exp(lo), math.exp(hi), n, outlier, e)
    out.base = base
    return out


def _pairwise(h: str, base: str, shared: list[dict[str, Estimate]]) -> tuple[Estimate, int] | None:
    """log(speed h / speed base) from the points both measured: the mean difference; its variance the larger of
    the repeats' and the scatter of the differences (df of whichever is used)."""
    diffs = [p[h].minus(p[base]) for p in shared if h in p and base in p]
    if not diffs:
        return None
    k = len(diffs)
    mean = statistics.fmean(d.value for d in diffs)
    from_repeats = combine(mean, diffs)
    from_repeats = Estimate(mean, from_repeats.var / k**2, from_repeats.df)
    if k >= 2:
        scatter = statistics.variance([d.value for d in diffs]) / k
        if scatter > from_repeats.var:
            return Estimate(mean, scatter, k - 1), k
    return from_repeats, k


def rank_across(a: Sequence[float], b: Sequence[float], effect: Estimate) -> tuple[float, tuple[float, float], float]:
    """a's repeats against b's, on hosts whose log speed ratio is `effect`: (the ratio with the host effect divided
    out, its interval, how much the host effect added to its standard error: 0.25 = 25% more)."""
    raw = of_repeats(a).minus(of_repeats(b))
    adjusted = combine(raw.value - effect.value, [of_repeats(a), of_repeats(b), effect])
    lo, hi = adjusted.interval()
    widened = math.sqrt(adjusted.var / raw.var) - 1.0 if raw.var > 0 else 0.0
    return math.exp(adjusted.value), (math.exp(lo), math.exp(hi)), widened
