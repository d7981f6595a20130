"""Did B regress against A? One decision per configuration, with a stated false-alarm rate per comparison.

A point-by-point rule (stats.rank_pair at every concurrency) calls about one point in twenty "slower" when nothing
changed, so a compare of dozens of points almost always finds a "regression" in noise. Here each configuration's
points are combined first: the mean over its concurrency levels of log(B / A), each level's variance from its repeats
(hosteffect.of_repeats, the noise model the fleet ranking uses), plus the host effect when A and B ran on different
hosts of one group. The interval is a Welch t interval at 1 - ALPHA / m for m configurations (Bonferroni), so a
whole compare of identical runs raises a false alarm at most ALPHA of the time. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent.judging.hosteffect import Estimate, combine, of_repeats
from agent.judging.student import t_quantile

ALPHA = 0.05  # the chance that a compare of two identical runs reports any regression


@dataclass(frozen=True)
class Change:
    ratio: float  # B / A, the geometric mean over the configuration's points (host effect divided out)
    lo: float  # its interval at 1 - ALPHA / configurations
    hi: float
    points: int

    @property
    def slower(self) -> bool:
        return self.hi < 1.0

    @property
    def faster(self) -> bool:
        return self.lo > 1.0


def change(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]], configurations: int, effect: Estimate | None = None
) -> Change | None:
    """pairs: (A's repeats, B's repeats) at each level both measured (two repeats or more each, all positive).
    effect: log(speed of B's host / speed of A's host) when they differ. None when no level can be compared."""
    usable = [(a, b) for a, b in pairs if len(a) >= 2 and len(b) >= 2 and min(a) > 0 and min(b) > 0]
    if not usable:
        return None
    diffs = [of_repeats(b).minus(of_repeats(a)) for a, b in usable]
    k = len(diffs)
    total = combine(sum(d.value for d in diffs), diffs)
    mean = Estimate(total.value / k, total.var / k**2, total.df)
    if effect is not None:
        mean = combine(mean.value - effect.value, [mean, effect])
    level = 1.0 - ALPHA / max(1, configurations) / 2.0
    half = t_quantile(level, mean.df) * math.sqrt(mean.var) if mean.var > 0 else 0.0
    return Change(math.exp(mean.value), math.exp(mean.value - half), math.exp(mean.value + half), k)


def describe(c: Change) -> str:
    """ "0.902x [0.881, 0.923] over 3 points"."""
    return f"{c.ratio:.3f}x [{c.lo:.3f}, {c.hi:.3f}] over {c.points} point{'s' if c.points != 1 else ''}"
