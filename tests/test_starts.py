"""The server start as the unit of replication: server_starts plans interleaved starts, the nested noise model
(windows within starts), and the rule that names no winner under 25% without two interleaved starts each,
judged on numbers drawn from the simulator's own two-layer noise (agent/sim/ratemodel.py)."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from agent.hostside import facts
from agent.judging import nested, stats, summary
from agent.judging.correctness import judged_cells
from agent.planning import blocks, matrix
from agent.planning.spec import load_spec
from agent.reporting import markdown as report
from agent.sim import options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel, start_factor
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

LEVELS = (1, 8, 32)
SEEDS = range(20)


# ---------------------------------------------------------------- the nested variance estimate


def test_nested_estimate_by_hand():
    # two starts of three windows; logs make the variances relative
    a = [100.0, 102.0, 98.0]
    b = [110.0, 112.0, 108.0]
    est = nested.estimate([a, b])
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    within = (sum((x - statistics.fmean(la)) ** 2 for x in la) + sum((x - statistics.fmean(lb)) ** 2 for x in lb)) / 4
    between = statistics.variance([statistics.fmean(la), statistics.fmean(lb)]) - within / 3
    assert est.starts == 2 and est.windows == 6 and est.between_df == 1
    assert est.within == pytest.approx(within) and est.between == pytest.approx(between)
    assert math.sqrt(est.between) == pytest.approx(0.067, abs=0.002)  # ~ log(110/100) / sqrt(2)
    assert "between starts 6.7%" in est.words()


def test_one_start_leaves_the_between_start_variance_unknown():
    est = nested.estimate([[100.0, 101.0, 99.0]])
    assert est.between is None and not est.known and est.within is not None
    assert "between starts unknown (one start)" in est.words()
    assert nested.ratio_interval([[100.0, 101.0]], [[90.0, 91.0]], 0.95) is None


def test_between_start_variance_never_below_zero_and_pooling_weights_by_df():
    same = nested.estimate([[100.0, 110.0], [105.0, 105.0]])  # start means equal: all the noise is within
    assert same.between == 0.0
    p = nested.pooled([nested.estimate([[100.0], [110.0]]), nested.estimate([[100.0], [100.0], [100.0]])])
    assert p.between_df == 3 and p.between == pytest.approx(nested.estimate([[100.0], [110.0]]).between / 3)


def test_interleaved_means_each_first_start_before_the_others_second():
    assert nested.interleaved(["t1", "t3"], ["t2", "t4"])  # A B A B
    assert nested.interleaved(["t1", "t4"], ["t2", "t3"])  # A B B A
    assert not nested.interleaved(["t1", "t2"], ["t3", "t4"])  # A A B B: drift could pose as a difference
    assert not nested.interleaved(["t1"], ["t2", "t3"])  # one start: nothing to interleave
    assert not nested.interleaved(["", "t3"], ["t2", "t4"])  # an unknown start time is not evidence


# ---------------------------------------------------------------- planning: interleaved starts


SPEC = """
[sweep]
name = "starts"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:0f9c2b1e4d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
gpu_memory_utilization = 0.85
[matrix]
moe_backend = ["marlin", "flashinfer_b12x", "auto"]
concurrency = [1, 4]
repeats = 2
"""


def _plan(tmp_path: Path, starts: int) -> list[matrix.Cell]:
    path = tmp_path / f"s{starts}.toml"
    path.write_text(SPEC.replace("repeats = 2", f"repeats = 2\nserver_starts = {starts}"))
    gb10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())
    return matrix.plan_cells(load_spec(path), "spark-1", gb10, {"spark_runtime": "docker"})


def test_server_starts_plans_each_start_as_its_own_cell_and_start_one_keeps_its_id(tmp_path):
    one, three = _plan(tmp_path, 1), _plan(tmp_path, 3)
    assert [c.id for c in three[:3]] == [c.id for c in one]  # start 1 = today's cells, same ids
    assert [c.config.server_start for c in three] == [1, 1, 1, 2, 2, 2, 3, 3, 3]  # A1 B1 C1 A2 B2 C2 ...
    assert len({c.id for c in three}) == 9 and "server_start" not in three[0].config.to_dict()
    assert [c.config.moe_backend for c in three[3:6]] == [c.config.moe_backend for c in one]
    assert three[3].config.to_dict()["server_start"] == 2 and three[3].argv == one[0].argv  # the same server
    assert three[3].label == one[0].label + " (start 2)"


def test_a_host_runs_start_k_of_every_cell_before_any_start_k_plus_one(tmp_path):
    cells = blocks.with_reference(_plan(tmp_path, 2))
    estimate = {c.id: 60.0 * (i + 1) for i, c in enumerate(cells)}  # longest-first would put A2 before B1
    for hosts in (["spark-1"], ["spark-1", "spark-2"]):
        plan = blocks.plan_group(hosts, cells, {}, estimate)
        by_id = {c.id: c for c in cells}
        for h in hosts:
            order = [by_id[cid].config.server_start for cid in plan.assignment[h] if not by_id[cid].reference_of]
            assert order == sorted(order), (h, order)
            starts = {}
            for cid in plan.assignment[h]:  # a config's starts stay on one host
                starts.setdefault(matrix.start_key(by_id[cid].config.to_dict()), set()).add(h)
        homes: dict[str, set[str]] = {}
        for h in hosts:
            for cid in plan.assignment[h]:
                homes.setdefault(matrix.start_key(by_id[cid].config.to_dict()), set()).add(h)
        assert all(len(hs) == 1 for hs in homes.values())


# ---------------------------------------------------------------- the winner rule on the simulator's noise


def _sim_rate(seed: str) -> RateModel:
    plan = make_plan(options.parse(["fp8", "--moe-backend", "triton", "--sim-hardware", "h200"], env={}), {})
    assert plan.failure is None, plan.failure
    return RateModel(plan, unlimited=False, rng=random.Random(seed))


def _write_sim_starts(root: Path, backend: str, truth: float, seed: int, starts: int, noise: float) -> None:
    """`starts` server starts of one config on the simulated H200: each start its own speed (start_factor, as
    the simulator draws it for a cell), each window its own draw of the curve's noise (RateModel.new_phase)."""
    for k in range(1, starts + 1):
        cell = f"{backend}-s{k}"
        rate = _sim_rate(f"{seed}:{cell}:windows")
        rate.start_mult = start_factor(noise, seed, cell)
        values = {}
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
            started_at=f"2026-12-02T{10 + k:02d}:{0 if backend == 'triton' else 30:02d}:00Z",  # A1 B1 A2 B2
            elapsed_s=90.0,
        )


def _verdict(root: Path) -> stats.Recommendation:
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(root)))
    return rec


@pytest.mark.parametrize("seed", SEEDS)
def test_a_true_5_percent_difference_is_never_a_winner_on_one_start_each(tmp_path, seed):
    """10% between-start noise (each start 0.9-1.1x) on top of the H200 curve's 5% window noise."""
    _write_sim_starts(tmp_path, "triton", 1.05, seed, 1, 0.10)
    _write_sim_starts(tmp_path, "marlin", 1.0, seed, 1, 0.10)
    rec = _verdict(tmp_path)
    assert rec.winner is None, rec.reason
    if rec.questions[0].unresolved:  # it leads: the report says what resolving costs (90 s a start here)
        assert "1 more start each measures it (2 starts × 1.5 min = 3 min)" in rec.reason
    assert rec.noise is None


def test_a_true_30_percent_difference_is_found_in_at_most_two_starts_each(tmp_path):
    found = {}
    for seed in SEEDS:
        for starts in (1, 2):
            root = tmp_path / f"{seed}-{starts}"
            _write_sim_starts(root, "triton", 1.30, seed, starts, 0.10)
            _write_sim_starts(root, "marlin", 1.0, seed, starts, 0.10)
            rec = _verdict(root)
            if rec.winner:
                assert rec.winner == "triton"
                found[seed] = starts
                break
    # 10% uniform a start is a 5.8% standard deviation: at two starts each the detectable effect is about 30%
    # (judging/verdicts.detectable, two degrees of freedom a config however many levels share its starts)
    missed = sorted(set(SEEDS) - set(found))
    assert len(missed) <= 2, f"not found in 2 starts: {missed}"
    assert 2 in found.values()  # some seeds needed the second start: the one-start margin fell under 25%


def test_the_report_states_the_noise_floor_from_the_a_a_pairs(tmp_path):
    _write_sim_starts(tmp_path, "triton", 1.30, 3, 2, 0.10)
    _write_sim_starts(tmp_path, "marlin", 1.0, 3, 2, 0.10)
    rec = _verdict(tmp_path)
    assert rec.noise is not None and rec.noise.between is not None and rec.noise.within is not None
    # uniform +-10% a start: sd 5.8%; the windows' uniform +-5%: sd 2.9% (both estimated from a few starts)
    assert 0.0 <= math.sqrt(rec.noise.between) < 0.15 and 0.01 < math.sqrt(rec.noise.within) < 0.06
    lines = report.verdict_lines(rec)
    assert any(line.startswith("Noise floor (A/A") and "between starts" in line for line in lines)
    one = tmp_path / "one"
    _write_sim_starts(one, "triton", 1.30, 3, 1, 0.10)
    _write_sim_starts(one, "marlin", 1.0, 3, 1, 0.10)
    assert any("between server starts unknown" in line for line in report.verdict_lines(_verdict(one)))


def test_starts_not_interleaved_leave_a_close_call_unresolved(tmp_path):
    for backend, v, hour in (("triton", 108.0, 10), ("marlin", 100.0, 12)):  # A1 A2 then B1 B2
        for k in (1, 2):
            write_cell(
                tmp_path,
                backend=backend,
                checkpoint="fp8",
                quant="fp8",
                values={c: [v * c, v * c * 1.01, v * c * 0.99] for c in LEVELS},
                config={"server_start": k} if k > 1 else None,
                started_at=f"2026-12-02T{hour + k - 1:02d}:00:00Z",
            )
    rec = _verdict(tmp_path)
    assert rec.winner is None and "not interleaved in time" in rec.reason


def test_a_fleets_reference_cell_on_another_host_does_not_hold_back_a_close_call_made_on_one_host(tmp_path):
    """Three hosts: triton and marlin side by side on spark-1, two interleaved starts each, 10% apart; spark-2
    measured marlin once at the top level as the fleet's reference cell (host effects only). The comparison was
    made on spark-1 with two starts each: the reference's single start does not make it 'unresolved'."""
    for k in (1, 2):
        for backend, v, minute in (("triton", 110.0, 0), ("marlin", 100.0, 30)):
            write_cell(
                tmp_path,
                backend=backend,
                checkpoint="fp8",
                quant="fp8",
                values={c: [v * c, v * c * 1.01, v * c * 0.99] for c in LEVELS},
                config={"server_start": k} if k > 1 else None,
                started_at=f"2026-12-02T{9 + k:02d}:{minute:02d}:00Z",  # A1 B1 A2 B2
                elapsed_s=90.0,
            )
    write_cell(
        tmp_path, backend="marlin", checkpoint="fp8", quant="fp8", host="spark-2",
        values={LEVELS[-1]: [98.0 * LEVELS[-1]] * 3}, started_at="2026-12-02T10:00:00Z", elapsed_s=60.0,
    )  # fmt: skip
    rec = _verdict(tmp_path)
    assert rec.winner == "triton", rec.reason
