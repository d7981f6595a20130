"""Idle hosts add starts (issue 46 item 4): hosts of a fingerprint group that a split plan leaves without work measure
whole blocks again (planning/blocks.py), so every host of the group works and the report gets independent replicates
of each comparison set, each compared on one host. Unit level: the plan, its words, resume, the hand-out, and what
the judging already makes of a replicate block (its host effect, without a reference cell)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from agent.hostside.contracts import Facts
from agent.judging import hosteffect, replicas, stats, summary
from agent.planning import blocks, groups
from agent.planning.matrix import Cell, plan_cells
from agent.planning.spec import load_spec
from agent.running import detach
from agent.running.queue import estimated_seconds

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FACTS = Facts(gpu_name="NVIDIA GB10", compute_capability="12.1", arch="gb10", sm="sm_121a", simulated=True)
BACKENDS = '["marlin", "flashinfer_b12x", "flashinfer_cutlass", "triton"]'
HOSTS = ["spark-1", "spark-2", "spark-3", "spark-4"]


def _spec(tmp: Path, starts: int = 1) -> Path:
    """quick.toml with a second checkpoint (fp8) and four MoE backends: 2 comparison sets of 4 cells."""
    text = (EXAMPLES / "quick.toml").read_text().replace('name = "quick"', 'name = "eight"')
    text = text.replace("[server]", '[[checkpoints]]\nname = "fp8"\nmodel = "fp8"\nquant = "nvfp4"\n\n[server]')
    text = text.replace('moe_backend = ["marlin", "flashinfer_b12x"]', f"moe_backend = {BACKENDS}")
    if starts > 1:
        text = text.replace("repeats = 3", f"repeats = 3\nserver_starts = {starts}")
    path = tmp / f"eight-{starts}.toml"
    path.write_text(text)
    return path


def _cells(tmp: Path, starts: int = 1, host: str = "spark-1") -> list[Cell]:
    return blocks.with_reference(plan_cells(load_spec(_spec(tmp, starts)), host, FACTS, {"spark_runtime": "process"}))


def _plan(cells: list[Cell], hosts: list[str], done: dict[str, set[str]] | None = None, replicate: bool = True):
    estimate = {c.id: estimated_seconds(c) for c in cells}
    return blocks.plan_group(hosts, cells, done or {}, estimate, replicate=replicate)


def _full(cells: list[Cell], ids: list[str]) -> list[str]:
    by_id = {c.id: c for c in cells}
    return [cid for cid in ids if not by_id[cid].reference_of]


def test_four_equal_hosts_two_blocks_every_host_works_and_each_spare_host_repeats_a_whole_block(tmp_path):
    cells = _cells(tmp_path)
    by_id = {c.id: c for c in cells}
    assert len([c for c in cells if not c.reference_of]) == 8
    before = _plan(cells, HOSTS, replicate=False)  # the plan as it was: two hosts, two idle
    plan = _plan(cells, HOSTS)
    assert sum(bool(ids) for ids in before.assignment.values()) == 2
    assert all(plan.assignment[h] for h in HOSTS)  # every host gets work
    firsts = [h for h in HOSTS if before.assignment[h]]
    spares = [h for h in HOSTS if not before.assignment[h]]
    assert set(plan.replicates) == set(spares) and not plan.idle
    for h in firsts:  # the hosts that had work keep exactly their plan (block, reference, order)
        assert plan.assignment[h] == before.assignment[h]
    repeated = set()
    for h in spares:
        first, block = plan.replicates[h]
        # a whole block: every config of one comparison set, the same ids in the same order, no reference cell
        assert list(block) == plan.assignment[h] == _full(cells, before.assignment[first])
        assert len(block) == 4 and len({by_id[cid].config.checkpoint for cid in block}) == 1
        assert len({by_id[cid].config.moe_backend for cid in block}) == 4
        assert h not in plan.references and not any(by_id[cid].reference_of for cid in plan.assignment[h])
        repeated.add(first)
    assert repeated == set(firsts)  # each block once more: both comparison sets on two hosts
    # the expected wall does not rise, and the split is the same
    assert plan.wall_s <= before.wall_s and plan.spread == before.spread == ("checkpoint",)
    assert plan.wall_s / plan.one_host_s == pytest.approx(before.wall_s / before.one_host_s)


def test_one_hosts_plan_is_unchanged(tmp_path):
    cells = _cells(tmp_path)
    plan, before = _plan(cells, ["spark-1"]), _plan(cells, ["spark-1"], replicate=False)
    assert plan == before and not plan.replicates and plan.words({c.id: c for c in cells}) == []
    assert sorted(plan.assignment["spark-1"]) == sorted(c.id for c in cells if not c.reference_of)


def test_the_plan_says_what_was_added(tmp_path):
    cells = _cells(tmp_path)
    plan = _plan(cells, HOSTS)
    words = plan.words({c.id: c for c in cells})
    assert words[0].startswith("plan: checkpoint spread over 2 hosts") and "0.60x" in words[0]
    (line,) = [w for w in words if "idle otherwise" in w]
    assert line.startswith("plan: spark-3, spark-4: idle otherwise: ")
    assert "spark-3: a second start of block uns-fast (4 cells, as on spark-1)" in line
    assert "spark-4: a second start of block fp8 (4 cells, as on spark-2)" in line
    assert "the wall stays about 0.60x" in line


def test_replicates_come_in_whole_rounds_and_a_host_left_over_is_named_idle(tmp_path):
    cells = _cells(tmp_path)
    by_id = {c.id: c for c in cells}
    three = _plan(cells, HOSTS[:3])  # one spare host, two blocks: a replicate of one set only would unbalance them
    assert not three.replicates and three.idle == ("spark-3",) and not three.assignment["spark-3"]
    assert any("spark-3: idle: too few for one more start of every block" in w for w in three.words(by_id))
    six = _plan(cells, [f"spark-{i}" for i in range(1, 8)])  # 7 hosts: 2 blocks, 2 rounds of replicates, 1 idle
    assert [first for first, _ in six.replicates.values()] == ["spark-1", "spark-2", "spark-1", "spark-2"]
    assert six.idle == ("spark-7",)
    assert "spark-5: a third start of block uns-fast" in next(w for w in six.words(by_id) if "idle otherwise" in w)
    assert six.wall_s == _plan(cells, HOSTS[:2]).wall_s


def test_an_unsplit_plan_keeps_its_spare_hosts_idle():
    """quick.toml stays on one host (a split would not pay for its reference): its spare hosts are not used, as
    before (tests/test_host_effects.py); replicates are added to split plans only."""
    spec = load_spec(EXAMPLES / "quick.toml")
    cells = blocks.with_reference(plan_cells(spec, "s1", FACTS, {"spark_runtime": "process"}))
    plan = _plan(cells, ["s1", "s2", "s3"])
    assert plan.spread == () and not plan.replicates and sum(bool(ids) for ids in plan.assignment.values()) == 1


def test_the_plan_is_deterministic_and_a_resume_keeps_the_ids_and_hands_out_only_what_is_missing(tmp_path):
    cells = _cells(tmp_path)
    first = _plan(cells, HOSTS)
    assert first == _plan(_cells(tmp_path), HOSTS)  # a re-run plans the same (the same ids too)
    done: dict[str, set[str]] = {}
    for h, ids in first.assignment.items():
        for cid in ids[:2]:  # a block's first host and its replicate finished the same cells: both are kept apart
            done.setdefault(cid, set()).add(h)
    again = _plan(cells, HOSTS, done)
    for h in HOSTS:
        assert again.assignment[h] == first.assignment[h][2:]
    # a cell measured on a host outside its plan (a lost host's cell, handed on) counts as one of its copies
    spare, (home, block) = next(iter(first.replicates.items()))
    cid = block[-1]
    other = next(h for h in HOSTS if h not in (spare, home))
    moved = _plan(cells, HOSTS, {cid: {other}})
    assert cid in moved.assignment[home] and cid not in moved.assignment[spare]
    assert cid not in _plan(cells, HOSTS, {cid: {other, home}}).assignment[spare]


def test_server_starts_stay_interleaved_on_the_replicate_host(tmp_path):
    cells = _cells(tmp_path, starts=2)
    by_id = {c.id: c for c in cells}
    plan = _plan(cells, HOSTS)
    assert set(plan.replicates) == {"spark-3", "spark-4"}
    for h in plan.replicates:
        order = [by_id[cid].config.server_start for cid in plan.assignment[h]]
        assert order == [1, 1, 1, 1, 2, 2, 2, 2]  # A1 B1 C1 D1 A2 B2 C2 D2, as on its first host
    line = next(w for w in plan.words(by_id) if "idle otherwise" in w)
    assert "spark-3: 2 more starts of block uns-fast (8 cells, as on spark-1)" in line


def test_the_hand_out_gives_the_replicates_and_only_to_hosts_of_the_same_group(tmp_path):
    """detach.assign hands out the blocked plan per fingerprint group: a host whose logged vLLM differs is a group of
    its own and measures its own plan, never a replicate of the others' blocks."""
    hosts = [*HOSTS, "spark-5"]
    cells = {h: _cells(tmp_path, host=h) for h in hosts}
    g = groups.group_facts(
        dict.fromkeys(hosts, FACTS), vllm_versions={**dict.fromkeys(HOSTS, "0.24.0"), "spark-5": "0.25.0"}
    )
    assert [list(x.hosts) for x in g] == [HOSTS, ["spark-5"]]
    said: list[str] = []
    out = detach.assign(g, cells, cells, 1, said)
    assert all(out[h] for h in hosts) and sum(len(out[h]) for h in HOSTS) == 8 + 1 + 8  # cells, reference, replicates
    assert sorted(out["spark-5"]) == sorted(c.id for c in cells["spark-5"] if not c.reference_of)
    assert out["spark-3"] == _full(cells["spark-1"], out["spark-1"]) and out["spark-4"] == out["spark-2"][1:]
    assert any("idle otherwise" in line for line in said)
    # in one group of five, the fifth host is left over (two blocks, one round of replicates) and said so
    said = []
    five = detach.assign(groups.group_facts(dict.fromkeys(hosts, FACTS)), cells, cells, 1, said)
    assert not five["spark-5"] and any("spark-5: idle" in line for line in said)


def _measured(host: str, ckpt: str, moe: str, speed: float, rng: random.Random, levels=(1, 4, 16)) -> dict:
    rate = {"marlin": 100.0, "b12x": 90.0}[moe]
    runs = [
        {
            "concurrency": c,
            "repeat": r,
            "ok": True,
            "output_throughput": rate * c**0.5 * speed * rng.lognormvariate(0, 0.01),
        }
        for c in levels
        for r in range(3)
    ]
    config = {"checkpoint": ckpt, "moe_backend": moe, "concurrency": list(levels), "duration_s": 4.0}
    facts = {"fingerprint": "fp", "gpu_name": "NVIDIA GB10"}
    return {"host": host, "verdict": "valid", "facts": facts, "config": config, "runs": runs, "cell_id": ckpt + moe}


def test_the_judging_links_a_replicate_host_by_its_block_and_keeps_its_starts_apart():
    """What the report makes of replicate blocks as it is (judging unchanged): each host's block is compared on that
    host (more head-to-head points, none across hosts), the replicate host's effect is measured on the block's
    shared points without a reference cell, and the copies show in "Replicas across hosts". A copy on another host
    is not a second server start of the config on one host (summary.merge_starts keeps hosts apart), so the noise
    floor and the two-starts rule are not served by it."""
    rng = random.Random(5)
    speed = {"h1": 1.0, "h2": 0.97, "h3": 1.02, "h4": 0.99}
    cells = [
        _measured(h, ck, moe, speed[h], rng)
        for h, ck in (("h1", "a"), ("h2", "b"), ("h3", "a"), ("h4", "b"))
        for moe in ("marlin", "b12x")
    ]
    ref = _measured("h2", "a", "marlin", speed["h2"], rng, levels=(16,))
    ref["cell_id"] = "reference"
    summaries = summary.summarize_cells([*cells, ref])
    effects = hosteffect.estimate([s for s in summaries if s.rankable])
    assert set(effects.effects) == {"h1", "h2", "h3", "h4"}  # h3 and h4 linked through their blocks alone
    assert all(not e.outlier for e in effects.effects.values())
    [rec] = stats.recommend(summaries)
    backend = next(q for q in rec.questions if q.axis == "backend")
    assert len(backend.matchups) == 12 and all(not m.ranking.across for m in backend.matchups)  # 4 hosts x 3 levels
    assert {p.hosts for p in replicas.replica_points(summaries)} == {("h1", "h3"), ("h2", "h4")}
    assert rec.noise is None  # one start per config per host: the copies are not A/A pairs of one host


def test_a_resume_with_nothing_left_says_so_not_spread_over_0_hosts(tmp_path):
    """Issue 47.7: a resume after `calibrate`, every cell measured: the plan's words name no count of hosts."""
    cells = _cells(tmp_path)
    plan = dataclasses.replace(_plan(cells, HOSTS), assignment={h: [] for h in HOSTS}, replicates={})
    words = plan.words({c.id: c for c in cells})
    assert words == ["plan: nothing left to measure: every planned cell is in the results tree"], words
