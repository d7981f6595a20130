"""agent.judging.sequential: the test behind "settled", its error rate under repeated looks, and the plan's steps."""

import dataclasses
import math
import random
from dataclasses import replace

import pytest

from agent.judging import sequential as seq
from agent.judging import student

pytestmark = pytest.mark.unit

S = seq.TuneSettings(confidence=0.95, min_repeats=2, max_repeats=3, carry_margin=1.25)
LEVELS = (1, 2, 4, 8, 16)


def test_t_distribution_matches_tables():
    # Student t upper tail: t=12.706 df=1 -> 0.025; t=2.776 df=4 -> 0.025; t=1.645 large df -> ~0.05
    assert student.t_sf(12.706, 1) == pytest.approx(0.025, abs=2e-4)
    assert student.t_sf(2.776, 4) == pytest.approx(0.025, abs=2e-4)
    assert student.t_sf(1.645, 10_000) == pytest.approx(0.05, abs=1e-3)
    assert student.t_sf(0.0, 3) == pytest.approx(0.5)
    assert student.t_sf(-2.776, 4) == pytest.approx(0.975, abs=2e-4)


def test_a_clear_2x_gap_is_settled_at_two_windows():
    r = seq.settle([280.0, 284.0], [130.0, 150.0], S)
    assert r.outcome == "a" and "t-test" in r.rule


def test_overlapping_ranges_stay_open():
    assert seq.settle([100.0, 110.0], [105.0, 108.0], S).outcome == "cannot rank"


def test_report_rule_alone_is_not_enough():
    # ranges do not overlap (the report would rank) but two noisy windows each cannot pass alpha/(2*LOOKS)
    r = seq.settle([100.0, 130.0], [95.0, 99.0], S)
    assert r.outcome == "cannot rank" and "t-test p=" in r.rule


def test_error_rate_over_all_looks_is_within_alpha():
    """Equal backends, 3 looks of fresh noisy samples (as tune takes them): a pair is wrongly settled at most
    alpha of the time, counting any look that settles."""
    rng = random.Random(7)
    wrong, trials = 0, 1500
    for _ in range(trials):
        for n in (2, 2, 3):
            a = [100.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(n)]
            b = [100.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(n)]
            if seq.settle(a, b, S).outcome != "cannot rank":
                wrong += 1
                break
    assert wrong / trials <= 0.05


@pytest.mark.parametrize(
    "settings, fragment",
    [
        (seq.TuneSettings(confidence=1.0), "outside (0, 1)"),
        (seq.TuneSettings(confidence=0.0), "outside (0, 1)"),
        (seq.TuneSettings(min_repeats=4, max_repeats=3), "above --max-repeats"),
        (seq.TuneSettings(min_repeats=1), "below 2"),
    ],
)
def test_bad_settings_are_named(settings, fragment):
    assert any(fragment in p for p in seq.problems(settings))


# ---------------------------------------------------------------- the plan


def cand(cid, group, backend):
    return seq.Candidate(cid, group, backend, f"{group} {backend}", LEVELS)


def cell(cid, backend, medians: dict[int, list[float]], verdict="valid"):
    runs = [
        {"concurrency": c, "repeat": i + 1, "ok": True, "output_throughput": v}
        for c, vals in medians.items()
        for i, v in enumerate(vals)
    ]
    return {
        "cell_id": cid,
        "status": "done",
        "verdict": verdict,
        "config": {"moe_backend": backend},
        "runs": runs,
    }


NV = [cand("nvm", "nv", "marlin"), cand("nvb", "nv", "b12x")]
UNS = [cand("unm", "uns", "marlin"), cand("unb", "uns", "b12x")]


def test_first_step_screens_the_first_group_at_the_extremes():
    plan = seq.plan_next(NV + UNS, {}, S)
    assert [(s.cell_id, s.stage, s.concurrency, s.repeats) for s in plan.steps] == [
        ("nvm", "screen", (1, 16), 2),
        ("nvb", "screen", (1, 16), 2),
    ]


def test_a_backend_beaten_beyond_the_margin_is_stopped_and_skipped_elsewhere():
    measured = {
        "nvm": cell("nvm", "marlin", {1: [60.0, 61.0], 16: [560.0, 565.0]}),
        "nvb": cell("nvb", "b12x", {1: [30.0, 31.0], 16: [200.0, 210.0]}),
    }
    plan = seq.plan_next(NV + UNS, measured, S)
    assert [s.cell_id for s in plan.stopped] == ["nvb"]
    assert "lost to nv marlin at every measured level" in plan.stopped[0].reason
    # the group's survivor is its answer (the command comes from it): every level, as the sweep measures it; the
    # screen has taught what it teaches, so the other groups start in the same step (uns b12x skipped: uns marlin
    # is left alone, its group's answer, measured once at every level)
    steps = [(s.cell_id, s.stage, s.concurrency, s.repeats) for s in plan.steps]
    assert steps == [("nvm", "full", (2, 4, 8), 2), ("unm", "once", LEVELS, 2)]
    assert [s.cell_id for s in plan.skipped] == ["unb"]
    measured["nvm"] = cell("nvm", "marlin", {1: [60.0, 61.0], 2: [110.0, 112.0], 4: [200.0, 204.0],
                                             8: [350.0, 355.0], 16: [560.0, 565.0]})  # fmt: skip
    fast = [cand("fam", "fast", "marlin"), cand("fab", "fast", "b12x")]
    plan = seq.plan_next(NV + UNS + fast, measured, S)
    skipped = {s.cell_id: s.reason for s in plan.skipped}
    assert list(skipped) == ["unb", "fab"] and "lost to" in skipped["unb"]
    # such lone cells teach no other group anything, so they share one step
    steps = [(s.cell_id, s.stage, s.concurrency, s.repeats) for s in plan.steps]
    assert steps == [("unm", "once", LEVELS, 2), ("fam", "once", LEVELS, 2)]
    for cid in ("unm", "fam"):
        measured[cid] = cell(cid, "marlin", {lvl: [100.0, 101.0, 102.0] for lvl in LEVELS})
    plan = seq.plan_next(NV + UNS + fast, measured, S)
    assert plan.done and [s.cell_id for s in plan.skipped] == ["unb", "fab"]


def test_a_group_of_one_config_never_waits_and_takes_one_step():
    """A group with nothing to compare within it (one backend: speculative=mtp beside marlin's off) is measured in
    the first step, every level at --min-repeats windows: a screen of it would decide nothing."""
    mtp = [cand("nvx", "nv-mtp", "marlin")]
    plan = seq.plan_next(NV + mtp + UNS, {}, S)
    steps = [(s.cell_id, s.stage, s.concurrency, s.repeats) for s in plan.steps]
    assert steps == [("nvm", "screen", (1, 16), 2), ("nvb", "screen", (1, 16), 2), ("nvx", "once", LEVELS, 2)]


def test_few_levels_are_screened_at_once():
    assert seq.screen_levels((1, 4)) == (1, 4) and seq.screen_levels((1, 4, 16)) == (1, 4, 16)
    assert seq.screen_levels(LEVELS) == (1, 16)


def test_close_rivals_get_every_level_then_more_windows_then_stay_open():
    close = {
        "nvm": cell("nvm", "marlin", {1: [60.0, 66.0], 16: [560.0, 600.0]}),
        "nvb": cell("nvb", "b12x", {1: [58.0, 63.0], 16: [550.0, 590.0]}),
    }
    plan = seq.plan_next(NV, close, S)
    assert {(s.cell_id, s.stage, s.concurrency) for s in plan.steps} == {
        ("nvm", "full", (2, 4, 8)),
        ("nvb", "full", (2, 4, 8)),
    }
    full2 = {
        k: cell(k, b, {c: [100.0 + c, 108.0 + c] for c in LEVELS}) for k, b in (("nvm", "marlin"), ("nvb", "b12x"))
    }
    plan = seq.plan_next(NV, full2, S)
    assert {(s.stage, s.repeats) for s in plan.steps} == {("more", 3)}
    full3 = {
        k: cell(k, b, {c: [100.0 + c, 108.0 + c, 104.0 + c] for c in LEVELS})
        for k, b in (("nvm", "marlin"), ("nvb", "b12x"))
    }
    plan = seq.plan_next(NV, full3, S)
    # nothing left within the limits, which reach the spec's schedule: a tie (the sweep says cannot rank too)
    assert plan.done and len(plan.tied) == 2 * len(LEVELS) and not plan.open_points  # each point, from both sides
    # limits set below the spec's schedule (it asks 4 windows a point): the same points are undecided
    below = dataclasses.replace(S, sweep_repeats=4)
    plan = seq.plan_next(NV, full3, below)
    assert plan.done and len(plan.open_points) == 2 * len(LEVELS) and not plan.tied


def test_a_failed_cell_is_measured_once_and_never_again():
    measured = {
        "nvm": cell("nvm", "marlin", {1: [60.0, 61.0], 16: [560.0, 565.0]}),
        "nvb": cell("nvb", "b12x", {}, verdict="failed"),
    }
    plan = seq.plan_next(NV, measured, S)
    # the failed cell is not run again; marlin, its group's answer, gets the levels the screen left out
    assert [(s.cell_id, s.stage) for s in plan.steps] == [("nvm", "full")] and not plan.open_points


def test_full_step_adds_only_the_missing_levels_and_collect_keeps_the_others(tmp_path):
    import dataclasses

    from agent.running import collect
    from tests.hostile import make_cell

    close = {
        "nvm": cell("nvm", "marlin", {1: [60.0, 66.0], 16: [560.0, 600.0]}),
        "nvb": cell("nvb", "b12x", {1: [58.0, 63.0], 16: [550.0, 590.0]}),
    }
    steps = seq.plan_next(NV, close, S).steps
    assert {s.concurrency for s in steps} == {(2, 4, 8)} and all(s.keep for s in steps)
    base = make_cell()
    c = dataclasses.replace(base, config=dataclasses.replace(base.config, concurrency=[2, 4, 8]), keep_runs=True)
    keep = collect.kept_levels(c)
    assert keep(tmp_path / "c001-r1.toml") and keep(tmp_path / "c016-r2.toml") and not keep(tmp_path / "c004-r1.toml")
    assert not collect.kept_levels(base)(tmp_path / "c001-r1.toml")


def test_a_step_the_budget_cannot_fit_is_listed_not_run(tmp_path):
    from agent.running import tune
    from tests.hostile import make_cell

    c = make_cell()
    outcome = tune.TuneOutcome(tmp_path / "none")
    # one config: nothing to compare, so its one step is every level
    cost = tune.step_cost_s(c, seq.Step(c.id, seq.ONCE, tuple(c.config.concurrency), S.min_repeats), 0.0)
    placed = tune.place({"spark-a": [c]})
    chosen = tune._choose(placed, tmp_path / "none", S, cost - 1, 0.0, outcome)
    assert chosen == {"spark-a": []} and len(outcome.budget_left) == 1 and not outcome.settled
    chosen = tune._choose(placed, tmp_path / "none", S, cost + 1, 0.0, outcome)
    assert [x.config.repeats for x in chosen["spark-a"]] == [S.min_repeats] and chosen["spark-a"][0].id == c.id


# ---------------------------------------------------------------- server starts (planned by tune up to --max-starts)


def start_of(cand_: seq.Candidate, cid: str, k: int) -> seq.Candidate:
    return seq.Candidate(cid, cand_.group, cand_.backend, cand_.label, cand_.concurrency, start=k)


NV_STARTS = NV + [start_of(NV[0], "nvm2", 2), start_of(NV[1], "nvb2", 2)]


def started(c: dict, k: int, at: str) -> dict:
    return {**c, "config": {**c["config"], **({"server_start": k} if k > 1 else {})}, "started_at": at}


def test_a_close_leader_and_its_rival_get_a_second_start_each_in_one_round():
    full3 = {
        k: started(cell(k, b, {c: [100.0 * v + c, 101.0 * v + c, 99.0 * v + c] for c in LEVELS}), 1, t)
        for k, b, v, t in (("nvm", "marlin", 1.1, "t1"), ("nvb", "b12x", 1.0, "t2"))
    }
    plan = seq.plan_next(NV_STARTS, full3, S)  # 10% apart and settled, but on one start each
    assert {(s.cell_id, s.stage, s.repeats) for s in plan.steps} == {("nvm2", "start", 2), ("nvb2", "start", 2)}
    both = {
        **full3,
        "nvm2": started(cell("nvm2", "marlin", {c: [111.0 + c, 110.0 + c] for c in LEVELS}), 2, "t3"),
        "nvb2": started(cell("nvb2", "b12x", {c: [100.5 + c, 99.5 + c] for c in LEVELS}), 2, "t4"),
    }
    plan = seq.plan_next(NV_STARTS, both, S)
    assert plan.done and not any("server start" in p for p in plan.open_points)


def test_a_wide_margin_needs_no_second_start():
    wide = {
        k: cell(k, b, {c: [100.0 * v + c, 101.0 * v + c, 99.0 * v + c] for c in LEVELS})
        for k, b, v in (("nvm", "marlin", 1.5), ("nvb", "b12x", 1.0))
    }
    plan = seq.plan_next(NV_STARTS, wide, S)
    assert plan.done and not plan.open_points


def test_a_close_pair_gets_its_second_starts_before_more_windows_and_they_merge_whatever_their_schedule():
    """Under the margin the report needs two starts whatever the windows say, so the start step comes first; its
    cells (tune's START: every level, min_repeats windows) merge with the first start's (levels and windows from
    other steps), so the pair is judged on two starts and then nothing is left: a tie, not another round."""
    full2 = {
        k: started(cell(k, b, {c: [100.0 + c, 108.0 + c] for c in LEVELS}), 1, t)
        for k, b, t in (("nvm", "marlin", "t1"), ("nvb", "b12x", "t2"))
    }
    for k in full2:  # as tune stores a full step: the config names the levels that step ran, with its windows
        full2[k]["config"].update(concurrency=[2, 4, 8], repeats=2)
    plan = seq.plan_next(NV_STARTS, full2, S)
    assert {(s.cell_id, s.stage, s.repeats) for s in plan.steps} == {("nvm2", "start", 2), ("nvb2", "start", 2)}
    both = {
        **full2,
        "nvm2": started(cell("nvm2", "marlin", {c: [104.0 + c, 103.0 + c] for c in LEVELS}), 2, "t3"),
        "nvb2": started(cell("nvb2", "b12x", {c: [103.0 + c, 105.0 + c] for c in LEVELS}), 2, "t4"),
    }
    for k in ("nvm2", "nvb2"):
        both[k]["config"].update(concurrency=list(LEVELS), repeats=2)
    plan = seq.plan_next(NV_STARTS, both, S)
    # two starts each, their means within 1% of each other: equivalent within ±5%, settled (neither open nor tied)
    assert plan.done and not plan.tied and not plan.open_points, plan
    wide = seq.plan_next(NV_STARTS, both, replace(S, margin=0.001))  # no margin to speak of: a tie as before
    assert wide.done and wide.tied and not wide.open_points, wide
    assert not any("on 1 server start" in p for p in wide.tied), wide.tied  # each start counted: merged


def starts_upto(n: int) -> list[seq.Candidate]:
    return NV + [start_of(c, f"{c.cell_id}{k}", k) for k in range(2, n + 1) for c in NV]


def test_an_open_pair_on_two_starts_gets_the_starts_its_price_names_or_says_what_it_would_need():
    """Two starts each, a 3% gap inside 6% between-start noise: open. Within --max-starts and the budget, the starts
    verdicts.price names run in one step (interleaved: A3 B3 A4 B4 ...); beyond them, tune stops and says which."""
    two = {
        "nvm": started(cell("nvm", "marlin", {c: [103.0, 104.0] for c in LEVELS}), 1, "t1"),
        "nvb": started(cell("nvb", "b12x", {c: [104.0, 103.5] for c in LEVELS}), 1, "t2"),
        "nvm2": started(cell("nvm2", "marlin", {c: [112.0, 111.0] for c in LEVELS}), 2, "t3"),
        "nvb2": started(cell("nvb2", "b12x", {c: [101.0, 102.0] for c in LEVELS}), 2, "t4"),
    }
    capped = seq.plan_next(starts_upto(2), two, S)
    assert capped.done and any("needs" in p and "--max-starts allows 2" in p for p in capped.tied), capped
    wide = replace(S, max_starts=20)
    plan = seq.plan_next(starts_upto(20), two, wide)
    starts = [s for s in plan.steps if s.stage == seq.START]
    assert starts and len(starts) % 2 == 0 and starts[0].cell_id in ("nvm3", "nvb3"), plan
    assert {s.cell_id for s in starts[:2]} == {"nvm3", "nvb3"}  # start 3 of both before start 4 of either
    poor = seq.plan_next(starts_upto(20), two, wide, afford=1)  # the budget fits one more start each
    assert poor.done and any("the budget allows 3" in p for p in poor.tied), poor
