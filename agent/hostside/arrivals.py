"""When an open-loop load sends its requests: Poisson or gamma (bursty) arrivals, as `vllm bench serve` draws them.

`vllm bench serve --request-rate R --burstiness B` draws each gap between two requests from a gamma distribution
of shape B and mean 1/R (scale 1/(R*B)): B = 1 is a Poisson process, B < 1 burstier, B > 1 more even. The
schedule is drawn before the window starts from a seeded generator, so a window replays exactly.
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
    """Send times (seconds from the window's start) of every request that falls inside [0, duration_s)."""
    if math.isinf(rate):
        raise ValueError("an open-loop window needs a finite request rate")
    expected = rate * duration_s
    if expected > MAX_ARRIVALS:
        raise ValueError(f"{rate:g} req/s for {duration_s:g} s is more than {MAX_ARRIVALS} requests")
    times: list[float] = []
    t = 0.0
    while True:
        # the first request goes at t=0 like bench's; each next one a gap later
        if times:
            t += gaps(rate, burstiness, 1, rng)[0]
        if t >= duration_s:
            return times
        times.append(t)
