"""The blocked design of a fleet sweep, unit level: the host-effect estimator and cross-host ranking on synthetic data
with known host factors and backend ratios (interval coverage over many seeds), and the planner on the shipped
examples (locality, reference cells, the wall-time goal, resume)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.hostside.contracts import Facts
from agent.judging import hosteffect, stats, summary
from agent.planning import blocks, groups
from agent.planning.matrix import plan_cells
from agent.planning.spec import load_spec
from agent.running import detach
from agent.running.queue import estimated_seconds

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FACTS = Facts(gpu_name="NVIDIA GB10", compute_capability="12.1", arch="gb10", sm="sm_121a", simulated=True)
LEVELS = [1, 4, 16]


def _cell(host: str, moe: str, levels: list[int], speed: float, rng: random.Random, ckpt: str = "x", noise=0.01):
    """A valid cell whose throughput at level c is speed x backend rate x sqrt(c), with lognormal repeat noise."""
    rate = {"marlin": 100.0, "b12x": 90.0, "slow": 50.0}[moe]
    runs = [
        {
            "concurrency": c,
            "repeat": r,
            "ok": True,
            "output_throughput": rate * c**0.5 * speed * rng.lognormvariate(0, noise),
        }
        for c in levels
        for r in range(3)
    ]
    config = {"checkpoint": ckpt, "moe_backend": moe, "concurrency": levels, "duration_s": 4.0}
    return {
        "host": host,
        "verdict": "valid",
        "facts": {"fingerprint": "fp", "gpu_name": "NVIDIA GB10"},
        "config": config,
        "runs": runs,
        "cell_id": f"{ckpt}-{moe}-{len(levels)}",
    }


def _split(rng: random.Random, speed2: float, noise=0.01):
    """The blocked plan of two backends on two hosts: marlin on h1, b12x on h2, and marlin's reference on h2."""
    cells = [
        _cell("h1", "marlin", LEVELS, 1.0, rng, noise=noise),
        _cell("h2", "b12x", LEVELS, speed2, rng, noise=noise),
        _cell("h2", "marlin", [16], speed2, rng, noise=noise),
    ]
    return summary.summarize_cells(cells)


def test_the_cross_host_interval_covers_the_true_ratio_at_its_nominal_rate():
    covered = effect_covered = 0
    seeds = 400
    for seed in range(seeds):
        rng = random.Random(seed)
        speed2 = rng.uniform(0.93, 1.07)
        summaries = _split(rng, speed2)
        effects = hosteffect.estimate(summaries)
        marlin, b12x = summaries[0], summaries[1]
        ranking = stats.rank_hosts(b12x, marlin, 1, effects)
        assert ranking.ci is not None and ranking.across == "h2 vs h1"
        covered += ranking.ci[0] <= 0.9 <= ranking.ci[1]
        e = effects.effects["h2"]
        effect_covered += e.lo <= speed2 <= e.hi
    # 95% nominal; 400 seeds give a binomial sd of 1.1%: below 92% would be a broken interval
    assert covered / seeds >= 0.92, covered
    assert effect_covered / seeds >= 0.92, effect_covered
    assert covered / seeds <= 0.995  # not so wide that it says nothing


def test_a_host_5pct_slower_is_measured_and_does_not_flip_the_answer():
    rng = random.Random(7)
    cells = [
        _cell("h1", "marlin", LEVELS, 1.0, rng),
        _cell("h2", "slow", LEVELS, 0.95, rng),
        _cell("h2", "marlin", [16], 0.95, rng),
    ]
    [rec] = stats.recommend(summary.summarize_cells(cells))
    assert rec.winner == "marlin"
    [effect] = rec.hosts.shown()
    assert effect.host == "h2" and effect.hi < 1.0  # detected as a host effect
    assert "slower than h1" in effect.words()
    crossed = [m for m in rec.questions[0].matchups if m.ranking.across]
    assert {m.concurrency for m in crossed} == {1, 4}  # at 16 both were measured on h2: compared there
    assert all(0.45 < 1 / m.ranking.ratio < 0.55 for m in crossed)  # 100 vs 50 once the 5% is divided out


def test_a_host_40pct_slower_is_outside_the_group_and_refused():
    rng = random.Random(3)
    cells = [
        _cell("h1", "marlin", LEVELS, 1.0, rng),
        _cell("h2", "b12x", LEVELS, 1.0, rng),
        _cell("h2", "marlin", [16], 1.0, rng),
        _cell("h3", "slow", LEVELS, 0.6, rng),
        _cell("h3", "marlin", [16], 0.6, rng),
    ]
    [rec] = stats.recommend(summary.summarize_cells(cells))
    assert "not ranked across hosts" in rec.hosts.effects["h3"].outlier
    refused = [m for m in rec.questions[0].matchups if "refused" in m.ranking.rule]
    assert refused and all("h3" in m.ranking.across for m in refused)
    assert all(m.ranking.outcome == stats.CANNOT_RANK for m in refused)
    # two hosts 40% apart: neither can be called the odd one, the comparison is refused all the same
    effects = hosteffect.estimate(summary.summarize_cells(cells[:1] + cells[3:]))
    assert effects.across("h1", "h3")[0] is None
    assert "h3 ran 4" in effects.across("h1", "h3")[1] and "not one kind of machine" in effects.across("h1", "h3")[1]


def test_no_shared_cell_means_no_cross_host_order():
    rng = random.Random(5)
    cells = [_cell("h1", "marlin", LEVELS, 1.0, rng), _cell("h2", "slow", LEVELS, 1.0, rng)]
    [rec] = stats.recommend(summary.summarize_cells(cells))
    assert rec.winner is None
    assert all("no reference" in m.ranking.rule for m in rec.questions[0].matchups)


def test_replicas_feed_the_host_effect():
    rng = random.Random(11)
    cells = [
        _cell(h, moe, LEVELS, speed, rng) for h, speed in (("h1", 1.0), ("h2", 0.97)) for moe in ("marlin", "b12x")
    ]
    effects = hosteffect.estimate(summary.summarize_cells(cells))
    assert effects.effects["h2"].points == 6 and effects.effects["h2"].lo < 0.97 < effects.effects["h2"].hi


def _plan(name: str, hosts: list[str], done: dict[str, set[str]] | None = None):
    spec = load_spec(EXAMPLES / name)
    cells = blocks.with_reference(plan_cells(spec, hosts[0], FACTS, {"spark_runtime": "process"}))
    estimate = {c.id: estimated_seconds(c) for c in cells}
    return cells, blocks.plan_group(hosts, cells, done or {}, estimate)


def test_one_host_measures_everything_and_no_reference():
    cells, plan = _plan("gb10-nvfp4.toml", ["s1"])
    assert sorted(plan.assignment["s1"]) == sorted(c.id for c in cells if not c.reference_of)
    assert plan.base == "" and plan.words({c.id: c for c in cells}) == []


def test_nvfp4_spreads_checkpoints_and_keeps_each_checkpoints_questions_on_one_host():
    cells, plan = _plan("gb10-nvfp4.toml", ["s1", "s2", "s3"])
    by_id = {c.id: c for c in cells}
    assert plan.spread == ("checkpoint",)
    for _host, ids in plan.assignment.items():
        full = [by_id[i] for i in ids if not by_id[i].reference_of]
        assert len({c.config.checkpoint for c in full}) == 1 and len(full) == 3
    refs = [h for h, ids in plan.assignment.items() if any(by_id[i].reference_of for i in ids)]
    assert len(refs) == 2 and plan.assignment[refs[0]][0] == plan.references[refs[0]]  # the reference comes first
    assert plan.wall_s <= 0.45 * plan.one_host_s
    assert "checkpoint spread over 3 hosts" in plan.words(by_id)[0]


def test_quick_on_two_hosts_stays_on_one_host_a_split_would_not_pay_for_its_reference():
    _, plan = _plan("quick.toml", ["s1", "s2"])
    assert plan.spread == () and plan.base == "" and not plan.assignment["s2"]
    assert len(plan.assignment["s1"]) == 2


def test_quick_stays_on_one_host_with_a_calibration_too():
    spec = load_spec(EXAMPLES / "quick.toml")
    cells = blocks.with_reference(plan_cells(spec, "s1", FACTS, {"spark_runtime": "process"}))
    calibrated = {"s1": 0.1, "s2": 0.1, "s3": 0.1}
    plan = blocks.plan_group(["s1", "s2", "s3"], cells, {}, {c.id: estimated_seconds(c) for c in cells}, calibrated)
    assert plan.spread == () and sum(bool(ids) for ids in plan.assignment.values()) == 1


def test_four_cells_on_two_hosts_split_by_checkpoint_with_a_reference_at_the_top_level(tmp_path):
    text = (EXAMPLES / "quick.toml").read_text()
    text = text.replace("[server]", '[[checkpoints]]\nname = "nv"\nmodel = "nv"\nquant = "nvfp4"\n\n[server]')
    (tmp_path / "four.toml").write_text(text)
    spec = load_spec(tmp_path / "four.toml")
    cells = blocks.with_reference(plan_cells(spec, "s1", FACTS, {"spark_runtime": "process"}))
    plan = blocks.plan_group(["s1", "s2"], cells, {}, {c.id: estimated_seconds(c) for c in cells})
    by_id = {c.id: c for c in cells}
    assert plan.spread == ("checkpoint",)
    other = next(h for h in plan.hosts if plan.references[h] != plan.base)
    ref = by_id[plan.references[other]]
    assert ref.reference_of == plan.base and ref.config.concurrency == [4] and plan.assignment[other][0] == ref.id


def test_resume_hands_out_only_what_is_missing():
    _cells, first = _plan("gb10-nvfp4.toml", ["s1", "s2", "s3"])
    done: dict[str, set[str]] = {}
    for h, ids in first.assignment.items():
        for cid in ids[:2]:
            done.setdefault(cid, set()).add(h)  # the reference cell has one id on every host that measures it
    _, again = _plan("gb10-nvfp4.toml", ["s1", "s2", "s3"], done)
    for h in again.hosts:
        assert again.assignment[h] == first.assignment[h][2:]


def test_detach_assign_uses_the_blocked_plan_and_says_so():
    spec = load_spec(EXAMPLES / "gb10-nvfp4.toml")
    hosts = ["s1", "s2", "s3"]
    cells = {h: blocks.with_reference(plan_cells(spec, h, FACTS, {"spark_runtime": "process"})) for h in hosts}
    g = groups.group_facts(dict.fromkeys(hosts, FACTS))
    said: list[str] = []
    out = detach.assign(g, cells, cells, 1, said)
    assert sum(len(ids) for ids in out.values()) == 9 + 2
    assert any("reference" in line for line in said)
    # --replicas 2: every full cell on two hosts, no reference cells
    out2 = detach.assign(g, cells, cells, 2)
    assert sum(len(ids) for ids in out2.values()) == 18


def test_a_one_level_spec_measures_its_base_cell_again_as_the_reference(tmp_path):
    text = (EXAMPLES / "quick.toml").read_text().replace("concurrency = [1, 4]", "concurrency = [4]")
    text = text.replace('"flashinfer_b12x"]', '"flashinfer_b12x", "flashinfer_cutlass"]')
    two_ckpts = text.replace("[server]", '[[checkpoints]]\nname = "nv"\nmodel = "nv"\nquant = "nvfp4"\n\n[server]')
    (tmp_path / "one-level.toml").write_text(two_ckpts)
    spec = load_spec(tmp_path / "one-level.toml")
    cells = blocks.with_reference(plan_cells(spec, "s1", FACTS, {"spark_runtime": "process"}))
    assert len(cells) == 6 and not any(c.reference_of for c in cells)  # the reference is a cell already planned
    plan = blocks.plan_group(["s1", "s2"], cells, {}, {c.id: estimated_seconds(c) for c in cells})
    assert plan.base and plan.spread == ("checkpoint",)
    assert sorted(len(ids) for ids in plan.assignment.values()) == [3, 4]
    assert sum(ids.count(plan.base) for ids in plan.assignment.values()) == 2  # on both hosts: a replica
    # the backend question alone is never split over hosts, whatever a split would save
    (tmp_path / "backends.toml").write_text(text)
    alone = blocks.with_reference(plan_cells(load_spec(tmp_path / "backends.toml"), "s1", FACTS, {}))
    plan = blocks.plan_group(["s1", "s2", "s3"], alone, {}, {c.id: estimated_seconds(c) for c in alone})
    assert plan.spread == () and sum(bool(ids) for ids in plan.assignment.values()) == 1
    # two cells of one level: the reference would cost as much as the cell it saves, so one host measures both
    two = [c for c in alone if c.config.moe_backend != "flashinfer_cutlass"]
    plan = blocks.plan_group(["s1", "s2"], two, {}, {c.id: estimated_seconds(c) for c in two})
    assert plan.base == "" and plan.spread == () and not plan.assignment["s2"]


@pytest.mark.parametrize("name", ["quick.toml", "gb10-nvfp4.toml", "gb10-fp8.toml"])
@pytest.mark.parametrize("calibrated", [None, {"s1": 0.1, "s2": 0.1, "s3": 0.1}])
def test_every_shipped_example_keeps_each_backend_question_on_one_host(name, calibrated):
    """Issue 36 item 5: whatever the results folder holds (no calibration, or one covering every host), the cells
    that differ only in their MoE backend are planned on one host, so the backend is never ranked across hosts."""
    import dataclasses

    spec = load_spec(EXAMPLES / name)
    cells = blocks.with_reference(plan_cells(spec, "s1", FACTS, {"spark_runtime": "process"}))
    for hosts in (["s1", "s2"], ["s1", "s2", "s3"]):
        plan = blocks.plan_group(hosts, cells, {}, {c.id: estimated_seconds(c) for c in cells}, calibrated)
        where: dict[str, set[str]] = {}
        for host, ids in plan.assignment.items():
            for c in cells:
                if c.id in ids and not c.reference_of:
                    question = repr(dataclasses.replace(c.config, moe_backend=""))  # all but the backend
                    where.setdefault(question, set()).add(host)
        assert where and all(len(h) == 1 for h in where.values()), (name, hosts, calibrated, where)
