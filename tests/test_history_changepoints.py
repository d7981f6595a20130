"""`history` marks change points (store/history.mark_change_points over judging/changepoint.py): a series that steps
down 10% and stays there is marked at its first slower run; one noisy image is not; the plot draws them."""

from __future__ import annotations

import random

import pytest

from agent.store import history

pytestmark = pytest.mark.unit
pytest.importorskip("ruptures", reason="the watch extra (pip install 'spark-agent[watch]')")


def rows(levels: list[float], seed: int = 3) -> list[history.HistoryRow]:
    rng = random.Random(seed)
    out = []
    for i, level in enumerate(levels):
        values = tuple(level * rng.lognormvariate(0, 0.01) for _ in range(3))
        out.append(
            history.HistoryRow(
                "k1", "uns-fast", "marlin", "spark-a", 8, f"s{i}", f"vllm:{i}@sha256:{i:064x}", "0.24.0",
                f"2026-11-{i + 1:02d}T00:00:00Z", "valid", values, 0, point="c008",
            )
        )  # fmt: skip
    return list(reversed(out))  # the order given does not matter: each series is read in time order


def test_a_step_is_marked_at_its_first_run_and_a_single_outlier_is_not():
    stepped = rows([100.0] * 5 + [90.0] * 5)
    history.mark_change_points(stepped)
    marked = [r for r in stepped if r.change_point]
    assert [r.sweep for r in marked] == ["s5"] and "slower" in marked[0].change_point

    spike = rows([100.0] * 5 + [80.0] + [100.0] * 4)
    history.mark_change_points(spike)
    assert not [r for r in spike if r.change_point]


def test_the_plot_draws_a_change_point():
    stepped = rows([100.0] * 5 + [90.0] * 5)
    history.mark_change_points(stepped)
    assert history.plot(sorted(stepped, key=lambda r: r.started_at)).startswith(b"\x89PNG")
