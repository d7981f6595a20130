"""When an open-loop load sends its requests: Poisson or gamma (bursty) arrivals, as `vllm bench serve` draws them.

`vllm bench serve --request-rate R --burstiness B` draws each gap between two requests from a gamma distribution
of shape B and mean 1/R (scale 1/(R*B)): B = 1 is a Poisson process, B < 1 burstier, B > 1 more even. It then
rescales the gaps so that its N requests span exactly N/R seconds: the offered count is exact, only the spacing is
random. A window does the same: round(R x duration) requests, gaps drawn as bench draws them and rescaled to the
window (the first request at 0 and the last one mean gap before the end, where bench has the first one gap after
its start and the last at its end). An unscaled draw offers a Poisson count, about +-1/sqrt(N): +-18 % at 4 req/s
for 8 s, and an open-loop window's throughput follows the offered count, so that noise went straight into the
result. The schedule is drawn before the window starts from a seeded generator, so a window replays exactly.
"""

from __future__ import annotations

import math
import random

MAX_ARRIVALS = 2_000_000  # a schedule longer than this is a spec error (rate x duration), not a load


def gaps(rate: float, burstiness: float, count: int, rng: random.Random) -> list[float]:
    """`count` gaps between requests, seconds. rate = inf sends everything at once (as bench does)."""
    if not rate > 0 or not burstiness > 0:
        raise ValueError(f"rate and burstiness must be > 0, got {rate}, {burstiness}")
    if math.isinf(rate):
        return [0.0] * count
    scale = 1.0 / (rate * burstiness)
    return [rng.gammavariate(burstiness, scale) for _ in range(count)]


def schedule(rate: float, burstiness: float, duration_s: float, rng: random.Random) -> list[float]:
    """Send times (seconds from the window's start) of the window's round(rate x duration_s) requests (at least 1):
    the first at 0, the last one mean gap before the window's end, gamma gaps between them rescaled to fill that span
    (mean gap exactly duration_s / count, as bench's normalisation). The last request is never in the window's last
    instants, where a start a few ms late would fall after the close and count as missed."""
    if math.isinf(rate):
        raise ValueError("an open-loop window needs a finite request rate")
    expected = rate * duration_s
    if duration_s <= 0:
        return []
    if expected > MAX_ARRIVALS:
        raise ValueError(f"{rate:g} req/s for {duration_s:g} s is more than {MAX_ARRIVALS} requests")
    count = max(1, round(expected))
    drawn = gaps(rate, burstiness, count - 1, rng)
    total = sum(drawn)
    if not total > 0:  # no gaps (one request), or all drawn as 0 (only at a tiny burstiness): even spacing
        drawn, total = [1.0] * (count - 1), float(max(1, count - 1))
    scale = duration_s * (count - 1) / count / total
    times = [0.0]
    for gap in drawn:
        times.append(times[-1] + gap * scale)
    return times
