"""Windows within server starts: the nested noise model. Pure functions, no I/O.

A point of a config measured over S independent server starts, each with its own windows, has two kinds of noise:
between windows of one server (load, scheduling) and between starts (compile and autotune outcomes, memory layout,
what else the host does). The windows of one start share that start's draw, so they are not independent repeats
of the config: the start is the unit of replication. Everything here is on log throughput, so a variance reads
as a squared relative spread (0.01 = 10%).

    within  = the windows' variance around their start's mean, pooled over starts
    between = var(start means) - within / windows per start   (method of moments, never below 0)

With one start, `between` is unknown (None): the windows say nothing about how far the next start lands.
Two configs each with two or more starts are compared on their start means (Welch's t on logs), which carries both
kinds of noise; with fewer, the report's window rule (judging/stats.rank_pair) decides, and says what is unknown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from agent.judging.student import t_quantile

MIN_STARTS = 2  # a config needs this many starts before its between-start variance is known


@dataclass(frozen=True)
class Nested:
    starts: int  # starts with at least one window
    windows: int  # windows over all starts
    within: float | None  # pooled within-start variance of log throughput; None: no start has two windows
    between: float | None  # between-start variance of log throughput; None: fewer than MIN_STARTS starts
    between_df: int = 0  # its degrees of freedom (starts - 1, summed over pooled points)

    @property
    def known(self) -> bool:
        return self.between is not None

    def words(self) -> str:
        """ "between starts 4.1%, between windows 1.2% (3 starts and 9 windows over the points)": standard deviations,
        relative; a start measured at three load points counts three times."""
        b = "unknown (one start)" if self.between is None else f"{math.sqrt(self.between):.1%}"
        w = "unknown" if self.within is None else f"{math.sqrt(self.within):.1%}"
        return (
            f"between starts {b}, between windows {w} ({self.starts} starts and {self.windows} windows over the points)"
        )


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def estimate(starts: Sequence[Sequence[float]]) -> Nested:
    """The two variances of one point from its windows grouped by start (a start without windows is left out)."""
    groups = [g for g in (_logs(s) for s in starts) if g]
    windows = sum(len(g) for g in groups)
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups)
    df = windows - len(groups)
    within = ss / df if df > 0 else None
    if len(groups) < MIN_STARTS:
        return Nested(len(groups), windows, within, None)
    means = [statistics.fmean(g) for g in groups]
    per_start = windows / len(groups)
    between = max(0.0, statistics.variance(means) - (within or 0.0) / per_start)
    return Nested(len(groups), windows, within, between, len(groups) - 1)


def pooled(points: Sequence[Nested]) -> Nested:
    """Several points' estimates as one (weighted by their degrees of freedom): a machine's noise floor."""
    w_df = [(p.within, p.windows - p.starts) for p in points if p.within is not None and p.windows > p.starts]
    b_df = [(p.between, p.starts - 1) for p in points if p.between is not None]
    within = sum(v * d for v, d in w_df) / sum(d for _, d in w_df) if w_df else None
    between = sum(v * d for v, d in b_df) / sum(d for _, d in b_df) if b_df else None
    df = sum(d for _, d in b_df)
    return Nested(sum(p.starts for p in points), sum(p.windows for p in points), within, between, df)


def start_means(starts: Sequence[Sequence[float]]) -> list[float]:
    """Each start's mean log throughput (starts without windows left out)."""
    return [statistics.fmean(g) for g in (_logs(s) for s in starts) if g]


def ratio_interval(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], confidence: float, floor: Nested | None = None
) -> tuple[float, tuple[float, float]] | None:
    """exp(mean log a - mean log b) over the start means, with its interval; None unless both sides have
    MIN_STARTS starts. With `floor` (the machine's noise pooled over every point started twice: noise_floor in
    judging/stats.py) each mean's variance is between / starts + within / windows, on the pooled degrees of
    freedom; without it, Welch's interval on the two sets of start means, which carry both kinds of noise."""
    ma, mb = start_means(a), start_means(b)
    if len(ma) < MIN_STARTS or len(mb) < MIN_STARTS:
        return None
    diff = statistics.fmean(ma) - statistics.fmean(mb)
    if floor is not None and floor.between is not None and floor.between_df > 0:
        wa, wb = sum(map(len, a)), sum(map(len, b))
        within = floor.within or 0.0
        se2 = floor.between * (1 / len(ma) + 1 / len(mb)) + within * (1 / wa + 1 / wb)
        half = t_quantile(1 - (1 - confidence) / 2, floor.between_df) * math.sqrt(se2)
        return math.exp(diff), (math.exp(diff - half), math.exp(diff + half))
    va, vb = statistics.variance(ma) / len(ma), statistics.variance(mb) / len(mb)
    se2 = va + vb
    if se2 == 0.0:
        return math.exp(diff), (math.exp(diff), math.exp(diff))
    df = se2**2 / ((va**2 / (len(ma) - 1) if va else 0.0) + (vb**2 / (len(mb) - 1) if vb else 0.0))
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(se2)
    return math.exp(diff), (math.exp(diff - half), math.exp(diff + half))


def interleaved(a: Sequence[str], b: Sequence[str]) -> bool:
    """Were two configs' starts interleaved in time (A B A B or A B B A, never A A B B)? `a`, `b`: each start's
    start time (ISO 8601 UTC, which orders as text). Each side's first start must come before the other's second."""
    if len(a) < MIN_STARTS or len(b) < MIN_STARTS or not all(a) or not all(b):
        return False
    sa, sb = sorted(a), sorted(b)
    return sa[0] < sb[1] and sb[0] < sa[1]
