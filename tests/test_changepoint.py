"""Change points in a configuration's history (judging/changepoint.py) on synthetic histories with known truth:
a step of 8 % under 2 % noise is found at its place; a single outlier (a spike or a dip), drift inside the noise and
a flat history are not changes. Over many seeds, so the rule's error rates are what is tested, not one draw."""

from __future__ import annotations

import random

import pytest

from agent.judging import changepoint

pytestmark = pytest.mark.unit
pytest.importorskip("ruptures", reason="the watch extra (pip install 'spark-agent[watch]')")

SEEDS = range(40)


def history(rng: random.Random, n: int = 12, noise: float = 0.02, level: float = 100.0) -> list[float]:
    return [level * rng.lognormvariate(0, noise) for _ in range(n)]


def test_a_step_of_8_percent_under_2_percent_noise_is_found_where_it_is():
    found_at = []
    for seed in SEEDS:
        rng = random.Random(seed)
        values = history(rng, 6) + [v * 0.92 for v in history(rng, 6)]
        points = changepoint.change_points(values)
        assert len(points) <= 1, (seed, points)
        found_at.append(points[0].index if points else None)
        if points:
            assert points[0].direction == "slower" and 0.86 < points[0].ratio < 0.98, (seed, points)
    hits = [i for i in found_at if i is not None]
    assert len(hits) >= 0.9 * len(found_at), found_at  # power: 90 % or more of the seeds
    assert sum(1 for i in hits if abs(i - 6) <= 1) >= 0.9 * len(hits), found_at  # at the step, give or take one run


@pytest.mark.parametrize("factor", [0.75, 1.3])
def test_a_single_outlier_is_not_a_change(factor):
    for seed in SEEDS:
        rng = random.Random(seed)
        values = history(rng)
        values[5] *= factor
        assert changepoint.change_points(values) == [], seed


def test_a_flat_history_has_no_change_and_a_short_one_is_not_judged():
    false = sum(bool(changepoint.change_points(history(random.Random(s), 16))) for s in SEEDS)
    assert false <= 2, false  # at most 5 % of flat histories show a (false) change
    assert changepoint.change_points([100.0, 80.0, 81.0]) == []  # fewer than two segments' worth of runs


def test_an_improvement_reads_faster_and_two_steps_are_two_changes():
    rng = random.Random(7)
    values = history(rng, 5) + [v * 1.15 for v in history(rng, 5)] + [v * 0.9 for v in history(rng, 5)]
    points = changepoint.change_points(values)
    assert [p.direction for p in points] == ["faster", "slower"]
    assert "faster from run 6 on" in points[0].describe()


def test_bad_values_are_refused():
    with pytest.raises(ValueError):
        changepoint.change_points([100.0, 0.0, 100.0, 100.0, 100.0, 100.0])
