"""`spark-agent tune`: drive the sweep machinery one adaptive step at a time until the answer is settled.

The decisions (which cell next, at which levels, how many windows, what is skipped) are agent/judging/sequential.py;
this module only loops: read what the results tree holds, ask for the next steps, run exactly those cells through
running/follow.run_sweep (its `select` hook: exactly those cells are handed out to the runners), and stop when the plan is done, the budget cannot fit the next step, or
the run is interrupted. All state is the results tree, so a killed tune resumes where it was (a cell without
cell.toml is measured again) and a re-run with the same data takes the same decisions.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agent import logs
from agent.errors import UserError
from agent.hostside.utc import iso
from agent.judging import correctness, stats
from agent.judging import sequential as seq
from agent.planning import blocks
from agent.planning.inventory import Host
from agent.planning.matrix import Cell, backend_label
from agent.planning.spec import Spec
from agent.results import tree as results
from agent.running import calibration
from agent.running.follow import run_sweep
from agent.running.progress import Progress
from agent.running.queue import estimated_seconds
from agent.running.sweep import HostOutcome, SweepOutcome

log = structlog.get_logger("spark_agent.tune")

TUNE_FILE = "tune.toml"  # results/<sweep>/tune.toml: what tune decided, written atomically after every step


def _say_step(n: int, chosen: dict[str, list[Cell]]) -> None:
    """One line per step, so a tune without a progress bar is never silent for minutes."""
    runs = sum(len(cs) for cs in chosen.values())
    where = ", ".join(f"{h} {len(cs)}" for h, cs in sorted(chosen.items()) if cs)
    logs.say("tune_step", f"tune: step {n}: {runs} cell run(s) ({where})")


def all_steps(rounds: list[SweepOutcome]) -> SweepOutcome | None:
    """The steps' outcomes as one: each cell once, in the bucket of the last step that ran it (a cell a later step
    did not run keeps its earlier bucket), so the summary counts the whole tune, not its last step."""
    if not rounds:
        return None
    last = rounds[-1]
    hosts: dict[str, HostOutcome] = {}
    for rnd in rounds:
        for name, o in rnd.hosts.items():
            merged = hosts.setdefault(name, HostOutcome(host=name))
            ran = set(o.done) | set(o.lost) | set(o.requeued)
            for bucket in ("measured", "wrong", "invalid", "failed"):
                kept = [c for c in getattr(merged, bucket) if c not in ran]
                setattr(merged, bucket, kept + [c for c in getattr(o, bucket) if c not in kept])
            for bucket in ("lost", "requeued"):
                table = {c: w for c, w in getattr(merged, bucket).items() if c not in ran}
                setattr(merged, bucket, table | getattr(o, bucket))
            merged.skipped = {c: v for c, v in merged.skipped.items() if c not in ran}
            for cid, verdict in o.skipped.items():
                if not merged.accounted(cid):
                    merged.skipped[cid] = verdict
            merged.planned = sorted(set(merged.planned) | set(o.planned))
            merged.error, merged.host_lost = o.error or merged.error, o.host_lost or merged.host_lost
    return dataclasses.replace(last, hosts=hosts)


@dataclass
class TuneOutcome:
    sweep_dir: Path
    steps: list[dict[str, Any]] = field(default_factory=list)  # what ran, in order
    skipped: list[seq.Skip] = field(default_factory=list)
    stopped: list[seq.Skip] = field(default_factory=list)
    open_points: list[str] = field(default_factory=list)
    tied: list[str] = field(default_factory=list)  # open at limits that reach the spec's schedule: cannot rank
    budget_left: list[str] = field(default_factory=list)  # the steps the budget could not fit
    rounds: list[SweepOutcome] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False
    fatal: str = ""
    next_s: float = 0.0  # the expected wall time of the step being run (hosts in parallel)
    slowdown: float = 1.0  # the most a step took over its expectation so far: later steps are expected as slow

    @property
    def settled(self) -> bool:
        return not self.open_points and not self.budget_left and not self.interrupted and not self.fatal


def step_cost_s(cell: Cell, step: seq.Step, startup_s: float) -> float:
    """Wall time one step should take: a server start plus every window (warmups included)."""
    c = cell.config
    return startup_s + len(step.concurrency) * (c.warmup + step.repeats) * c.duration_s


def smallest_cell_s(spec: Spec, settings: seq.TuneSettings) -> float:
    """The measuring time of the cheapest cell tune can run (one screen at min repeats, no startup)."""
    return len(seq.screen_levels(spec.concurrency)) * (spec.warmup + settings.min_repeats) * spec.duration_s


def check_budget(spec: Spec, settings: seq.TuneSettings, budget_s: float | None) -> None:
    """Bad input, before any host is touched: a budget that cannot fit even one cell."""
    if budget_s is None:
        return
    need = smallest_cell_s(spec, settings)
    if budget_s < need:
        raise UserError(
            f"--budget {budget_s:.0f}s cannot fit even one cell: the smallest step measures for {need:.0f}s "
            f"({len(seq.screen_levels(spec.concurrency))} levels x ({spec.warmup} warmup + {settings.min_repeats} "
            f"windows) x {spec.duration_s:g}s); give at least {need / 60:.0f}m"
        )


def run_tune(
    spec: Spec,
    inventory: Path,
    hosts: list[Host],
    results_root: Path,
    settings: seq.TuneSettings,
    budget_s: float | None = None,
    evict: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> TuneOutcome:
    """Loop: plan from the results tree, run the planned steps, until settled, out of budget or interrupted.
    Every config is planned with up to --max-starts server starts; a later start runs only as a START step."""
    spec = dataclasses.replace(spec, server_starts=max(spec.server_starts, settings.max_starts))
    sweep_dir = Path(results_root) / spec.name
    outcome = TuneOutcome(sweep_dir)
    calibrated = calibration.calibrated_hosts(results_root, spec.image)
    t0 = time.monotonic()
    last: set[tuple[str, str, tuple[int, ...], int]] = set()
    placed: dict[str, Placed] = {}  # the placement, once the first step has planned the cells (pure: it holds)
    while True:
        chosen: dict[str, list[Cell]] = {}
        if placed:  # a later step: planned before any host is touched, and run only on the hosts that have work
            chosen.update(_choose(placed, sweep_dir, settings, budget_s, time.monotonic() - t0, outcome))
            if not any(chosen.values()):
                break  # the plan is done, or the budget cannot fit the next step

        def select(cells: dict[str, list[Cell]], chosen: dict[str, list[Cell]] = chosen) -> dict[str, list[Cell]]:
            if not placed:  # the first step, past every check: the tune begins its run of the sweep (the store's key)
                results.begin_run(results_root, spec.name, True, iso(), None)
                placed.update(place(cells, calibrated))
                chosen.update(_choose(placed, sweep_dir, settings, budget_s, time.monotonic() - t0, outcome))
            return {h: chosen.get(h, []) for h in cells}

        busy = [h for h in hosts if chosen.get(h.name)] if chosen else hosts
        if placed:  # the first step says its plan as the sweep does; each later one says what it runs now
            _say_step(len(outcome.rounds) + 1, chosen)
        began = time.monotonic()
        try:
            rnd = run_sweep(
                spec, inventory, busy, results_root, fresh=True, evict=evict, progress=progress, cancel=cancel,
                select=select,
            )  # fmt: skip
        except KeyboardInterrupt:
            outcome.interrupted = True
            break
        if not any(chosen.values()):
            break  # the plan is done, or the budget cannot fit the first step
        outcome.rounds.append(rnd)
        if outcome.next_s > 0:  # playbooks, collection, a loaded controller: what the estimate leaves out
            outcome.slowdown = max(outcome.slowdown, (time.monotonic() - began) / outcome.next_s)
        outcome.steps += [
            {"host": h, "cell_id": c.id, "label": c.label, "concurrency": list(c.config.concurrency),
             "repeats": c.config.repeats, "at": iso()}
            for h, cs in chosen.items() for c in cs
        ]  # fmt: skip
        _write_record(outcome, settings, budget_s, time.monotonic() - t0)
        if rnd.interrupted:
            outcome.interrupted = True
            break
        if rnd.fatal:
            outcome.fatal = rnd.fatal
            break
        if rnd.totals()["lost"]:
            outcome.fatal = "a cell was lost (the sweep summary above says why); re-run tune to resume"
            break
        now = {(h, c.id, tuple(c.config.concurrency), c.config.repeats) for h, cs in chosen.items() for c in cs}
        if now == last:  # the same runs again: what they measured did not reach the results tree
            outcome.fatal = "the same cells were chosen twice in a row without new windows; re-run tune to resume"
            break
        last = now
    outcome.elapsed_s = time.monotonic() - t0
    _write_record(outcome, settings, budget_s, outcome.elapsed_s)
    return outcome


@dataclass
class Placed:
    """One host's share of the tune: the spec's cells it compares (its comparison sets), and the reference cell it
    measures once so that comparisons crossing hosts can divide out its effect ("" when none is needed)."""

    cells: list[Cell]
    reference: Cell | None = None
    checks: list[Cell] = field(default_factory=list)  # probe-only starts ([correctness] eager_start)


def place(cells: dict[str, list[Cell]], calibrated: dict[str, float] | None = None) -> dict[str, Placed]:
    """Which host tunes which cells: the sweep's blocked plan (planning/blocks.py) over each group of equal hosts
    (hosts that plan the same cell ids), so each comparison set stays on one host for every step, and each host but
    one measures the group's reference cell. Pure: the same cells and hosts place the same at every step."""
    groups: dict[frozenset[str], list[str]] = {}
    for host, cs in cells.items():
        groups.setdefault(frozenset(c.id for c in cs), []).append(host)
    out: dict[str, Placed] = {}
    for members in groups.values():
        first = cells[members[0]]
        if len(members) == 1:
            out[members[0]] = _share([c for c in first if not c.reference_of])
            continue
        estimate = {c.id: estimated_seconds(c) for c in first}
        plan = blocks.plan_group(members, first, {}, estimate, calibrated)
        for host in members:
            by_id = {c.id: c for c in cells[host]}
            ref_id = plan.references.get(host, "") if host != plan.home else ""
            mine = [by_id[cid] for cid in plan.assignment[host] if cid != ref_id and not by_id[cid].reference_of]
            out[host] = _share(mine, by_id.get(ref_id))
    return out


def _share(cells: list[Cell], reference: Cell | None = None) -> Placed:
    """A probe-only start has no windows to tune: it runs once, in the first round (_choose)."""
    return Placed([c for c in cells if not c.config.probe_only], reference, [c for c in cells if c.config.probe_only])


def _choose(
    placed: dict[str, Placed],
    sweep_dir: Path,
    settings: seq.TuneSettings,
    budget_s: float | None,
    elapsed_s: float,
    outcome: TuneOutcome,
) -> dict[str, list[Cell]]:
    """Per host: its reference cell if not measured yet, then the cells of the plan's next steps for the cells it
    compares (each with its step's levels and repeats, its id kept). Each host's plan reads only its own
    measurements: a comparison set's windows never mix hosts."""
    measured = _measured(sweep_dir)
    startup = _typical_startup([c for m in measured.values() for c in m.values()])
    chosen: dict[str, list[Cell]] = {h: [] for h in placed}
    outcome.skipped, outcome.stopped, outcome.open_points, outcome.budget_left, outcome.tied = [], [], [], [], []
    costs: dict[str, float] = {}
    for host, share in placed.items():
        mine = measured.get(host, {})
        ref = share.reference
        if ref is not None and ref.id not in mine:  # first: a host lost later has usually measured it
            chosen[host].append(ref)
            costs[host] = costs.get(host, 0.0) + startup + estimated_seconds(ref)
        for check in share.checks:  # once: a checks-only start is done when it is recorded, whatever it found
            if check.id not in mine:
                chosen[host].append(check)
                costs[host] = costs.get(host, 0.0) + startup
        by_id = {c.id: c for c in share.cells}
        afford = _afford(share.cells, settings, budget_s, elapsed_s, startup, outcome.slowdown)
        plan = seq.plan_next([candidate(c) for c in share.cells], mine, settings, afford)
        outcome.skipped += plan.skipped
        outcome.stopped += plan.stopped
        outcome.open_points += [f"{host}: {p}" for p in plan.open_points]
        outcome.tied += [f"{host}: {p}" for p in plan.tied]
        if plan.steps:
            log.info(
                "tune_plan",
                host=host,
                next=[f"{s.stage} {by_id[s.cell_id].label} c={list(s.concurrency)} x{s.repeats}" for s in plan.steps],
                stopped=[f"{s.label}: {s.reason}" for s in plan.stopped] or None,
                why_open=_why_open(plan, share.cells, mine, settings) or None,
            )
        for step in plan.steps:
            cell = by_id[step.cell_id]
            config = dataclasses.replace(cell.config, concurrency=list(step.concurrency), repeats=step.repeats)
            chosen[host].append(dataclasses.replace(cell, config=config, keep_runs=step.keep))
            costs[host] = costs.get(host, 0.0) + step_cost_s(cell, step, startup)
    need = max(costs.values(), default=0.0) * outcome.slowdown  # hosts run in parallel
    outcome.next_s = need / outcome.slowdown
    if budget_s is not None and need and elapsed_s + need > budget_s:
        outcome.budget_left = [f"{h}: {c.label} ({c.config.repeats} windows at c={c.config.concurrency})"
                               for h, cs in chosen.items() for c in cs]  # fmt: skip
        log.warning("budget_exhausted", elapsed_s=round(elapsed_s), next_step_s=round(need), budget_s=budget_s)
        return {h: [] for h in placed}
    return chosen


def _afford(
    cells: list[Cell],
    settings: seq.TuneSettings,
    budget_s: float | None,
    elapsed_s: float,
    startup: float,
    slowdown: float,
) -> int | None:
    """How many more server starts per config of a pair the budget left fits (a start of each side: every level,
    --min-repeats windows, as a START step runs), or None without a budget."""
    if budget_s is None or not cells:
        return None
    c = cells[0]
    one = step_cost_s(c, seq.Step(c.id, seq.START, tuple(c.config.concurrency), settings.min_repeats), startup)
    return int(max(budget_s - elapsed_s, 0.0) // (2 * one * max(slowdown, 1.0))) if one > 0 else None


def _why_open(
    plan: seq.Plan, planned: list[Cell], measured: dict[str, dict[str, Any]], s: seq.TuneSettings
) -> list[str]:
    """For the log: why the cells about to get more windows are not settled yet."""
    ids = {st.cell_id for st in plan.steps if st.stage != seq.SCREEN}
    groups = {candidate(c).group for c in planned if c.id in ids}
    cands = [candidate(c) for c in planned if c.id in measured and candidate(c).group in groups]
    return [
        f"{c.label} @ c={lvl}: {why}"
        for c in cands
        for lvl, why in seq.open_against_leader(cands, measured, s).get(c.cell_id, [])
    ]


def candidate(cell: Cell) -> seq.Candidate:
    config = cell.config.to_dict()
    return seq.Candidate(
        cell_id=cell.id,
        group=stats.pairing_key({"host": cell.host, "config": config}),
        backend=backend_label(config),
        label=cell.label,
        concurrency=tuple(cell.config.concurrency),
        start=cell.config.server_start,
    )


def _measured(sweep_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """host -> cell id -> its cell dict: what each host measured (a cell measured on two hosts is two cells)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if sweep_dir.exists():
        for c in correctness.judged_cells(sweep_dir):
            out.setdefault(str(c.get("host", "")), {})[str(c.get("cell_id", ""))] = c
    return out


def _typical_startup(measured: list[dict[str, Any]]) -> float:
    """The median startup seen so far in this sweep (warm starts count), 0 before any."""
    seen = [float(c.get("startup_s", 0.0)) for c in measured if c.get("startup_s")]
    return statistics.median(seen) if seen else 0.0


def _write_record(outcome: TuneOutcome, settings: seq.TuneSettings, budget_s: float | None, elapsed: float) -> None:
    """tune.toml: the decisions, so the report can say what was skipped and why, and what stayed undecided."""
    if not outcome.sweep_dir.exists():
        return
    record = {
        "schema": 1,
        "settings": {**dataclasses.asdict(settings), "looks": seq.LOOKS, "look_alpha": settings.look_alpha},
        "budget_s": budget_s if budget_s is not None else -1.0,
        "elapsed_s": round(elapsed, 3),
        "interrupted": outcome.interrupted,
        "steps": outcome.steps,
        "skipped": [dataclasses.asdict(s) for s in outcome.skipped],
        "stopped": [dataclasses.asdict(s) for s in outcome.stopped],
        "open_points": outcome.open_points,
        "tied": outcome.tied,
        "budget_left": outcome.budget_left,
    }
    results.atomic_write_toml(outcome.sweep_dir / TUNE_FILE, record)
