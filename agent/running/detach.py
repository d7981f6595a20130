"""Detached sweeps: each host gets its share as a plan file and runs it alone; the controller comes and goes.

hand_out() prepares the sweep exactly as an attached one (running/sweep.prepare: facts, groups, plan, provision),
splits each group's cells over its hosts (longest first, to the least-loaded host, `replicas` different hosts
per cell), and starts every host's runner (playbooks/fleet.yml → hostside/runner.py). What it handed out is kept
in results/.fleet/<sweep>.json, so any later `status` or `collect` knows the sweep without the laptop that started
it having stayed awake. collect() brings back every sealed cell not yet in the results tree (idempotent, safe while
the hosts run), declares a host lost after `lost_after` seconds without an answer, and hands its unfinished cells
to the other hosts of its group. Nothing a host says is trusted (progress is validated here, tars by archive.py).
"""

from __future__ import annotations

import errno
import json
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import structlog

from agent import logs
from agent.errors import UserError
from agent.hostside import utc
from agent.hostside.contracts import Facts, MemoryPlan
from agent.planning import blocks
from agent.planning import groups as fleet_groups
from agent.planning import matrix as plan
from agent.planning.inventory import Host
from agent.planning.matrix import Cell
from agent.planning.spec import Spec, load_spec
from agent.results import tree as results
from agent.running import calibration, fleetindex, hostdata, staterecord, tasks
from agent.running import collect as collecting
from agent.running import playbooks as fleet
from agent.running.identity import controller_identity
from agent.running.queue import estimated_seconds, longest_first
from agent.running.sweep import Prepared, prepare

log = structlog.get_logger("spark_agent.detach")

STATE_DIR = ".fleet"  # results/.fleet/<sweep>.json
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
LOST_AFTER_S = 120.0  # a host that has not answered for this long is lost: its unfinished cells go to the others


@dataclass
class FleetState:
    """What the controller handed out: the one record status and collect read (results/.fleet/<sweep>.json)."""

    sweep: str
    spec: str  # the spec file, absolute: collect re-plans the cells from it (same spec, same ids)
    inventory: str
    replicas: int
    started: str
    groups: dict[str, list[str]]  # group name -> hosts
    assignment: dict[str, list[str]]  # host -> cell ids, in the order handed out (a requeued cell is appended)
    facts: dict[str, dict[str, Any]]  # host -> its facts at hand-out (validated)
    last_seen: dict[str, float] = field(default_factory=dict)  # host -> epoch s of its last answer
    lost: dict[str, str] = field(default_factory=dict)  # host -> why it was declared lost
    requeued: dict[str, str] = field(default_factory=dict)  # "host/cell" -> the host that took it over
    handout: str = ""  # this hand-out's token, in every plan: a runner forgets what it did for an earlier one
    finished: bool = False  # an attached sweep followed it to the end (a re-run has nothing to follow)
    refused: dict[str, str] = field(default_factory=dict)  # host -> why it refused its share at hand-out (busy)
    unstored: dict[str, str] = field(default_factory=dict)  # "host/cell" -> why storing its tar failed (not again)
    duration_s: float = 0.0  # the window the cells were planned with (--duration included); 0: the spec's own
    # "host/cell" finished before this hand-out and measured again (--fresh, tune's next step): the tree's older
    # result is not this hand-out's, so it is fetched all the same; dropped from here once the new one is stored
    remeasure: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # cell id -> its label at hand-out (status shows it)
    memory_plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> its MemoryPlan at hand-out

    def hosts(self) -> list[str]:
        return sorted(self.assignment)

    def group_of(self, host: str) -> list[str]:
        return next(hs for hs in self.groups.values() if host in hs)


def stored(state: FleetState, results_root: Path, host: str, cid: str) -> bool:
    """This hand-out's result of the cell is in the results tree (an older one, measured again now, is not)."""
    return f"{host}/{cid}" not in state.remeasure and results.is_finished(results_root, state.sweep, host, cid)


def unmeasured(state: FleetState, results_root: Path) -> list[str]:
    """'host/cell: why' for each handed-out cell with no result anywhere: not on its host, nor on the host it was
    requeued to (a lost host's cell without a taker, a refused host's share)."""
    out = []
    for host, ids in sorted(state.assignment.items()):
        for cid in ids:
            where = state.requeued.get(f"{host}/{cid}", host)
            if not results.is_finished(results_root, state.sweep, where, cid):
                out.append(f"{host}/{cid}: no result" + (f" (requeued to {where})" if where != host else ""))
    return out


def state_path(results_root: Path, sweep: str) -> Path:
    return Path(results_root) / STATE_DIR / f"{results.path_part(sweep, 'sweep')}.json"


def save_state(results_root: Path, state: FleetState) -> None:
    """Write the record, 0600, with its inventory's path and hash beside its fields (staterecord: what status and
    collect check before they hand that inventory to Ansible)."""
    path = state_path(results_root, state.sweep)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**asdict(state), staterecord.GUARD: staterecord.guard(path, state.inventory, state.handout)}
    staterecord.write(path, json.dumps(data, indent=1, sort_keys=True))


def load_state(results_root: Path, sweep: str) -> FleetState:
    """The record of a detached sweep; a name we do not know is one line naming what we do know."""
    try:
        path = state_path(results_root, sweep)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not path.is_file():
        known = sorted(p.stem for p in (Path(results_root) / STATE_DIR).glob("*.json"))
        hint = f"known here: {', '.join(known)}" if known else "none was started with --detach here"
        raise UserError(f"no detached sweep {sweep!r} under {results_root} ({hint}; pass --results DIR if elsewhere)")
    staterecord.check_file(path)  # nobody else wrote it...
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(
            f"{path}: not a detached sweep record ({exc.__class__.__name__}); start the sweep again"
        ) from None
    try:
        state = FleetState(**staterecord.check_fields(path, data, FleetState))  # ...it is the record, field by field...
    except TypeError as exc:  # a field without a default is missing
        raise UserError(f"{path}: not a detached sweep record ({exc}); start the sweep again") from None
    staterecord.check_inventory(path, data, state.inventory)  # ...and its inventory is the one handed out, no program
    return state


def spec_of(state: FleetState) -> Spec:
    """The spec the sweep was handed out from, as it was planned: the file, with the window it ran (--duration),
    so the cells re-planned by collect and status have the ids handed out."""
    if not state.spec:  # handed out by tune (no spec file of its own): its re-run collects what is left
        raise UserError(f"sweep {state.sweep} was handed out by `tune`: run the same tune again to collect it")
    spec = load_spec(state.spec)
    return spec.with_duration(state.duration_s) if state.duration_s else spec


def known_sweeps(results_root: Path) -> list[str]:
    return sorted(p.stem for p in (Path(results_root) / STATE_DIR).glob("*.json"))


# ---------------------------------------------------------------------------------------------- hand out
def assign(
    groups: list[fleet_groups.HostGroup],
    cells: dict[str, list[Cell]],
    todo: dict[str, list[Cell]],
    replicas: int,
    plans: list[str] | None = None,
    calibrated: dict[str, float] | None = None,
) -> dict[str, list[str]]:
    """Each group's unfinished cells over its hosts. Once per group (replicas 1): the blocked plan of
    planning/blocks.py, comparison sets kept on one host and a reference cell where they are split. With --replicas
    K: longest first, each to the least-loaded host that has not got it, on K different hosts minus those that
    finished it earlier (the replicas themselves measure the host effects); calibration.EVERY_HOST: on every host
    of the group. `plans` gets the plan in words; `calibrated`: hosts with a recent calibration (no reference)."""
    out: dict[str, list[str]] = {h: [] for g in groups for h in g.hosts}
    for g in groups:
        by_id = {c.id: c for h in g.hosts for c in cells[h]}  # tune may select a cell for some hosts only
        planned = {h: {c.id for c in cells[h]} for h in g.hosts}
        left = {h: {c.id for c in todo[h]} for h in g.hosts}
        load = dict.fromkeys(g.hosts, 0.0)
        if replicas == 1 and len(g.hosts) > 1:
            done = {cid: {h for h in g.hosts if cid in planned[h] and cid not in left[h]} for cid in by_id}
            estimate = {cid: estimated_seconds(c) for cid, c in by_id.items()}
            blocked = blocks.plan_group(g.hosts, list(by_id.values()), done, estimate, calibrated)
            for h in g.hosts:
                out[h] = [cid for cid in blocked.assignment[h] if cid in left[h]]
                load[h] = sum(estimate[cid] for cid in out[h])
            if plans is not None:
                plans += [f"{g.name}: {line}" for line in blocked.words(by_id)]
            assigned = {cid for h in g.hosts for cid in out[h]}
            finished = {cid for cid, hs in done.items() if hs}
            leftovers = [cid for cid in longest_first(by_id.values()) if cid not in assigned | finished]
        else:
            leftovers = longest_first(c for c in by_id.values() if not c.reference_of)
        want = len(g.hosts) if replicas == calibration.EVERY_HOST else replicas
        for cid in leftovers:  # (the blocked plan leaves only cells it could not give to the host it chose)
            if by_id[cid].reference_of:
                continue
            have = [h for h in g.hosts if cid in planned[h] and cid not in left[h]]
            free = [h for h in g.hosts if cid in left[h] and cid not in out[h]]
            for _ in range(min(len(free), max(0, want - len(have)))):
                host = min(free, key=lambda h: (load[h], g.hosts.index(h)))
                free.remove(host)
                out[host].append(cid)
                load[host] += estimated_seconds(by_id[cid])
    return out


def host_plan(spec: Spec, cells: list[Cell], sweep: str, handout: str = "") -> dict[str, Any]:
    """One host's plan file: who handed it out and the cells, as cell.yml's `cell` (the runner reads the same)."""
    return {
        "sweep": sweep,
        "holder": controller_identity(spec.name, ""),
        "cells": [c.playbook_vars() for c in cells],
        "handout": handout,
    }


def hand_out(
    spec: Spec,
    spec_path: Path,
    inventory: Path,
    hosts: list[Host],
    results_root: Path,
    replicas: int = 1,
    fresh: bool = False,
    evict: bool = False,
) -> FleetState:
    """Prepare the sweep, give each host its share and start its runner; return at once (the hosts go on)."""
    prepared = prepare(spec, inventory, hosts, results_root, fresh, replicas)
    state = record_hand_out(prepared, spec, spec_path, inventory, results_root, replicas)
    start_hand_out(state, spec, prepared.cells, inventory, results_root, evict)
    return state


def record_hand_out(
    prepared: Prepared, spec: Spec, spec_path: Path | None, inventory: Path, results_root: Path, replicas: int
) -> FleetState:
    """Split the prepared cells over the hosts and save the record, before any runner starts: a controller killed
    from now on still knows its sweep."""
    plans: list[str] = []
    calibrated = calibration.calibrated_hosts(results_root, spec.image) if spec.name != calibration.SWEEP else {}
    if prepared.selected:  # tune chose each host's cells for this step: exactly those, in its order
        assignment = {h: [c.id for c in prepared.todo.get(h, [])] for g in prepared.groups for h in g.hosts}
    else:
        assignment = assign(prepared.groups, prepared.cells, prepared.todo, replicas, plans, calibrated)
    for line in plans:
        logs.say("fleet_plan", line)
    state = FleetState(
        sweep=spec.name,
        spec=str(Path(spec_path).resolve()) if spec_path else "",
        inventory=str(Path(inventory).resolve()),
        replicas=replicas,
        started=utc.iso(),
        groups={g.name: list(g.hosts) for g in prepared.groups},
        assignment=assignment,
        facts={h: dict(f) for h, f in prepared.facts.items()},
        last_seen=dict.fromkeys(assignment, time.time()),
        handout=secrets.token_hex(6),
        duration_s=spec.duration_s,
        labels={c.id: c.label for cs in prepared.cells.values() for c in cs},
        memory_plans={c.id: dict(c.memory_plan) for cs in prepared.todo.values() for c in cs if c.memory_plan},
        remeasure=[
            f"{h}/{cid}"
            for h, ids in assignment.items()
            for cid in ids
            if results.is_finished(results_root, spec.name, h, cid)
        ],
    )
    save_state(results_root, state)
    fleetindex.remember(results_root, state.sweep)  # status and collect find it without --results
    return state


def start_hand_out(
    state: FleetState, spec: Spec, cells: dict[str, list[Cell]], inventory: Path, results_root: Path, evict: bool
) -> None:
    """Start every runner that has cells; a host that refuses (busy: the holder named) is lost, its cells go on."""
    refused = start_runners(state, spec, cells, inventory, evict, [h for h in state.hosts() if state.assignment[h]])
    for host, why in refused.items():  # said once: declare_lost logs it (host_lost, "refused: ...")
        if not why.startswith("unreachable: "):  # busy, no plan...: the host said no (an unreachable one is lost)
            state.refused[host] = why
        declare_lost(state, spec, cells, inventory, results_root, host, f"refused: {why}", evict)
    save_state(results_root, state)


def start_runners(
    state: FleetState, spec: Spec, cells: dict[str, list[Cell]], inventory: Path, evict: bool, hosts: list[str]
) -> dict[str, str]:
    """Write each host's plan (its whole assignment) and start its runner; a live runner re-reads the plan.
    Returns the hosts that refused or did not answer: host -> why (the holder named when busy)."""
    if not hosts:
        return {}
    plans = {}
    for host in hosts:
        mine = {c.id: c for c in cells[host]}
        plans[host] = host_plan(spec, [mine[cid] for cid in state.assignment[host]], state.sweep, state.handout)
    datasets = {  # a ShareGPT file goes to the host by its content hash, as cell.yml's bench step copies it
        host: sorted(
            {
                (c["shape"]["dataset_src"], c["shape"]["dataset_sha256"])
                for c in plans[host]["cells"]
                if c["shape"]["dataset_src"]
            }
        )
        for host in hosts
    }
    extravars = {
        "sweep": state.sweep,
        "plans": hostdata.unsafe(plans),  # facts reach the cells: never a template
        "datasets": hostdata.unsafe({h: [{"src": src, "sha256": sha} for src, sha in d] for h, d in datasets.items()}),
    }
    if evict:
        extravars["spark_evict"] = True
    run = fleet.run_playbook("fleet", inventory, extravars, limit=",".join(hosts))
    problems = {h: hostdata.one_line(msg) for h, msg in run.failures.items() if h in hosts}
    problems.update({h: f"unreachable: {hostdata.one_line(msg)}" for h, msg in run.unreachable.items() if h in hosts})
    for host in hosts:
        if host not in problems:
            state.last_seen[host] = time.time()
    return problems


# ---------------------------------------------------------------------------------------------- progress
@dataclass
class HostProgress:
    host: str
    answered: bool
    error: str = ""  # why it did not answer
    state: str = ""  # running | finished | stopped | "" (no runner yet)
    alive: bool = False
    current: str = ""
    current_since: str = ""
    stopped: str = ""  # state=stopped: the cell it was on when stopped (unsealed)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> CellDone
    sealed: list[str] = field(default_factory=list)
    token: str = ""  # what this look saw (runner.progress_token): the next look waits for it to change
    note: str = ""  # why the runner stopped on its own (runner.py: its work dir vanished), as the host said
    window: dict[str, float] = field(default_factory=dict)  # the running cell's latest window (runner.latest_window)


_STATES = ("", "running", "finished", "stopped")


def checked_progress(value: Any, host: str) -> HostProgress:
    """The runner's progress as the host sent it, checked (hostdata): ids 12 hex, bounded texts and numbers."""
    where = f"host {host}: runner progress"
    obj = hostdata.mapping(value, where)
    state = hostdata.text(obj.get("state", ""), f"{where}.state", 16)
    if state not in _STATES:
        raise hostdata.BadHostData(f"{where}.state: {state!r} is not one of {_STATES}")
    current = obj.get("current", "")
    stopped = obj.get("stopped", "")
    done_in = hostdata.mapping(obj.get("done", {}), f"{where}.done")
    if len(done_in) > 100_000:
        raise hostdata.BadHostData(f"{where}.done: too many cells")
    done = {}
    for cid, rec in done_in.items():
        r = hostdata.mapping(rec, f"{where}.done")
        outcome = hostdata.text(r.get("outcome", ""), f"{where}.outcome", 16)
        if outcome not in ("sealed", "host_error"):
            raise hostdata.BadHostData(f"{where}.outcome: {outcome!r}")
        done[hostdata.cell_id(cid, f"{where}.done")] = {
            "outcome": outcome,
            "error": hostdata.one_line(hostdata.text(r.get("error", ""), f"{where}.error")),
            "started": hostdata.number(r.get("started", 0.0), f"{where}.started", 0, 1e11),
            "finished": hostdata.number(r.get("finished", 0.0), f"{where}.finished", 0, 1e11),
            "measure_s": hostdata.number(r.get("measure_s", 0.0), f"{where}.measure_s", 0, 1e9),
        }
    return HostProgress(
        host=host,
        answered=True,
        state=state,
        alive=hostdata.flag(obj.get("alive", False), f"{where}.alive"),
        current=hostdata.cell_id(current, f"{where}.current") if current else "",
        current_since=hostdata.text(obj.get("current_since", ""), f"{where}.current_since", 40),
        stopped=hostdata.cell_id(stopped, f"{where}.stopped") if stopped else "",
        done=done,
        sealed=[hostdata.cell_id(c, f"{where}.sealed") for c in obj.get("sealed", []) or []],
        note=hostdata.one_line(hostdata.text(obj.get("note", ""), f"{where}.note")),
        window=_window(obj.get("window") or {}, f"{where}.window"),
    )


def _window(value: Any, where: str) -> dict[str, float]:
    """runner.latest_window as the host sent it: five bounded numbers, or {}."""
    obj = hostdata.mapping(value, where)
    if not obj:
        return {}
    bounds = {"concurrency": 1e7, "tok_s": 1e9, "ttft_ms": 1e9, "tpot_ms": 1e9, "at": 1e11}
    return {k: hostdata.number(obj.get(k, 0.0), f"{where}.{k}", 0, top) for k, top in bounds.items()}


_TOKEN = re.compile(r"[0-9a-f]{16}")


def poll(
    state: FleetState,
    inventory: Path,
    wait_s: float = 0.0,
    seen: dict[str, str] | None = None,
    want: dict[str, list[str]] | None = None,
    results_root: Path | None = None,
) -> tuple[dict[str, HostProgress], fleet.FleetRun]:
    """Every host's runner progress (fleet_status.yml: read-only on the hosts). A host that does not answer is
    reported, and keeps its last_seen time (lost after LOST_AFTER_S). With `seen` (host -> the token of the last
    look), each host answers once its progress differs from it, or after `wait_s`. The cells of `want` (host -> ids,
    the controller's own) that a runner says are sealed are fetched by the same run into results_root/.incoming."""
    hosts = state.hosts()
    extravars: dict[str, Any] = {"sweep": state.sweep}
    if wait_s and seen:
        extravars.update(wait_s=wait_s, seen=hostdata.unsafe(seen))  # the module bounds it (runner.MAX_WAIT_S)
    if want and results_root is not None:
        extravars.update(want=want, spark_results_dir=str(Path(results_root).resolve()))
    run = fleet.run_playbook(tasks.RUNNER_STATUS.playbook, inventory, extravars, limit=",".join(hosts))
    out = {}
    for host in hosts:
        answer = run.results.get(host, {}).get(tasks.RUNNER_STATUS.name)
        problem = (
            run.unreachable.get(host)
            or run.failed_tasks.get(host, {}).get(tasks.RUNNER_STATUS.name)
            or ("" if isinstance(answer, dict) else run.failures.get(host) or run.failures.get("*") or "no answer")
        )
        if problem:
            out[host] = HostProgress(host=host, answered=False, error=hostdata.one_line(problem))
            continue
        assert isinstance(answer, dict)
        try:
            out[host] = checked_progress(answer.get("progress", {}), host)
            token = answer.get("token", "")
            if not (isinstance(token, str) and _TOKEN.fullmatch(token)):
                raise hostdata.BadHostData(f"host {host}: runner token: not 16 hex digits")
            out[host].token = token
        except hostdata.BadHostData as exc:
            out[host] = HostProgress(host=host, answered=False, error=exc.reason)
            continue
        state.last_seen[host] = time.time()
    return out, run


# ---------------------------------------------------------------------------------------------- collect
@dataclass
class Collected:
    """What one collect did and saw. still_running: host -> the cell it is on now."""

    new: dict[str, list[str]] = field(default_factory=dict)  # host -> cells brought back now
    already: int = 0  # sealed cells that were in the results tree before (idempotent)
    failed: dict[str, str] = field(default_factory=dict)  # "host/cell" -> why the host could not take it
    still_running: dict[str, str] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)  # host -> why (not lost yet)
    lost_now: dict[str, str] = field(default_factory=dict)  # hosts declared lost by this collect
    progress: dict[str, HostProgress] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Nothing runs any more on any host that still counts (and no cell was just handed on to another host)."""
        return not self.still_running and not self.unanswered and not self.lost_now


def replan(state: FleetState, spec: Spec, hosts: list[Host]) -> dict[str, list[Cell]]:
    """The cells as handed out, from the same spec and the facts kept at hand-out (the ids must match)."""
    by_name = {h.name: h for h in hosts}
    missing = [h for h in state.hosts() if h not in by_name]
    if missing:
        raise UserError(f"{state.inventory}: host {missing[0]} of sweep {state.sweep} is no longer in the inventory")
    cells = {
        h: blocks.with_reference(plan.plan_cells(spec, h, cast(Facts, state.facts[h]), by_name[h].vars))
        for h in state.hosts()
    }
    for cs in cells.values():
        for c in cs:  # the plan made at hand-out goes into cell.toml beside what the log says
            c.memory_plan = cast(MemoryPlan, state.memory_plans[c.id]) if c.id in state.memory_plans else None
    for host, ids in state.assignment.items():
        known = {c.id for c in cells[host]}
        if any(cid not in known for cid in ids):
            raise UserError(
                f"{state.spec}: the spec changed since sweep {state.sweep} was handed out (its cells have other ids); "
                "restore it, or start a new sweep"
            )
    return cells


def collect_sweep(
    state: FleetState,
    spec: Spec,
    hosts: list[Host],
    results_root: Path,
    lost_after: float = LOST_AFTER_S,
    evict: bool = False,
    cells: dict[str, list[Cell]] | None = None,
    hand_on: bool = True,
    wait_s: float = 0.0,
    seen: dict[str, str] | None = None,
) -> Collected:
    """Bring back every sealed cell not yet in the results tree; declare silent hosts lost and hand their cells
    on. Safe while the hosts run and safe to repeat: a cell already in the tree is not fetched again.
    `cells`: the cells as handed out, when the caller has them (the attached sweep: tune's schedules, checkpoint
    sizes); otherwise re-planned. hand_on=False: only bring back what is sealed (after a stop: nothing restarts).
    wait_s + seen (host -> token of the last look): the look waits on each host for its progress to change, so it
    returns as a cell ends (the attached sweep follows this way); the sealed cells come back in the same run."""
    inventory = Path(state.inventory)
    cells = cells if cells is not None else replan(state, spec, hosts)
    want = {
        host: [
            cid for cid in ids if f"{host}/{cid}" not in state.unstored and not stored(state, results_root, host, cid)
        ]
        for host, ids in state.assignment.items()
    }
    progress, look = poll(state, inventory, wait_s, seen, {h: ids for h, ids in want.items() if ids}, results_root)
    out = Collected(progress=progress)
    fetch: dict[str, list[str]] = {}
    restart: list[str] = []
    for host, p in progress.items():
        if not p.answered:
            if host not in state.lost:
                out.unanswered[host] = p.error
            continue
        mine = set(state.assignment[host])  # what an earlier hand-out left on the host is not this sweep's answer
        wanted = set(want[host])  # mine, not stored yet, not refused by an earlier store: fetched by the look
        for cid in p.sealed:
            if cid in wanted:
                fetch.setdefault(host, []).append(cid)
            elif cid in mine and f"{host}/{cid}" not in state.unstored:
                out.already += 1
        for cid, rec in p.done.items():
            if cid in mine and rec["outcome"] == "host_error" and not stored(state, results_root, host, cid):
                out.failed[f"{host}/{cid}"] = rec["error"]
                results.record_lost(results_root, state.sweep, host, cid, "host_failed", rec["error"], utc.iso())
        if p.alive and p.current:
            out.still_running[host] = p.current
        elif p.alive:
            out.still_running[host] = ""
        elif p.state in ("running", "stopped") and host not in state.lost:
            # its runner is gone with cells left (stopped or killed on the host): known dead, no need to wait
            left = [c for c in state.assignment[host] if c not in p.done]
            if left:
                out.lost_now[host] = f"its runner is gone ({p.state}, {len(left)} cell(s) not run)"
        elif p.state == "finished" and host not in state.lost and any(c not in p.done for c in state.assignment[host]):
            restart.append(host)  # it ended just before cells were appended to its plan: start it again
            out.still_running[host] = ""
    if fetch:
        out.new = store_fetched(state, cells, fetch, progress, results_root, look)
    if not hand_on:
        save_state(results_root, state)
        return out
    for host, why in start_runners(state, spec, cells, inventory, evict, restart).items():
        del out.still_running[host]
        out.lost_now[host] = f"its runner could not be started again: {why}"
    for host, why in out.lost_now.items():  # after the fetch: what it sealed is in the tree, not handed on
        declare_lost(state, spec, cells, inventory, results_root, host, why, evict)
    now = time.time()
    for host, why in list(out.unanswered.items()):
        silent = now - state.last_seen.get(host, now)
        if silent >= lost_after:
            del out.unanswered[host]
            reason = f"no answer for {silent:.0f} s (lost after {lost_after:.0f} s): {why}"
            out.lost_now[host] = reason
            declare_lost(state, spec, cells, inventory, results_root, host, reason, evict)
    save_state(results_root, state)
    return out


def store_fetched(
    state: FleetState,
    cells: dict[str, list[Cell]],
    fetch: dict[str, list[str]],
    progress: dict[str, HostProgress],
    results_root: Path,
    look: fleet.FleetRun,
) -> dict[str, list[str]]:
    """The look (fleet_status.yml) fetched the sealed tars into results/.incoming; each is checked and stored now
    (collect.py). A tar that did not come is named with the fetch's failure and waits for the next look."""
    done_now: dict[str, list[str]] = {}
    for host, ids in fetch.items():
        mine = {c.id: c for c in cells[host]}
        facts = cast(Facts, state.facts[host])
        for cid in ids:
            done = progress[host].done.get(cid, {})
            started, finished = done.get("started", 0.0), done.get("finished", 0.0)
            try:
                record = collecting.finalize_cell(
                    results_root, mine[cid], facts, started, finished, done.get("measure_s", 0.0)
                )
            except Exception as exc:  # a bug or a surprise: this cell is lost, not the sweep (a full disk stops it)
                if isinstance(exc, OSError) and (collecting.disk_full(str(exc)) or exc.errno in DISK_FULL):
                    raise
                why = hostdata.one_line(f"{exc.__class__.__name__}: {exc}")
                log.error("cell_not_stored", host=host, cell=cid, error=why)
                state.unstored[f"{host}/{cid}"] = why
                collecting.incoming_tar(results_root, state.sweep, host, cid).unlink(missing_ok=True)
                results.record_lost(results_root, state.sweep, host, cid, "lost", why, utc.iso())
                continue
            if record is None:
                why = (
                    look.failed_tasks.get(host, {}).get(tasks.FETCH_SEALED.name)
                    or look.unreachable.get(host)
                    or "no archive"
                )
                if collecting.disk_full(why):  # the fetch could not write: every later one would fail too
                    raise OSError(errno.ENOSPC, f"No space left on device: {hostdata.one_line(why)}")
                log.warning("not_fetched", host=host, cell=cid, error=why)
                continue
            results.clear_lost(results_root, state.sweep, host, cid)
            if f"{host}/{cid}" in state.remeasure:
                state.remeasure.remove(f"{host}/{cid}")
            done_now.setdefault(host, []).append(cid)
            log.info(
                "cell_done",
                host=host,
                cell=cid,
                label=mine[cid].label,
                verdict=record.verdict,
                failure=record.failure_class or None,
                seconds=round(finished - started, 1),
            )
    return done_now


def declare_lost(
    state: FleetState,
    spec: Spec,
    cells: dict[str, list[Cell]],
    inventory: Path,
    results_root: Path,
    host: str,
    why: str,
    evict: bool,
) -> None:
    """The host is lost: the cell it was on is recorded host_lost (never a backend failure), and every cell it has
    not sealed goes to the least-loaded other live host of its group that has not got it. If the host comes back,
    what it sealed is still collected: a replica, in its own folder."""
    state.lost[host] = why
    log.error("host_lost", host=host, error=why)
    sealed_or_done = {cid for cid in state.assignment[host] if stored(state, results_root, host, cid)}
    unfinished = [cid for cid in state.assignment[host] if cid not in sealed_or_done]
    if unfinished:  # the first unfinished one is the one it was on (the runner takes them in order)
        results.record_lost(results_root, state.sweep, host, unfinished[0], "host_lost", why, utc.iso())
    others = [h for h in state.group_of(host) if h != host and h not in state.lost]
    by_id = {c.id: c for c in cells[host]}
    touched: set[str] = set()
    for cid in unfinished:
        if by_id[cid].reference_of:  # a reference measures this host's effect: no use on another host
            continue
        free = [h for h in others if cid not in state.assignment[h]]
        twin = next((h for h in others if cid in state.assignment[h]), "")
        if not free and twin and state.replicas == 1:  # once per group: the other host's measurement of this very
            state.requeued[f"{host}/{cid}"] = twin  # cell (a one-level reference) serves; a --replicas copy does not
            continue
        if not free:
            log.error("cell_unserved", host=host, cell=cid, error="no other host of the group can take it")
            continue
        taker = min(free, key=lambda h: (sum(estimated_seconds(by_id[c]) for c in state.assignment[h]), h))
        state.assignment[taker].append(cid)
        if results.is_finished(results_root, state.sweep, taker, cid):  # an older result there: measured again
            state.remeasure.append(f"{taker}/{cid}")
        state.requeued[f"{host}/{cid}"] = taker
        touched.add(taker)
    refused = start_runners(state, spec, cells, inventory, evict, sorted(touched))
    for taker, reason in refused.items():  # a host that cannot take them now is found again by the next collect
        log.error("requeue_refused", host=taker, error=reason)
