"""agent.judging.stats: hand-computed medians and spreads, the ranking rule, and who may win."""

import math

import pytest

from agent.judging import stats, summary, verdicts
from agent.judging.correctness import judged_cells
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit


def run(c, r, tput, ok=True, error=""):
    return {
        "concurrency": c,
        "repeat": r,
        "ok": ok,
        "error": error,
        "output_throughput": tput,
        "median_ttft_ms": 10.0 * r,
        "median_tpot_ms": 2.0 * r,
    }


def test_median_and_spread_by_hand():
    p = summary.summarize_point(8, [run(8, 1, 110.0), run(8, 2, 90.0), run(8, 3, 100.0)])
    assert p.throughput.median == 100.0
    assert p.throughput.spread == pytest.approx(0.20)  # (110 - 90) / 100
    assert (p.throughput.lo, p.throughput.hi) == (90.0, 110.0)
    assert p.unstable  # 20% > 10%
    assert p.ttft.median == 20.0 and p.tpot.median == 4.0


def test_article_marlin_point_is_stable():
    p = summary.summarize_point(8, [run(8, 1, 276.0), run(8, 2, 283.0), run(8, 3, 280.0)])
    assert p.throughput.median == 280.0
    assert p.throughput.spread == pytest.approx(7 / 280)
    assert not p.unstable


def test_failed_run_left_out_of_median_but_listed():
    p = summary.summarize_point(4, [run(4, 1, 100.0), run(4, 2, 0.0, ok=False, error="server died"), run(4, 3, 104.0)])
    assert p.throughput.median == 102.0
    assert p.throughput.spread == pytest.approx(4 / 102)
    assert p.failed == (summary.FailedRun(4, 2, "server died"),)
    assert p.values == (100.0, 104.0)


def test_zero_latency_means_not_measured():
    runs = [run(1, 1, 30.0), run(1, 2, 31.0)]
    runs[0]["median_tpot_ms"] = 0.0  # no request finished inside the window
    p = summary.summarize_point(1, runs)
    assert p.tpot.values == (4.0,) and p.throughput.median == 30.5


def test_all_failed_point_has_no_median():
    p = summary.summarize_point(1, [run(1, 1, 0.0, ok=False, error="x")])
    assert p.throughput is None and not p.unstable and len(p.failed) == 1


def test_threshold_is_a_parameter():
    runs = [run(1, 1, 95.0), run(1, 2, 100.0), run(1, 3, 105.0)]  # spread 10%
    assert not summary.summarize_point(1, runs, threshold=0.10).unstable
    assert summary.summarize_point(1, runs, threshold=0.05).unstable


def test_spread_edge_cases():
    assert summary.spread([5.0]) == 0.0
    assert summary.spread([0.0, 0.0]) == 0.0
    assert math.isinf(summary.spread([0.0, 0.0, 1.0]))


def test_disjoint_ranges_rank():
    r = stats.rank_pair([276.0, 283.0, 280.0], [44.0, 86.0, 60.0])
    assert r.outcome == "a" and r.rule == "repeat ranges do not overlap"
    assert r.ratio == pytest.approx(280 / 60)
    assert stats.rank_pair([44.0, 86.0, 60.0], [276.0, 283.0, 280.0]).outcome == "b"


def test_overlapping_ranges_cannot_rank():
    r = stats.rank_pair([100.0, 105.0, 110.0], [102.0, 108.0, 112.0], seed=1)
    assert r.outcome == stats.CANNOT_RANK
    assert r.ci[0] < 1 < r.ci[1]


def test_overlap_but_bootstrap_excludes_one():
    a = [100.0, 101, 102, 103, 104, 105, 106, 107, 108, 150]
    b = [90.0, 91, 92, 93, 94, 95, 96, 97, 98, 101]
    assert stats.ranges_overlap(a, b)
    r = stats.rank_pair(a, b, seed=7)
    assert r.outcome == "a" and r.ci[0] > 1 and "bootstrap" in r.rule


def test_bootstrap_is_deterministic_given_the_seed():
    a, b = [100.0, 104.0, 111.0], [99.0, 103.0, 108.0]
    assert stats.bootstrap_ratio_ci(a, b, seed=3) == stats.bootstrap_ratio_ci(a, b, seed=3)
    assert stats.rank_pair(a, b, seed=3) == stats.rank_pair(a, b, seed=3)


def test_one_repeat_never_ranks():
    assert stats.rank_pair([200.0], [100.0]).outcome == stats.CANNOT_RANK


C = [1, 2, 4, 8, 16]


def test_marlin_twice_b12x_recommends_marlin(tmp_path):
    write_cell(tmp_path, backend="marlin", values={c: [100.0 * c, 102.0 * c, 98.0 * c] for c in C})
    write_cell(tmp_path, backend="flashinfer_b12x", values={c: [50.0 * c, 52.0 * c, 47.0 * c] for c in C})
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert (rec.hardware, rec.quant, rec.winner) == ("gb10", "nvfp4", "marlin")
    [loser] = rec.versus
    assert loser.backend == "flashinfer_b12x" and loser.beaten_at == 5 and loser.lost_at == 0
    assert loser.ratio_median == pytest.approx(2.0)
    assert set(rec.per_concurrency.values()) == {"marlin"}


def test_overlapping_backends_cannot_rank(tmp_path):
    write_cell(tmp_path, backend="marlin", values={c: [100.0, 110.0, 104.0] for c in C})
    write_cell(tmp_path, backend="flashinfer_b12x", values={c: [98.0, 108.0, 112.0] for c in C})
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner is None and rec.versus == []
    assert set(rec.per_concurrency.values()) == {verdicts.UNDECIDED}


def test_crossover_has_no_overall_winner(tmp_path):
    write_cell(tmp_path, backend="marlin", values={1: [100.0, 101.0, 99.0], 16: [400.0, 401.0, 399.0]})
    write_cell(tmp_path, backend="flashinfer_b12x", values={1: [80.0, 81.0, 79.0], 16: [500.0, 501.0, 499.0]})
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner is None
    assert rec.per_concurrency == {1: "marlin", 16: "flashinfer_b12x"}


def test_invalid_and_failed_cells_never_win(tmp_path):
    write_cell(tmp_path, checkpoint="fp8", quant="fp8", backend="triton", values={c: [100.0, 101.0, 99.0] for c in C})
    # 30% apart: over the margin that needs two server starts each (test_starts.py)
    write_cell(tmp_path, checkpoint="fp8", quant="fp8", backend="marlin", values={c: [70.0, 71.0, 69.0] for c in C})
    write_cell(
        tmp_path,
        checkpoint="fp8",
        quant="fp8",
        backend="cutlass",
        values={c: [900.0, 901.0, 899.0] for c in C},
        verdict="invalid",
        verdict_reasons=["moe: requested cutlass, loaded TRITON"],
        loaded="triton",
    )
    write_cell(
        tmp_path,
        checkpoint="fp8",
        quant="fp8",
        backend="deep_gemm",
        values={},
        status="failed",
        verdict="failed",
        failure_class="deep_gemm_assert",
    )
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner == "triton"
    assert rec.questions[0].candidates == ["marlin", "triton"]
    assert [s.backend for s in rec.invalid] == ["cutlass"] and [s.backend for s in rec.failed] == ["deep_gemm"]
    assert all("cutlass" not in (m.a, m.b) for m in rec.questions[0].matchups)


def test_only_invalid_cells_give_no_winner(tmp_path):
    write_cell(tmp_path, backend="marlin", values={1: [100.0, 101.0, 99.0]}, verdict="invalid")
    write_cell(tmp_path, backend="flashinfer_b12x", values={1: [10.0, 11.0, 9.0]}, verdict="invalid")
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner is None and len(rec.invalid) == 2 and "no valid cell" in rec.reason


def test_groups_by_hardware_and_quant(tmp_path):
    write_cell(tmp_path, backend="marlin", values={1: [100.0, 101.0, 99.0]})
    write_cell(tmp_path, backend="flashinfer_b12x", values={1: [50.0, 51.0, 49.0]})
    write_cell(tmp_path, checkpoint="fp8", quant="fp8", backend="triton", values={1: [100.0, 101.0, 99.0]})
    write_cell(tmp_path, checkpoint="fp8", quant="fp8", backend="marlin", values={1: [70.0, 71.0, 69.0]})
    recs = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    # and which checkpoint across the formats, on the backend both ran (marlin: 70 against 100)
    assert [(r.quant, r.winner) for r in recs] == [("fp8", "triton"), ("nvfp4", "marlin"), ("fp8 vs nvfp4", "uns-fast")]
