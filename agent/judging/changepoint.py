"""Change points in one configuration's history: where its speed stepped, across images, beyond its own noise.

A pair of runs says whether image B is slower than image A (judging/regression.py). A history says more: whether a
level moved and stayed moved. ruptures' PELT (Killick et al. 2012, exact segmentation under a penalty) finds the
segments of the log throughput; the penalty is BIC's for a shift of mean, 2·σ²·ln(n), scaled, with σ the noise
between consecutive runs (the median absolute first difference: a step or one outlier barely moves it). A segment
needs at least `min_size` runs, so one noisy image (a spike or a dip) is never a change: a step is confirmed by the
runs after it. Each change kept must also exceed `min_step`, and `z` standard errors of the difference between the
two segments' means, with σ pooled within the segments found (an outlier inflates it, so it cannot pose as a step).

ruptures (numpy + scipy) is the `watch` extra: without it, `available()` is False and callers say so.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

PENALTY_SCALE = 2.0  # × BIC's 2·σ²·ln(n): fewer false changes on short, noisy histories (the z test confirms)
MIN_SIZE = 3  # runs on each side of a change
MIN_STEP = 0.03  # a change smaller than 3 % is not reported, whatever the noise
Z = 4.0  # the step between the two segments, in standard errors of that difference


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run of the new level (0-based, in the order given)
    before: float  # median of the segment before
    after: float  # median of the segment from `index` on
    ratio: float  # after / before

    @property
    def direction(self) -> str:
        return "faster" if self.ratio > 1 else "slower"

    def describe(self) -> str:
        return f"{abs(self.ratio - 1):.1%} {self.direction} from run {self.index + 1} on"


def available() -> bool:
    try:
        import ruptures  # noqa: F401
    except ImportError:
        return False
    return True


def noise_sigma(logs: Sequence[float]) -> float:
    """σ of one run's log value, from consecutive differences (robust to one step and one outlier)."""
    diffs = [abs(b - a) for a, b in itertools.pairwise(logs)]
    if not diffs:
        return 0.0
    return statistics.median(diffs) / (math.sqrt(2) * 0.6745)


def change_points(
    values: Sequence[float],
    min_size: int = MIN_SIZE,
    min_step: float = MIN_STEP,
    z: float = Z,
    sigma_floor: float = 0.005,
) -> list[ChangePoint]:
    """Change points of a positive series (tok/s per run, oldest first). [] when too short or nothing moved."""
    import numpy as np
    import ruptures

    if any(not (v > 0 and math.isfinite(v)) for v in values):
        raise ValueError("change points need positive, finite values")
    if len(values) < 2 * min_size:
        return []
    logs = [math.log(v) for v in values]
    sigma = max(noise_sigma(logs), sigma_floor)
    penalty = PENALTY_SCALE * 2 * sigma**2 * math.log(len(logs))
    algo = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(np.array(logs).reshape(-1, 1))
    ends = algo.predict(pen=penalty)  # segment ends, the last is len(values)
    starts = [0, *ends[:-1]]
    segments = [logs[lo:hi] for lo, hi in zip(starts, ends, strict=True)]
    pooled = pooled_sigma(segments)
    found = []
    for k in range(1, len(starts)):
        lo, mid, hi = starts[k - 1], starts[k], ends[k]
        before, after = statistics.median(values[lo:mid]), statistics.median(values[mid:hi])
        step = abs(statistics.fmean(logs[mid:hi]) - statistics.fmean(logs[lo:mid]))
        stderr = max(pooled, sigma_floor) * math.sqrt(1 / (mid - lo) + 1 / (hi - mid))
        if step >= math.log1p(min_step) and step >= z * stderr:
            found.append(ChangePoint(index=mid, before=before, after=after, ratio=after / before))
    return found


def pooled_sigma(segments: Sequence[Sequence[float]]) -> float:
    """σ within segments, pooled over them (each around its own mean)."""
    squares = sum(sum((x - statistics.fmean(seg)) ** 2 for x in seg) for seg in segments)
    dof = sum(len(seg) - 1 for seg in segments)
    return math.sqrt(squares / dof) if dof > 0 else 0.0
