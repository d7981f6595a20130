"""The sweep: validate, gather facts, plan, provision, then each host runs its cells (one thread per host).

spec → plan → provision → serve → attest → measure → collect. Every stage's host work is a playbook in playbooks/;
this module only decides what runs where and turns the outcome into the results tree.
"""

from __future__ import annotations

import errno
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
import structlog

from agent.errors import UserError
from agent.hostside import utc
from agent.hostside.contracts import Facts, ModelMemory
from agent.judging.summary import WRONG_OUTPUT, cell_verdict
from agent.planning import blocks, memory, multinode
from agent.planning import groups as fleet_groups
from agent.planning import matrix as plan
from agent.planning.inventory import Host, check_reachable
from agent.planning.matrix import Cell, CheckpointInfo
from agent.planning.spec import Spec
from agent.results import tree as results
from agent.results.records import CellRecord
from agent.running import collect, fingerprints, fleetcopy, hostdata, hubcopy, tasks
from agent.running import playbooks as fleet
from agent.running.identity import controller_identity
from agent.running.progress import Progress
from agent.running.queue import GroupQueue, longest_first

log = structlog.get_logger("spark_agent.sweep")


class CellLost(Exception):
    """Nothing usable came back for the cell the worker was on. reason: lost | host_lost | interrupted | controller
    (the controller could not store it: the results folder is full)."""

    def __init__(self, reason: str, error: str, host: str = ""):
        super().__init__(f"{reason}: {error}")
        self.reason = reason
        self.error = error
        self.host = host  # host_lost: the host that was lost, when not the one the cell ran from (a node set's worker)


@dataclass
class HostOutcome:
    """Where each planned cell of one host ended up. Every planned cell is in exactly one bucket once settled."""

    host: str
    planned: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)  # measured in this run, verdict valid, outputs right
    wrong: list[str] = field(default_factory=list)  # measured in this run, valid, but WRONG OUTPUT (judge_outputs)
    invalid: list[str] = field(default_factory=list)  # measured in this run, verdict invalid
    failed: list[str] = field(default_factory=list)  # the server failed (startup, died): recorded as failed
    lost: dict[str, str] = field(default_factory=dict)  # cell id -> why nothing usable came back, or why never run
    skipped: dict[str, str] = field(default_factory=dict)  # finished by an earlier run (resume): id -> its verdict
    requeued: dict[str, str] = field(
        default_factory=dict
    )  # its host was lost mid-cell; another host took it: id -> why
    error: str = ""  # why this host stopped taking cells
    host_lost: bool = False  # it became unreachable
    while_detached: list[str] = field(default_factory=list)  # of the done: measured by an earlier hand-out's runners
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def done(self) -> list[str]:
        """Cells this run finished (a record is in the results tree)."""
        return self.measured + self.wrong + self.invalid + self.failed

    def accounted(self, cell_id: str) -> bool:
        return cell_id in self.lost or cell_id in self.skipped or cell_id in self.requeued or cell_id in self.done

    def add(self, bucket: str, cell_id: str, why: str = "") -> None:
        """First word wins: a cell settled as lost (e.g. by Ctrl-C) is not counted again by a late worker."""
        with self.lock:
            if self.accounted(cell_id):
                return
            if bucket == "lost":
                self.lost[cell_id] = why
            elif bucket == "requeued":
                self.requeued[cell_id] = why
            else:
                getattr(self, bucket).append(cell_id)

    def settle(self, why: str) -> None:
        """Count every planned cell that has no bucket yet as lost (never run), so the numbers add up."""
        for cell_id in self.planned:
            self.add("lost", cell_id, f"not run: {why}")

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {
                "planned": len(self.planned),
                "measured": len(self.measured),
                "wrong": len(self.wrong),
                "invalid": len(self.invalid),
                "failed": len(self.failed),
                "lost": len(self.lost),
                "skipped": len(self.skipped),
                "requeued": len(self.requeued),
            }


# planned = the sum of the others, always (README: "Exit codes and the end-of-sweep summary")
BUCKETS = ("planned", "measured", "wrong", "invalid", "failed", "lost", "skipped", "requeued")


@dataclass
class SweepOutcome:
    sweep_dir: Path
    hosts: dict[str, HostOutcome]
    interrupted: bool = False
    fatal: str = ""  # a controller-side problem that stopped the sweep (the results folder is full)
    warnings: list[str] = field(default_factory=list)
    groups: list[fleet_groups.HostGroup] = field(default_factory=list)  # the fleet's fingerprint groups
    replicas: int = 1  # each cell was asked of this many hosts of its group

    def totals(self) -> dict[str, int]:
        out = {k: 0 for k in BUCKETS}
        for o in self.hosts.values():
            for k, v in o.counts().items():
                out[k] += v
        return out

    @property
    def lost_hosts(self) -> dict[str, str]:
        return {h: o.error for h, o in self.hosts.items() if o.host_lost}

    def judge_outputs(self, cells: Sequence[dict[str, Any]]) -> None:
        """Move each cell whose probe outputs are wrong out of `measured` (a skipped one reads "wrong output").
        WRONG OUTPUT needs the whole tree (agreement with the checkpoint's reference cell): `cells` are the sweep
        folder's, as results.load_cells gives them, after the run."""
        wrong = {(str(c.get("host")), str(c.get("cell_id"))) for c in cells if cell_verdict(c) == WRONG_OUTPUT}
        for host, o in self.hosts.items():
            with o.lock:
                o.wrong += [cid for cid in o.measured if (host, cid) in wrong]
                o.measured = [cid for cid in o.measured if (host, cid) not in wrong]
                o.skipped = {cid: WRONG_OUTPUT if (host, cid) in wrong else v for cid, v in o.skipped.items()}


def gather_facts(inventory: Path, hosts: list[Host], serving: bool = False) -> dict[str, Facts]:
    """Host facts (the fingerprint stored with every result), from the provision playbook's facts step. `serving`:
    a sweep's, which also checks that each host can run its serve command (env and check only read facts)."""
    extra = {"image": "", "check_serve_cmd": serving}
    run = fleet.run_playbook(tasks.FACTS.playbook, inventory, extra, limit=_limit(hosts), tags=tasks.FACTS.tag)
    _raise_host_errors(run, "gathering facts")
    return validated_facts(run, hosts)


def validated_facts(run: fleet.FleetRun, hosts: list[Host]) -> dict[str, Facts]:
    """Each host's spark_facts, checked (agent/running/hostdata.py); a bad shape is a clear host error."""
    try:
        checked = {
            h.name: hostdata.facts(_task(run, h.name, tasks.FACTS.name).get("spark_facts"), h.name) for h in hosts
        }
        return {name: cast(Facts, facts) for name, facts in checked.items()}  # hostdata.FACTS: the Facts keys
    except hostdata.BadHostData as exc:
        raise UserError(f"gathering facts failed: {exc.reason}") from None


def _task(run: fleet.FleetRun, host: str, task: str) -> dict[str, Any]:
    result = run.results.get(host, {}).get(task)
    return result if isinstance(result, dict) else {}


def _limit(hosts: list[Host]) -> str:
    return ",".join(h.name for h in hosts)


def _raise_host_errors(run: fleet.FleetRun, stage: str) -> None:
    problems = {**run.unreachable, **run.failures}
    if problems:
        detail = "; ".join(f"host {h}: {msg}" for h, msg in problems.items())
        raise UserError(f"{stage} failed: {detail}")


def say_notes(cells: dict[str, list[Cell]]) -> None:
    """Each plan note once, with the hosts it is about: a warning, or (what a rule did by itself) info."""
    hosts: dict[str, list[str]] = {}
    applied: set[str] = set()
    for host, cs in cells.items():
        for c in cs:
            applied.update(c.rules_applied)
            for n in c.notes:
                if host not in hosts.setdefault(n, []):
                    hosts[n].append(host)
    for note, on in hosts.items():
        (log.info if note in applied else log.warning)("plan_note", hosts=", ".join(on), note=note)


def plan_fleet(spec: Spec, hosts: list[Host], facts: dict[str, Facts]) -> dict[str, list[Cell]]:
    if spec.server.nodes > 1:  # a node set's cells go to its head; its workers get none of their own
        cells, notes = multinode.plan_fleet(spec, [h.name for h in hosts], facts, {h.name: h.vars for h in hosts})
        for note in notes:
            log.warning("plan_note", note=note)
        return cells
    # every host plans its group's reference cell too (an env file is cheap); detach.assign hands it out where needed
    return {h.name: blocks.with_reference(plan.plan_cells(spec, h.name, facts[h.name], h.vars)) for h in hosts}


def provision(inventory: Path, spec: Spec, hosts: list[Host], cells: dict[str, list[Cell]]) -> fleet.FleetRun:
    """The image present by digest and each cell's env file on its host. Idempotent."""
    by_host: dict[str, list[dict[str, Any]]] = {h: [] for h in cells}
    for cs in cells.values():
        for c in cs:  # a multi-node cell's env file on every node: the cell's env and that node's link variables
            for node in c.cluster.get("nodes", []) or [{"host": c.host, "env": {}}]:
                by_host.setdefault(node["host"], []).append({"id": c.id, "env": {**c.env, **node["env"]}})
    hubcopy.download_once(inventory, spec, hosts)  # hub ids: one download, copied over the fleet (if set)
    checkpoints = fleetcopy.checkpoint_vars(spec)
    more_images = [i for i in spec.design.images if i != spec.image]  # [matrix] image: every digest present
    run = fleet.run_playbook(
        "provision",
        inventory,
        {"image": spec.image, "more_images": more_images, "cells_by_host": by_host, "checkpoints": checkpoints},
        limit=_limit(hosts),
        skip_tags=tasks.FACTS.tag,  # gathered a moment ago by gather_facts: the plan rests on those
    )
    _raise_host_errors(run, "provisioning")
    fleetcopy.check_image_digests(run, hosts, spec.image)  # one image on every host, mirror or not
    run = fleetcopy.fill_missing_checkpoints(inventory, spec, hosts, run)  # copied over the fleet, not downloaded
    for host, cs in cells.items():
        infos = checkpoint_infos(run, host)
        memories = model_memories(run, host)
        for cell in cs:
            cell.checkpoint_info = infos.get(cell.config.model, CheckpointInfo())
            cell.model_memory = memories.get(cell.config.model)
    return run


def checkpoint_infos(run: fleet.FleetRun, host: str) -> dict[str, CheckpointInfo]:
    """What the weight headers on the host say per checkpoint folder (bytes per token for the decode ceiling).
    Keyed by our own loop item's model; the summary is host data and is validated."""
    out: dict[str, CheckpointInfo] = {}
    for item in run.items.get(host, {}).get(tasks.CHECKPOINTS.name, []):
        summary = item.get("summary")
        if summary:
            try:
                model = hostdata.text((item.get("item") or {}).get("model"), f"host {host}: checkpoint item")
                out[model] = cast(
                    CheckpointInfo, hostdata.checkpoint_summary(summary, f"host {host}: checkpoint {model}")
                )
            except hostdata.BadHostData as exc:
                raise UserError(f"provisioning failed: {exc.reason}") from None
    return out


def model_memories(run: fleet.FleetRun, host: str) -> dict[str, ModelMemory]:
    """What each checkpoint folder on the host needs in memory (hostside/memplan), validated; the memory plan's
    input. A folder with config.json alone (dummy weights) has one too."""
    out: dict[str, ModelMemory] = {}
    for item in run.items.get(host, {}).get(tasks.CHECKPOINTS.name, []):
        try:
            model = hostdata.text((item.get("item") or {}).get("model"), f"host {host}: checkpoint item")
            found = hostdata.model_memory(item.get("memory"), f"host {host}: checkpoint {model}: memory")
        except hostdata.BadHostData as exc:
            raise UserError(f"provisioning failed: {exc.reason}") from None
        if found is not None:
            out[model] = cast(ModelMemory, found)  # hostdata.MODEL_MEMORY: every ModelMemory key, checked
    return out


def run_node_sets(
    spec: Spec,
    inventory: Path,
    hosts: list[Host],
    results_root: Path,
    fresh: bool = False,
    evict: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    replicas: int = 1,
    select: Callable[[dict[str, list[Cell]]], dict[str, list[Cell]]] | None = None,
) -> SweepOutcome:
    """A sweep of node-set cells (server.nodes > 1), one playbooks/cell.yml run per cell: each cell needs a Ray
    cluster over its node set, started by the controller (tasks/cluster.yml), which one host's runner cannot do.
    The hosts of a group take cells from the group's queue, longest first. Every other sweep follows the hosts'
    runners (running/follow.py). `select`: as follow.run_sweep."""
    cancel = cancel or threading.Event()
    progress = progress or Progress(enabled=False)
    prepared = prepare(spec, inventory, hosts, results_root, fresh, replicas, select)
    facts, groups, cells, todo, warnings = (
        prepared.facts,
        prepared.groups,
        prepared.cells,
        prepared.todo,
        prepared.warnings,
    )
    outcome = SweepOutcome(
        sweep_dir=Path(results_root) / spec.name, hosts={}, warnings=warnings, groups=groups, replicas=replicas
    )
    for h in hosts:
        skipped = {c.id: stored_verdict(results_root, c) for c in cells[h.name] if c not in todo[h.name]}
        outcome.hosts[h.name] = HostOutcome(host=h.name, planned=list(skipped), skipped=skipped)
    queues = {g.name: group_queue(g, cells, todo, replicas) for g in groups}
    stop = threading.Event()  # set by a controller-side fault: no new cells, the running ones finish
    progress.start(expected_shares(groups, todo, replicas))
    by_name = {h.name: h for h in hosts}
    runners = [
        threading.Thread(
            target=_host_worker,
            name=f"host-{name}",
            args=(inventory, by_name[name], queues[g.name], cells[name], facts[name], results_root, evict),
            kwargs={"progress": progress, "cancel": cancel, "stop": stop, "outcome": outcome},
            daemon=True,
        )
        for g in groups
        for name in g.hosts
    ]
    try:
        for t in runners:
            t.start()
        _join(runners)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM turned into one by the CLI
        outcome.interrupted = True
        cancel.set()
        log.warning("interrupted", action="stopping the server on every host")
        _join(runners, timeout=10)
        stop_our_playbooks()
        teardown(inventory, hosts, spec.name)
        _join(runners, timeout=30)
    finally:
        progress.stop()
    lost = "; ".join(f"lost host {h}" for h in outcome.lost_hosts)
    why = "interrupted" if outcome.interrupted else outcome.fatal or lost or "the host stopped"
    for g in groups:
        _settle_unserved(outcome, g, queues[g.name], why)
    for o in outcome.hosts.values():
        o.settle(o.error or why)
    return outcome


@dataclass
class Prepared:
    """A sweep ready to hand out: facts, groups, every host's cells, and those still to measure (env files in place)."""

    facts: dict[str, Facts]
    groups: list[fleet_groups.HostGroup]
    cells: dict[str, list[Cell]]
    todo: dict[str, list[Cell]]
    warnings: list[str]
    selected: bool = False  # the cells per host were chosen by `select` (tune): handed out exactly so, no re-plan


def prepare(
    spec: Spec,
    inventory: Path,
    hosts: list[Host],
    results_root: Path,
    fresh: bool,
    replicas: int,
    select: Callable[[dict[str, list[Cell]]], dict[str, list[Cell]]] | None = None,
) -> Prepared:
    """Validate, gather facts, group, plan, provision: everything before the first cell, attached or detached."""
    for h in hosts:  # a host name becomes a folder of the results tree
        try:
            results.path_part(h.name, "host")
        except ValueError as exc:
            raise UserError(f"{inventory}: {exc}") from None
    if replicas > len(hosts):
        raise UserError(f"--replicas {replicas}: only {len(hosts)} host(s) selected; give at most {len(hosts)}")
    warnings = plan.spec_warnings(spec)
    for w in warnings:
        log.warning("spec_warning", warning=w)
    check_reachable(hosts)
    try:
        facts = gather_facts(inventory, hosts, serving=True)
        groups = fingerprints.remembered(results_root, spec.image, facts)  # + digest and logged vLLM, if known
        show_groups(groups)
        check_replicas(replicas, groups)
        cells = plan_fleet(spec, hosts, facts)
        if select is not None:  # tune places and picks the cells itself (running/tune.py), references included
            cells = select(cells)
        say_notes(cells)
        collect.clear_incoming(results_root, spec.name)
        results.clear_temp_files(results_root, spec.name)
        judge = {"equivalence": spec.equivalence}  # how the report judges it: kept with the run, not the cells
        # the store's run identity; tune's steps (select) are one run, which tune begins at its first step
        results.begin_run(results_root, spec.name, fresh and select is None, utc.iso(time.time()), judge)
        todo = {
            h: [c for c in cs if fresh or not results.is_finished(results_root, spec.name, h, c.id)]
            for h, cs in cells.items()
        }
        todo_before = {h: list(cs) for h, cs in todo.items()}
        run = provision(inventory, spec, hosts, todo)  # every host of a group can take any of its cells: env files
        todo, refused = memory.refuse(todo, facts)  # what vLLM would refuse to start, before any start; none: exit 2
        for line in refused:
            log.warning("memory_refused", cell=line)
        warnings += refused
        gone = {(h, c.id) for h, cs in todo_before.items() for c in cs} - {
            (h, c.id) for h, cs in todo.items() for c in cs
        }
        cells = {h: [c for c in cs if (h, c.id) not in gone] for h, cs in cells.items()}
        regrouped = fingerprints.provisioned(results_root, spec.image, facts, hosts, run)
        if regrouped != groups:  # the digests provisioning found now separate hosts
            show_groups(regrouped)
            check_replicas(replicas, regrouped)
        groups = regrouped
    except KeyboardInterrupt:
        stop_our_playbooks()  # facts and provisioning start no server: nothing to tear down
        raise
    return Prepared(facts=facts, groups=groups, cells=cells, todo=todo, warnings=warnings, selected=select is not None)


def show_groups(groups: list[fleet_groups.HostGroup]) -> None:
    """The sweep's start says which hosts are measured together, and what separates those that are not."""
    for line in fleet_groups.describe(groups):
        log.info("fingerprint_group", group=line)
    for line in fleet_groups.explain(groups):
        log.warning("fingerprint_differs", host=line)


def check_replicas(replicas: int, groups: list[fleet_groups.HostGroup]) -> None:
    small = [g for g in groups if len(g) < replicas]
    if small:
        g = small[0]
        raise UserError(
            f"--replicas {replicas}: group {g.name} ({', '.join(g.hosts)}: {g.fingerprint.label()}) has only "
            f"{len(g)} host(s); give at most {min(len(x) for x in groups)} or add equal hosts"
        )


def group_queue(
    group: fleet_groups.HostGroup, cells: dict[str, list[Cell]], todo: dict[str, list[Cell]], replicas: int
) -> GroupQueue:
    """The group's cells, longest first; each owes `replicas` minus the hosts that finished it earlier (resume).
    Hosts of one group plan the same cell ids (the fingerprint holds what the env depends on)."""
    planned = {h: {c.id for c in cells[h]} for h in group.hosts}
    left = {h: {c.id for c in todo[h]} for h in group.hosts}
    first = list({c.id: c for h in group.hosts for c in cells[h]}.values())  # a multi-node set's head alone plans
    # Only a host that planned a cell can have finished it (a multi-node worker plans none of its own).
    have = {c.id: {h for h in group.hosts if c.id in planned[h] and c.id not in left[h]} for c in first}
    need = {cid: replicas - len(hs) for cid, hs in have.items()}
    return GroupQueue(longest_first(first), need, have, group.hosts)


def expected_shares(
    groups: list[fleet_groups.HostGroup], todo: dict[str, list[Cell]], replicas: int
) -> dict[str, list[Cell]]:
    """What the progress bar expects of each host: its even share of the group's cells (the queue decides)."""
    out: dict[str, list[Cell]] = {}
    for g in groups:
        for host in g.hosts:
            mine = todo[host]
            share = max(1, round(len(mine) * replicas / len(g))) if mine else 0
            out[host] = mine[:share]
    return out


def _settle_unserved(outcome: SweepOutcome, group: fleet_groups.HostGroup, queue: GroupQueue, why: str) -> None:
    """Cells no host of the group could take any more (every host stopped): counted as lost on the group's first
    host that has not got them, so the summary still adds up."""
    for cid, owed in queue.unserved().items():
        for host in group.hosts:
            o = outcome.hosts[host]
            if owed <= 0:
                break
            if cid not in o.planned:
                o.planned.append(cid)
                o.add("lost", cid, f"not run: {why}")
                owed -= 1


def stored_verdict(root: Path, cell: Cell) -> str:
    try:
        return str(
            results.read_toml(results.cell_dir(root, cell.sweep, cell.host, cell.id) / results.CELL_FILE)["verdict"]
        )
    except (OSError, ValueError, KeyError) as exc:  # a damaged record is not a valid one
        return f"unreadable ({exc.__class__.__name__})"


def _join(threads: list[threading.Thread], timeout: float | None = None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    for t in threads:
        while t.is_alive() and (deadline is None or time.monotonic() < deadline):
            t.join(timeout=0.2)


def stop_our_playbooks() -> None:
    """ansible-runner's cancel does not always reach a running ansible-playbook (it runs in a session of its own
    and outlives us): stop every ansible-playbook we started, by PID, before the teardown runs."""
    for child in psutil.Process().children(recursive=True):
        try:
            if any("ansible-playbook" in part for part in child.cmdline()[:3]):
                child.kill()
        except psutil.Error:
            pass


def _host_worker(
    inventory: Path,
    host: Host,
    queue: GroupQueue,
    planned: list[Cell],
    facts: Facts,
    results_root: Path,
    evict: bool,
    *,
    progress: Progress,
    cancel: threading.Event,
    stop: threading.Event,
    outcome: SweepOutcome,
) -> None:
    """Take cells from the group's queue until it is empty. Whatever goes wrong with one cell is recorded on that
    cell; the host goes on unless it (unreachable, refuses cells) or the controller (results folder full) can't.
    A host that stops hands its cell back to the queue: another host of the group measures it."""
    result = outcome.hosts[host.name]
    mine = {c.id: c for c in planned}
    try:
        while not (cancel.is_set() or stop.is_set()):
            cell_id = queue.take(host.name)
            if cell_id is None:
                if not queue.may_get_more(host.name):
                    break
                time.sleep(0.2)  # another host is on a cell that may come back to the queue
                continue
            cell = mine.get(cell_id)
            if cell is None:  # not selected for this host (tune): leave it to the group's other hosts
                queue.give_back(host.name, cell_id)
                continue
            with result.lock:
                result.planned.append(cell_id)
            try:
                record = run_cell(inventory, host, cell, facts, results_root, evict, progress, cancel)
            except UserError as exc:  # the host can't take cells (busy, no docker): say so, keep other hosts going
                _host_stopped(result, progress, exc.message)
                _hand_back(results_root, queue, result, progress, cell, "host_failed", exc.message)
                break
            except CellLost as exc:
                if exc.reason == "host_lost" and exc.host and exc.host != host.name:
                    _worker_lost(outcome, queue, exc.host, exc.error)  # a node set's worker: the set can't serve
                    _host_stopped(result, progress, f"its node set lost worker host {exc.host}")
                    _hand_back(results_root, queue, result, progress, cell, exc.reason, exc.error)
                    break
                if exc.reason == "host_lost":
                    result.host_lost = True
                    _host_stopped(result, progress, exc.error)
                    _hand_back(results_root, queue, result, progress, cell, exc.reason, exc.error)
                    break
                _lose(results_root, result, progress, cell, exc.reason, exc.error)
                queue.finish(host.name, cell_id)
                if exc.reason == "controller":
                    outcome.fatal = outcome.fatal or exc.error
                    stop.set()
                    break
            except Exception as exc:  # a bug or a surprise: this cell is lost, not the host's queue
                log.error("cell_error", host=host.name, cell=cell.id, error=_described(exc), at=_where(exc))
                _lose(results_root, result, progress, cell, "lost", _described(exc))
                queue.finish(host.name, cell_id)
                _teardown_quietly(inventory, host, cell)
            else:
                result.add({"valid": "measured", "invalid": "invalid"}.get(record.verdict, "failed"), cell.id)
                results.clear_lost(results_root, cell.sweep, cell.host, cell.id)
                queue.finish(host.name, cell_id)
    except Exception as exc:  # never end a host's work silently
        log.error("host_worker_error", host=host.name, error=_described(exc), at=_where(exc))
        _host_stopped(result, progress, f"internal error: {_described(exc)}")
    finally:
        queue.retire(host.name)
        why = "interrupted" if cancel.is_set() else result.error or outcome.fatal or "stopped"
        result.settle(why)


def _worker_lost(outcome: SweepOutcome, queue: GroupQueue, worker: str, error: str) -> None:
    """A multi-node cell's worker host became unreachable: that host is the lost one (named in the summary), and it
    takes no more cells; its head is alive but its node set is broken."""
    lost = outcome.hosts.get(worker)
    if lost is not None:
        lost.host_lost = True
        lost.error = lost.error or error
    queue.retire(worker)
    log.error("host_lost", host=worker, error=error)


def _hand_back(
    root: Path, queue: GroupQueue, result: HostOutcome, progress: Progress, cell: Cell, reason: str, error: str
) -> None:
    """The host stopped mid-cell: lost.toml records why on that host (host_lost, never a backend failure), and the
    cell goes back to the group's queue. Counted `requeued` on this host (another host measures it), or lost when
    no host of the group is left to take it."""
    queue.retire(result.host)
    bucket = "requeued" if queue.can_still_run(cell.id) else "lost"
    if bucket == "requeued":
        queue.give_back(result.host, cell.id)
    else:  # owed to nobody: counted lost here once, not again as unserved at the end
        queue.finish(result.host, cell.id)
    _lose(root, result, progress, cell, reason, error, bucket=bucket)


def _host_stopped(result: HostOutcome, progress: Progress, message: str) -> None:
    result.error = result.error or message
    log.error("host_stopped", host=result.host, error=message)
    progress.host_failed(result.host, message)


def _lose(
    root: Path, result: HostOutcome, progress: Progress, cell: Cell, reason: str, error: str, bucket: str = "lost"
) -> None:
    """Count the cell as lost and leave lost.toml saying why; resume measures it again (it has no cell.toml)."""
    result.add(bucket, cell.id, f"{reason}: {error}")
    progress.cell_finished(cell.host, cell, None)
    log.error("cell_lost", host=cell.host, cell=cell.id, reason=reason, error=error)
    collect.incoming_tar(root, cell.sweep, cell.host, cell.id).unlink(missing_ok=True)
    try:
        results.record_lost(root, cell.sweep, cell.host, cell.id, reason, error, _now())
    except OSError as exc:  # a full disk can't take the note either; the missing cell.toml still says "measure"
        log.error("lost_record_not_written", cell=cell.id, error=str(exc))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _teardown_quietly(inventory: Path, host: Host, cell: Cell) -> None:
    """After a surprise the cell playbook may not have reached its teardown: stop our server on that host."""
    try:
        teardown(inventory, [host], cell.sweep)
    except Exception as exc:
        log.error("teardown_failed", host=host.name, error=_described(exc), at=_where(exc))


def _described(exc: BaseException) -> str:
    return hostdata.one_line(f"{exc.__class__.__name__}: {exc}")


def _where(exc: BaseException) -> str:
    """The innermost frame, file:line: enough to report a bug without a screenful of traceback in the sweep's log."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def run_cell(
    inventory: Path,
    host: Host,
    cell: Cell,
    facts: Facts,
    results_root: Path,
    evict: bool,
    progress: Progress,
    cancel: threading.Event,
) -> CellRecord:
    """Serve, bench, collect and tear down one cell on one host (playbooks/cell.yml), then write its results.
    Raises CellLost when nothing usable came back, UserError when the host can't take cells."""
    started = time.time()
    progress.cell_started(host.name, cell)
    extravars = {
        "cell": hostdata.unsafe(cell.playbook_vars()),  # facts reach it (the simulator's chip): never a template
        "sweep": cell.sweep,
        "spark_results_dir": str(Path(results_root).resolve()),
        "controller": controller_identity(cell.sweep, cell.id),
        "spark_evict": evict,
    }
    limit = ",".join(cell.hosts)  # a multi-node cell runs on its whole node set, head first
    run = fleet.run_playbook(
        "cell", inventory, extravars, limit=limit, on_event=progress.event_hook(host.name), cancel=cancel
    )
    if _stale_lock_reclaimed(inventory, host, run):
        run = fleet.run_playbook(
            "cell", inventory, extravars, limit=limit, on_event=progress.event_hook(host.name), cancel=cancel
        )
    try:
        serve = hostdata.serve_result(run.results.get(host.name, {}).get(tasks.SERVE.name, {}), "serve result")
        bench = [hostdata.bench_item(i, "bench result") for i in run.items.get(host.name, {}).get(tasks.BENCH.name, [])]
    except hostdata.BadHostData as exc:  # the archive is not read: the host already lied once
        collect.clear_cell_incoming(results_root, cell)
        rejected = collect.record_bad_host_data(results_root, cell, facts, exc.reason, started, time.time())
        progress.cell_finished(host.name, cell, rejected)
        log.error("bad_host_data", host=host.name, cell=cell.id, reason=exc.reason)
        return rejected
    if serve["host_error"]:  # busy, port taken, no docker...: the cell is not measured, nor counted as failed
        raise UserError(f"host {host.name}: {hostdata.one_line(serve['msg'])}")
    if host.name in run.unreachable:
        raise CellLost(
            "host_lost", f"host {host.name} became unreachable: {hostdata.one_line(run.unreachable[host.name])}"
        )
    for worker in [h for h in cell.hosts if h != host.name and h in run.unreachable]:
        # a node set's worker that dropped off: the host is lost, never a backend failure of the config (the engine
        # on the head died with it); the head's server and Ray were stopped by the playbook's teardown
        raise CellLost(
            "host_lost",
            f"worker host {worker} of node set {', '.join(cell.hosts)} became unreachable: "
            f"{hostdata.one_line(run.unreachable[worker])}",
            host=worker,
        )
    failed = run.failed_tasks.get(host.name, {})
    if tasks.FETCH.name not in run.results.get(host.name, {}) or tasks.FETCH.name in failed:
        # a fetch that failed half-way (a full disk) leaves a partial archive: never read as the host's answer
        why = (
            failed.get(tasks.FETCH.name)
            or run.failures.get(host.name)
            or run.failures.get("*")
            or f"ansible {run.status}, nothing came back"
        )
        if collect.disk_full(why):
            raise CellLost("controller", f"the results folder {results_root} is full ({hostdata.one_line(why)})")
        raise CellLost("interrupted" if cancel.is_set() else "lost", hostdata.one_line(why))
    measure_s = sum(i["elapsed_s"] for i in bench)
    try:
        record = collect.finalize_cell(results_root, cell, facts, started, time.time(), measure_s)
    except OSError as exc:
        if collect.disk_full(str(exc)) or exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CellLost("controller", f"the results folder {results_root} is full ({exc.strerror or exc})") from exc
        raise
    if record is None:
        raise CellLost("lost", "the cell's archive did not arrive")
    progress.cell_finished(host.name, cell, record)
    log.info(
        "cell_done",
        host=host.name,
        cell=cell.id,
        label=cell.label,
        verdict=record.verdict,
        failure=record.failure_class or None,
        seconds=round(time.time() - started, 1),
    )
    return record


def _stale_lock_reclaimed(inventory: Path, host: Host, run: fleet.FleetRun) -> bool:
    """A lock held by an earlier run of ours on this controller whose process is gone (e.g. SIGKILL) is stale:
    stop that run's server and take over. A lock held by anyone else is never touched."""
    try:
        serve = hostdata.serve_result(run.results.get(host.name, {}).get(tasks.SERVE.name, {}), "serve result")
    except hostdata.BadHostData as exc:
        log.error("bad_host_data", host=host.name, reason=exc.reason, action="the lock is left alone")
        return False
    holder = serve["holder"]
    if not serve["busy"] or not holder["cell_id"] or not holder["controller_pid"]:
        return False  # only a record naming one of our cells (12 hex, checked) is ever passed to a playbook
    ours = holder["controller_host"] == controller_identity("", "")["controller_host"]
    if not ours or psutil.pid_exists(holder["controller_pid"]):
        return False
    log.warning("stale_lock", host=host.name, holder=holder, action="stopping the dead run's server")
    fleet.run_playbook("teardown", inventory, hostdata.unsafe({"cell": {"id": holder["cell_id"]}}), limit=host.name)
    return True


def teardown(inventory: Path, hosts: list[Host], sweep: str) -> None:
    """Stop our server on every host (Ctrl-C, errors). Only servers of our cells are touched."""
    run = fleet.run_playbook(
        "teardown",
        inventory,
        {"cell": {"id": ""}, "sweep": sweep, "controller": controller_identity(sweep, "")},
        limit=_limit(hosts),
    )
    if not run.ok:
        log.error("teardown_incomplete", failures=run.failures, unreachable=run.unreachable)
