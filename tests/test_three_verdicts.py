"""Every question ends in one of three verdicts (faster, equivalent within ±Δ, undecided with its price) or has
nothing to compare; judged on numbers drawn from the simulator's own two-layer noise (agent/sim/ratemodel.py) with
a between-start standard deviation of 4%."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.judging import stats, summary, verdicts
from agent.judging.correctness import judged_cells
from agent.reporting import markdown as report
from agent.sim import options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel, start_factor
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

LEVELS = (1, 8, 32)
NOISE = 0.04 * math.sqrt(3)  # uniform in 1 ± NOISE: a standard deviation of 4% between starts
SEEDS = range(12)


def _rate(seed: str) -> RateModel:
    plan = make_plan(options.parse(["fp8", "--moe-backend", "triton", "--sim-hardware", "h200"], env={}), {})
    assert plan.failure is None, plan.failure
    return RateModel(plan, unlimited=False, rng=random.Random(seed))


def _write(root: Path, backend: str, truth: float, seed: int, starts: int, first: int = 1) -> None:
    """Starts first..starts of one config, interleaved in time with the other backend's (A1 B1 A2 B2 ...)."""
    for k in range(first, starts + 1):
        cell = f"{backend}-s{k}"
        rate = _rate(f"{seed}:{cell}:windows")
        rate.start_mult = start_factor(NOISE, seed, cell)
        values: dict[int, list[float | str]] = {}
        for c in LEVELS:
            values[c] = []
            for _ in range(3):
                rate.new_phase()
                values[c].append(rate.aggregate_tok_s(c) * truth)
        write_cell(
            root,
            backend=backend,
            checkpoint="fp8",
            quant="fp8",
            values=values,
            config={"server_start": k} if k > 1 else None,
            started_at=f"2026-12-02T{k // 60:02d}:{k % 60:02d}:{0 if backend == 'triton' else 30:02d}Z",
            elapsed_s=120.0,
        )


def _question(root: Path, margin: float = verdicts.DEFAULT_MARGIN) -> stats.Question:
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(root)), margin=margin)
    [q] = rec.questions
    return q


def test_a_true_zero_difference_is_equivalent_at_the_starts_the_rule_asks_for(tmp_path):
    """Two starts each leave it undecided and name the starts that would decide it; at that many it is equivalent
    within ±5% (80% power: most seeds), and never a winner."""
    kinds = []
    for seed in SEEDS:
        root = tmp_path / str(seed)
        _write(root, "triton", 1.0, seed, 2)
        _write(root, "marlin", 1.0, seed, 2)
        q = _question(root)
        assert q.verdict.kind != verdicts.EQUIVALENT, q.reason  # two starts at 4% cannot show ±5%
        if q.verdict.kind == verdicts.FASTER:  # a false positive at the 5% level the intervals allow
            kinds.append(q.verdict.kind)
            continue
        price = q.verdict.price
        assert price is not None and (price.need is None or 2 < price.need <= verdicts.MAX_STARTS)
        if price.need is None:  # the observed gap sits where neither side of the question is near: said so
            assert f"not decidable within {verdicts.MAX_STARTS} starts" in q.reason
            continue
        assert f"server_starts = {price.need}" in q.reason and "min" in q.reason  # the price, in minutes
        _write(root, "triton", 1.0, seed, price.need, first=3)
        _write(root, "marlin", 1.0, seed, price.need, first=3)
        q = _question(root)
        kinds.append(q.verdict.kind)
    assert kinds.count(verdicts.EQUIVALENT) >= 0.7 * len(kinds), kinds
    assert kinds.count(verdicts.FASTER) <= 0.2 * len(kinds), kinds


def test_equivalence_names_the_default_and_lists_the_equivalents(tmp_path):
    for backend in ("triton", "auto", "marlin"):
        for k in (1, 2, 3, 4):
            write_cell(
                tmp_path,
                backend=backend,
                checkpoint="fp8",
                quant="fp8",
                values={c: [100.0 * c, 100.2 * c, 99.8 * c] for c in LEVELS},
                config={"server_start": k} if k > 1 else None,
                started_at=f"2026-12-02T1{k}:0{'tam'.index(backend[0])}:00Z",
            )
    q = _question(tmp_path)
    assert q.verdict.kind == verdicts.EQUIVALENT and q.winner == "auto", q.reason
    assert set(q.verdict.equivalents) == {"triton", "auto", "marlin"} and q.verdict.why_choice == "the default"
    assert "equivalent within ±5%: any of auto, " in q.reason and "run auto (the default)" in q.reason
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "**Run auto.** equivalent within ±5%" in text
    assert "cannot rank" not in text.split("## Provenance")[0]


def test_a_true_30_percent_difference_is_faster_in_two_starts_each(tmp_path):
    kinds = []
    for seed in range(20):
        root = tmp_path / str(seed)
        _write(root, "triton", 1.30, seed, 2)
        _write(root, "marlin", 1.0, seed, 2)
        q = _question(root)
        assert q.verdict.kind != verdicts.FASTER or q.winner == "triton"
        kinds.append(q.verdict.kind)
    assert kinds.count(verdicts.FASTER) >= 0.75 * len(kinds), kinds  # 80% power at the 21% MDE, more at 30%


def test_a_true_8_percent_difference_at_two_starts_is_undecided_with_its_detectable_effect_then_decided(tmp_path):
    decided = 0
    for seed in SEEDS:
        root = tmp_path / str(seed)
        _write(root, "triton", 1.08, seed, 2)
        _write(root, "marlin", 1.0, seed, 2)
        q = _question(root)
        if q.verdict.kind != verdicts.UNDECIDED:
            continue  # a lucky draw decided it already: only a wrong winner would be a fault
        price = q.verdict.price
        assert price is not None and price.mde is not None and price.noise is not None
        # (t.975 + t.80 on 2 df) x sd x sqrt(2/2): 21% at the true 4%; the estimate moves with the draws
        assert price.mde == pytest.approx(verdicts.detectable(price.noise, 2))
        assert 0.08 < price.mde < 0.60 and f"detectable at 2 starts each: {price.mde:.0%}" in q.reason
        if price.need is None:  # the two starts drew a noise that 50 starts could not resolve: said so
            assert f"not decidable within {verdicts.MAX_STARTS} starts" in q.reason
            continue
        _write(root, "triton", 1.08, seed, price.need, first=3)
        _write(root, "marlin", 1.0, seed, price.need, first=3)
        after = _question(root)
        assert after.verdict.kind != verdicts.FASTER or after.winner == "triton", after.reason
        decided += after.verdict.decided
    assert decided >= 6, decided


def test_the_detectable_effect_follows_the_formula():
    # (t.975 + t.80) x c x sqrt(2/n): at c = 4%, about 21% at n = 2 and 10% at n = 4
    assert verdicts.detectable(0.04, 2) == pytest.approx(math.expm1(5.36 * 0.04), rel=0.01)
    assert 0.09 < verdicts.detectable(0.04, 4) < 0.11
    assert verdicts.price(1.0, 2, None, 0.05).need == 3 and verdicts.price(1.0, 2, None, 0.05).mde is None
    assert verdicts.inside((0.97, 1.04), 0.05) and not verdicts.inside((0.94, 1.01), 0.05)


def test_one_configuration_has_nothing_to_compare(tmp_path):
    write_cell(tmp_path, backend="marlin", values={1: [100.0, 101.0, 99.0]})
    q = _question(tmp_path)
    assert q.verdict.kind == verdicts.NOTHING and "marlin is the only valid value" in q.reason
    [rec] = report.build(judged_cells(tmp_path)).recommendations
    assert "nothing to compare" in rec.reason


def test_the_report_writes_every_verdict_as_json(tmp_path):
    _write(tmp_path, "triton", 1.0, 1, 2)
    _write(tmp_path, "marlin", 1.0, 1, 2)
    report.write_report(tmp_path, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert data["equivalence"] == verdicts.DEFAULT_MARGIN
    rows = data["questions"]
    assert {r["concurrency"] for r in rows} == {None, *LEVELS}
    assert all(r["verdict"] in verdicts.KINDS for r in rows)
    top = next(r for r in rows if r["concurrency"] is None)
    assert top["verdict"] == verdicts.UNDECIDED and top["starts_needed"] > 2 and top["minutes_per_start"] == 2.0


def test_the_margin_comes_from_the_spec_as_the_sweep_recorded_it(tmp_path):
    for k in (1, 2, 3):
        for backend, v in (("triton", 103.0), ("marlin", 100.0)):
            write_cell(
                tmp_path,
                backend=backend,
                values={c: [v * c, v * c * 1.001, v * c * 0.999] for c in LEVELS},
                config={"server_start": k} if k > 1 else None,
                started_at=f"2026-12-02T1{k}:{0 if backend == 'triton' else 3}0:00Z",
            )
    # 3% apart on a tight noise: faster within a 2% margin, equivalent within a 10% one
    (tmp_path / "test" / "sweep.toml").write_text('schema = 1\nstarted_at = "x"\n[judge]\nequivalence = 0.10\n')
    said: list[str] = []
    report.write_report(tmp_path / "test", tmp_path / "out", said=said)
    assert "equivalent within ±10%" in said[0], said
    said = []
    report.write_report(tmp_path / "test", tmp_path / "out", said=said, equivalence=0.02)
    assert "run triton" in said[0] and "equivalent" not in said[0], said


# ---------------------------------------------------------------- no question without a verdict

_cell = st.fixed_dictionaries(
    {
        "backend": st.sampled_from(["marlin", "triton", "auto", "flashinfer_cutlass"]),
        "checkpoint": st.sampled_from(["fp8", "nv"]),
        "starts": st.integers(1, 3),
        "base": st.floats(50, 200),
        "noise": st.floats(0, 0.3),
        "levels": st.sets(st.sampled_from([1, 8, 32]), min_size=1, max_size=3),
        "repeats": st.integers(1, 3),
        "verdict": st.sampled_from(["valid", "valid", "valid", "invalid"]),
        "host": st.sampled_from(["spark-1", "spark-1", "spark-2"]),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(_cell, min_size=1, max_size=6), seed=st.integers(0, 10**6))
def test_no_question_ends_without_a_verdict(tmp_path_factory, cells, seed):
    root = tmp_path_factory.mktemp("tree")
    rng = random.Random(seed)
    for i, c in enumerate(cells):
        for k in range(1, c["starts"] + 1):
            values: dict[int, list[float | str]] = {
                lvl: [c["base"] * lvl * (1 + rng.uniform(-c["noise"], c["noise"])) for _ in range(c["repeats"])]
                for lvl in sorted(c["levels"])
            }
            write_cell(
                root,
                backend=c["backend"],
                checkpoint=c["checkpoint"],
                quant="fp8",
                values=values,
                verdict=c["verdict"],
                host=c["host"],
                config={"server_start": k, "max_num_seqs": 16 + i} if k > 1 else {"max_num_seqs": 16 + i},
                started_at=f"2026-12-02T1{k}:{i:02d}:00Z",
            )
    data = report.build(judged_cells(root))
    for rec in data.recommendations:
        assert rec.questions
        for q in rec.questions:
            for v in [q.verdict, *q.per_level.values()]:
                assert v.kind in verdicts.KINDS
                words = v.words()
                assert words and "cannot rank" not in words and "unresolved" not in words
            assert q.reason
        line = data.what_to_run[data.recommendations.index(rec)]
        assert "cannot rank" not in line and "unresolved" not in line, line


# ---------------------------------------------------------------- which checkpoint, across quant formats


def _formats(root: Path, fp8: dict[int, float], nvfp4: dict[int, float]) -> None:
    for k in (1, 2):
        for name, quant, speeds in (("fp8", "fp8", fp8), ("nvfp4", "nvfp4", nvfp4)):
            write_cell(
                root,
                backend="auto",
                checkpoint=name,
                quant=quant,
                values={c: [v, v * 1.002, v * 0.998] for c, v in speeds.items()},
                config={"server_start": k} if k > 1 else None,
                started_at=f"2026-12-07T1{k}:{0 if quant == 'fp8' else 3}0:00Z",
            )


def test_which_checkpoint_is_asked_across_quant_formats_and_answered_per_level(tmp_path):
    """The H100 run's shape (docs/runs/h100-fp8-vs-nvfp4): NVFP4 ahead at c=1, FP8 far ahead at c=32."""
    _formats(tmp_path, {1: 176.0, 32: 3435.0}, {1: 192.0, 32: 1997.0})
    data = report.build(judged_cells(tmp_path))
    [across] = [r for r in data.recommendations if r.quant == "fp8 vs nvfp4"]
    [q] = across.questions
    assert q.axis == stats.CHECKPOINTS and q.candidates == ["fp8", "nvfp4"]
    assert q.verdict.kind == verdicts.BY_LEVEL and q.winner is None
    assert {c: (v.kind, v.choice) for c, v in q.per_level.items()} == {
        1: (verdicts.FASTER, "nvfp4"),
        32: (verdicts.FASTER, "fp8"),
    }
    assert q.quality == {"fp8": "not probed", "nvfp4": "not probed"}
    line = next(t for t in data.what_to_run if "fp8 vs nvfp4" in t)
    assert "depends on the level (c=1: nvfp4 (1.09× over fp8); c=32: fp8 (1.72× over nvfp4))" in line, line
    assert "Quality beside the speed: fp8: not probed" in report.render_markdown(data)


def test_one_format_ahead_everywhere_is_the_checkpoint_to_run(tmp_path):
    _formats(tmp_path, {1: 176.0, 32: 3435.0}, {1: 120.0, 32: 1997.0})
    [across] = [r for r in report.build(judged_cells(tmp_path)).recommendations if r.quant == "fp8 vs nvfp4"]
    assert across.winner == "fp8" and across.questions[0].verdict.kind == verdicts.FASTER, across.reason
    assert across.winner_cells and across.winner_cells[0].checkpoint == "fp8"
