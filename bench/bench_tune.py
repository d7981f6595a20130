"""Full grid vs `spark-agent tune` on the simulated Spark, over many seeds, on a virtual clock.

    python bench/bench_tune.py                       # NVFP4 + FP8 rounds of examples/, 20 seeds, 60 s windows
    python bench/bench_tune.py --seeds 5 --specs examples/gb10-nvfp4.toml

Hours of 60 s windows per seed cannot run in real time, so this drives the SAME decision code as `tune`
(agent/judging/sequential.plan_next) and the SAME report rule (agent/judging/stats.recommend) over windows drawn
from the SAME simulated Spark: the agent plans the cells (planning/matrix.plan_cells on simulated GB10 facts, env
rules included), the simulator decides what each server loads or how it fails (sim/plan.make_plan) and draws every
window's throughput from its calibrated rate model and noise (sim/ratemodel.RateModel, one phase per window), and
startups take the calibrated cold/warm phases (calibration.toml [startup], sim/warmstart.py). Time is counted in
simulated minutes: startup + (warmup + windows) x duration per level + PER_CELL_OVERHEAD_S for the playbooks.
What it does not exercise: SSH, Ansible, the load driver's own noise (short windows' token quantization); the
integration test tests/test_tune.py runs `tune` through all of those on the real simulator.

Prints per round: same recommendation (x of N), median wall-time ratio adaptive / full, any winner where the full
grid says "cannot rank", and the share of time spent measuring with cold starts (no cache) vs warm starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.hostside import facts as host_facts
from agent.judging import sequential as seq
from agent.judging import stats, summary
from agent.planning import matrix
from agent.planning.spec import load_spec
from agent.running.tune import candidate
from agent.sim import calibration, warmstart
from agent.sim import options as sim_options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel

PER_CELL_OVERHEAD_S = 20.0  # ASSUMPTION: cell playbook (serve, bench, collect, teardown) on a LAN, outside startup
DRIVER_SHARE = 0.98  # calibration.toml: the load driver measures ~2% below the decode rate (TTFT is not decode)
FAIL_SHARE = 0.3  # a server that fails at startup: about this share of a start is spent before it dies


@dataclass
class SimCell:
    cell: matrix.Cell
    verdict: str  # valid | invalid | failed
    rate: RateModel | None
    weights_gib: float


def sim_cells(spec_path: str, seed: int, max_starts: int = 0) -> list[SimCell]:
    """The spec's cells; max_starts > 0: planned as tune plans them (every config up to that many starts)."""
    spec = load_spec(spec_path)
    if max_starts:
        spec = dataclasses.replace(spec, server_starts=max(spec.server_starts, max_starts))
    facts = host_facts.gather(simulate_gpu="gb10")
    cells = matrix.plan_cells(spec, "spark-sim", facts, {"spark_runtime": "process"})
    out = []
    for i, cell in enumerate(cells):
        env = {**cell.env, **cell.host_env}
        opts = sim_options.parse(cell.argv[2:], env) if cell.argv[:2] == ["vllm", "serve"] else None
        if opts is None:
            raise SystemExit(f"unexpected serve command: {cell.argv[:3]}")
        plan = make_plan(opts, env)
        requested = cell.config.moe_backend
        if plan.failure is not None:
            verdict, rate = "failed", None
        else:
            verdict = "valid" if not requested or plan.moe_loaded == requested else "invalid"
            rate = RateModel(plan, False, random.Random(seed * 1000 + i))
        gib = calibration.load()["checkpoints"].get(plan.checkpoint, {}).get("weights_gib", 22.0)
        out.append(SimCell(cell, verdict, rate, gib))
    return out


class Clock:
    """Virtual time of one host: startups (cold until the image's cache holds the model's graphs), windows."""

    def __init__(self, warm_cache: bool):
        self.t = 0.0
        self.measure = 0.0
        self.startup = 0.0
        self.compiled: set[str] = set()
        self.warm_cache = warm_cache

    def start(self, c: SimCell) -> None:
        st = calibration.load()["startup"]
        key = f"{c.cell.config.model}|{c.cell.config.quant}"
        warm = self.warm_cache and key in self.compiled
        compile_s = st["cache_load_s"] if warm else st["compile_cold_s"]
        total = (
            c.weights_gib / st["weights_gib_per_s"]
            + st["dynamo_s"]
            + compile_s
            + st["graph_capture_s"]
            + st["profile_kv_s"]
            + st["api_s"]
        )
        if c.verdict == "failed":
            total *= FAIL_SHARE
        elif self.warm_cache:
            self.compiled.add(key)
        self.t += total + PER_CELL_OVERHEAD_S
        self.startup += total

    def windows(self, levels: int, warmup: int, repeats: int, duration: float) -> None:
        spent = levels * (warmup + repeats) * duration
        self.t += spent
        self.measure += spent


def measure(c: SimCell, levels: list[int], repeats: int, clock: Clock) -> dict[str, Any]:
    """The cell dict load_cells would give after running these levels x repeats."""
    cfg = c.cell.config
    clock.start(c)
    runs = []
    if c.rate is not None:
        clock.windows(len(levels), cfg.warmup, repeats, cfg.duration_s)
        for lvl in levels:
            for r in range(1, repeats + 1):
                c.rate.new_phase()
                runs.append(
                    {
                        "concurrency": lvl,
                        "repeat": r,
                        "ok": True,
                        "output_throughput": c.rate.aggregate_tok_s(lvl) * DRIVER_SHARE,
                    }
                )
    config = dict(cfg.to_dict(), concurrency=list(levels), repeats=repeats)
    return {
        "cell_id": c.cell.id,
        "host": c.cell.host,
        "status": "failed" if c.verdict == "failed" else "done",
        "verdict": c.verdict,
        "config": config,
        "facts": {"arch": "gb10", "simulated": True},
        "runs": runs,
    }


def full_grid(cells: list[SimCell], warm_cache: bool) -> tuple[list[dict[str, Any]], Clock]:
    clock = Clock(warm_cache)
    out = [measure(c, list(c.cell.config.concurrency), c.cell.config.repeats, clock) for c in cells]
    return out, clock


def adaptive(cells: list[SimCell], settings: seq.TuneSettings) -> tuple[list[dict[str, Any]], Clock, seq.Plan]:
    clock = Clock(warm_cache=True)
    by_id = {c.cell.id: c for c in cells}
    cands = [candidate(c.cell) for c in cells]
    measured: dict[str, dict[str, Any]] = {}
    for _ in range(100):
        plan = seq.plan_next(cands, measured, settings)
        if plan.done:
            return list(measured.values()), clock, plan
        for step in plan.steps:
            new = measure(by_id[step.cell_id], list(step.concurrency), step.repeats, clock)
            if step.keep:  # as collect does for tune's full step: the other levels' windows stay
                kept = [r for r in measured[step.cell_id]["runs"] if r["concurrency"] not in step.concurrency]
                new["runs"] = kept + new["runs"]
            measured[step.cell_id] = new
    raise RuntimeError("the plan did not end")


def winner(cells: list[dict[str, Any]]) -> str | None:
    recs = stats.recommend(summary.summarize_cells(cells))
    return recs[0].winner if recs else None


def backend_winner(cells: list[dict[str, Any]]) -> str | None:
    """The backend question's answer alone (the question a sweep exists for; the other axes' gaps are a few per
    cent here, so two full grids of different seeds already disagree on them)."""
    recs = stats.recommend(summary.summarize_cells(cells))
    return next((q.winner for q in recs[0].questions if q.axis == "backend"), None) if recs else None


def run_round(spec: str, seeds: int, settings: seq.TuneSettings) -> dict[str, Any]:
    same, same_backend, ratios, wrong, undecided, tied = 0, 0, [], 0, 0, 0
    share_cold, share_warm = [], []
    full_min, tune_min = [], []
    for seed in range(seeds):
        full_cells, full_clock = full_grid(sim_cells(spec, seed), warm_cache=True)
        _, cold_clock = full_grid(sim_cells(spec, seed), warm_cache=False)
        tuned, tune_clock, plan = adaptive(sim_cells(spec, seed, settings.max_starts), settings)
        w_full, w_tune = winner(full_cells), winner(tuned)
        same += w_full == w_tune
        same_backend += backend_winner(full_cells) == backend_winner(tuned)
        wrong += w_full is None and w_tune is not None
        undecided += bool(plan.open_points)
        tied += bool(plan.tied)
        ratios.append(tune_clock.t / full_clock.t)
        full_min.append(full_clock.t / 60)
        tune_min.append(tune_clock.t / 60)
        share_cold.append(cold_clock.measure / cold_clock.t)
        share_warm.append(full_clock.measure / full_clock.t)
        print(
            f"  seed {seed:2d}: full {w_full or 'cannot rank'} in {full_clock.t / 60:6.1f} min | "
            f"tune {w_tune or 'cannot rank'} in {tune_clock.t / 60:6.1f} min "
            f"({tune_clock.t / full_clock.t:.0%}); open points {len(plan.open_points)}, tied {len(plan.tied)}",
            flush=True,
        )
    return {
        "spec": spec,
        "seeds": seeds,
        "same": same,
        "same_backend": same_backend,
        "median_ratio": statistics.median(ratios),
        "max_ratio": max(ratios),
        "wrong_winner": wrong,
        "undecided_runs": undecided,
        "tied_runs": tied,
        "full_min": statistics.median(full_min),
        "tune_min": statistics.median(tune_min),
        "share_cold": statistics.median(share_cold),
        "share_warm": statistics.median(share_warm),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--specs", nargs="*", default=["examples/gb10-nvfp4.toml", "examples/gb10-fp8.toml"])
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--min-repeats", type=int, default=2)
    ap.add_argument("--carry-margin", type=float, default=1.25)
    args = ap.parse_args()
    rows = []
    for spec in args.specs:
        settings = seq.TuneSettings(
            confidence=args.confidence,
            min_repeats=args.min_repeats,
            max_repeats=load_spec(spec).repeats,
            carry_margin=args.carry_margin,
            sweep_repeats=load_spec(spec).repeats,
            sweep_starts=load_spec(spec).server_starts,
        )
        print(f"{spec}:", flush=True)
        rows.append(run_round(spec, args.seeds, settings))
    print()
    for r in rows:
        print(
            f"{r['spec']}: same recommendation {r['same']}/{r['seeds']} (backend question {r['same_backend']}/"
            f"{r['seeds']}); tune/full wall time median "
            f"{r['median_ratio']:.0%} (max {r['max_ratio']:.0%}; {r['tune_min']:.0f} vs {r['full_min']:.0f} simulated "
            f"min); winner where full says cannot rank: {r['wrong_winner']}; runs with undecided points: "
            f"{r['undecided_runs']}; runs ending in a tie: {r['tied_runs']}; share of time measuring, full grid: cold starts {r['share_cold']:.0%}, "
            f"warm starts {r['share_warm']:.0%}"
        )
    st = calibration.load()["startup"]
    cold = 22.0 / st["weights_gib_per_s"] + st["dynamo_s"] + st["compile_cold_s"]
    warm = 22.0 / st["weights_gib_per_s"] + st["dynamo_s"] + st["cache_load_s"]
    rest = st["graph_capture_s"] + st["profile_kv_s"] + st["api_s"]
    print(f"startup of a 22 GiB NVFP4 checkpoint: cold {cold + rest:.0f} s, warm {warm + rest:.0f} s (simulated)")
    _ = warmstart  # the simulator's own cold/warm logic: tests/test_tune.py checks it end to end
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
