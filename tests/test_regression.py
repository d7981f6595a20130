"""compare's regression rule (judging/regression.py) on synthetic sweeps with known truth: two identical sweeps
raise a false alarm at most at the stated rate per compare; a real 10% slowdown is caught; across hosts, the host
effect is divided out (or the configuration is not decided when no run measured it)."""

from __future__ import annotations

import math
import random

import pytest

from agent.judging import hosteffect, regression
from agent.reporting.compare import WITHIN_NOISE, compare

pytestmark = pytest.mark.unit

LEVELS = [1, 2, 4, 8, 16]
BACKENDS = {"marlin": 100.0, "flashinfer_b12x": 45.0, "triton": 80.0}


def sweep(rng: random.Random, speed: float = 1.0, noise: float = 0.02, host: str = "spark-1") -> list[dict]:
    """Three backends x five levels x three repeats, lognormal noise: one sweep of the simulated study."""
    cells = []
    for moe, rate in BACKENDS.items():
        runs = [
            {
                "concurrency": c,
                "repeat": r,
                "ok": True,
                "output_throughput": rate * c**0.6 * speed * rng.lognormvariate(0, noise),
            }
            for c in LEVELS
            for r in range(3)
        ]
        config = {"checkpoint": "uns-fast", "moe_backend": moe, "concurrency": LEVELS, "duration_s": 60.0}
        cells.append(
            {
                "host": host,
                "verdict": "valid",
                "facts": {"fingerprint": "fp", "gpu_name": "NVIDIA GB10"},
                "config": config,
                "runs": runs,
                "cell_id": moe,
            }
        )
    return cells


def test_twenty_pairs_of_identical_sweeps_raise_at_most_the_stated_false_alarms():
    alarms = sum(bool(compare(sweep(random.Random(s)), sweep(random.Random(1000 + s))).regressions) for s in range(20))
    assert alarms <= round(regression.ALPHA * 20)  # 5% of 20 compares: one at most


def test_the_false_alarm_rate_holds_over_many_compares():
    n = 300
    alarms = sum(bool(compare(sweep(random.Random(s)), sweep(random.Random(5000 + s))).regressions) for s in range(n))
    assert alarms / n <= regression.ALPHA + 0.03  # binomial slack: sd of a 5% rate over 300 is 1.3%


def test_a_real_ten_percent_slowdown_is_caught():
    caught = 0
    for s in range(50):
        cmp = compare(sweep(random.Random(s)), sweep(random.Random(9000 + s), speed=0.9))
        caught += len(cmp.regressions) == len(BACKENDS)
        assert all(0.85 < c.change.ratio < 0.95 for c in cmp.configs if c.change)
    assert caught >= 48


def test_across_hosts_the_effect_is_divided_out_or_the_configuration_is_not_decided():
    rng = random.Random(4)
    a = sweep(rng, host="spark-1")
    b = sweep(rng, speed=0.94, host="spark-2")  # nothing changed but the host, 6% slower
    cmp = compare(a, b)  # no run measured both hosts: not decided, and said why
    assert not cmp.regressions and all("neither run measured their effect" in c.why for c in cmp.configs)
    # point by point too, across hosts without their effect nothing is ranked: the 6% is the host's, never "slower"
    assert {d.status for d in cmp.diffs} == {WITHIN_NOISE} and all("refused" in d.ranking.rule for d in cmp.diffs)
    assert len(cmp.uncompared) == len(cmp.configs)  # each said as not compared (and --fail-on-regression fails)
    # with the host effect measured (log 0.94, as a calibration or a shared cell gives it), no regression is left
    pairs = [(a[0]["runs"][i : i + 3], b[0]["runs"][i : i + 3]) for i in range(0, 15, 3)]
    values = [([r["output_throughput"] for r in x], [r["output_throughput"] for r in y]) for x, y in pairs]
    effect = hosteffect.Estimate(math.log(0.94), 0.01**2, 4)
    assert regression.change(values, 3).slower  # the host's 6% read as a regression without it
    assert not regression.change(values, 3, effect).slower
