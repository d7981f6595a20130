"""The sweep: validate, gather facts, plan, provision, then each host runs its cells (one thread per host).

spec → plan → provision → serve → attest → measure → collect. Every stage's host work is a playbook in playbooks/;
this module only decides what runs where and turns the outcome into the results tree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import structlog

from agent.errors import UserError
from agent.planning import matrix as plan
from agent.planning.inventory import Host, check_reachable
from agent.planning.matrix import Cell
from agent.planning.spec import Spec
from agent.results import tree as results
from agent.running import collect, hostdata, tasks
from agent.running import playbooks as fleet
from agent.running.identity import controller_identity
from agent.running.progress import Progress

log = structlog.get_logger("spark_agent.sweep")


@dataclass
class HostOutcome:
    host: str
    done: list[str] = field(default_factory=list)  # cell ids finished in this run
    skipped: list[str] = field(default_factory=list)  # already finished (resume)
    lost: list[str] = field(default_factory=list)  # nothing came back (host error, interrupted)
    error: str = ""


@dataclass
class SweepOutcome:
    sweep_dir: Path
    hosts: dict[str, HostOutcome]
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)


def gather_facts(inventory: Path, hosts: list[Host]) -> dict[str, dict[str, Any]]:
    """Host facts (the fingerprint stored with every result), from the provision playbook's facts step."""
    run = fleet.run_playbook(tasks.FACTS.playbook, inventory, {"image": ""}, limit=_limit(hosts), tags=tasks.FACTS.tag)
    _raise_host_errors(run, "gathering facts")
    return validated_facts(run, hosts)


def validated_facts(run: fleet.FleetRun, hosts: list[Host]) -> dict[str, dict[str, Any]]:
    """Each host's spark_facts, checked (agent/running/hostdata.py); a bad shape is a clear host error."""
    try:
        return {h.name: hostdata.facts(_task(run, h.name, tasks.FACTS.name).get("spark_facts"), h.name) for h in hosts}
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


def plan_fleet(spec: Spec, hosts: list[Host], facts: dict[str, dict]) -> dict[str, list[Cell]]:
    return {h.name: plan.plan_cells(spec, h.name, facts[h.name], h.vars) for h in hosts}


def provision(inventory: Path, spec: Spec, hosts: list[Host], cells: dict[str, list[Cell]]) -> fleet.FleetRun:
    """The image present by digest and each cell's env file on its host. Idempotent."""
    by_host = {h: [{"id": c.id, "env": c.env} for c in cs] for h, cs in cells.items()}
    checkpoints = [{"name": c.name, "model": c.model} for c in spec.checkpoints]
    run = fleet.run_playbook(
        "provision",
        inventory,
        {"image": spec.image, "cells_by_host": by_host, "checkpoints": checkpoints},
        limit=_limit(hosts),
    )
    _raise_host_errors(run, "provisioning")
    for host, cs in cells.items():
        infos = checkpoint_infos(run, host)
        for cell in cs:
            cell.checkpoint_info = infos.get(cell.config["model"], {})
    return run


def checkpoint_infos(run: fleet.FleetRun, host: str) -> dict[str, dict]:
    """What the weight headers on the host say per checkpoint folder (bytes per token for the decode ceiling).
    Keyed by our own loop item's model; the summary is host data and is validated."""
    out = {}
    for item in run.items.get(host, {}).get(tasks.CHECKPOINTS.name, []):
        summary = item.get("summary")
        if summary:
            try:
                model = hostdata.text((item.get("item") or {}).get("model"), f"host {host}: checkpoint item")
                out[model] = hostdata.checkpoint_summary(summary, f"host {host}: checkpoint {model}")
            except hostdata.BadHostData as exc:
                raise UserError(f"provisioning failed: {exc.reason}") from None
    return out


def run_sweep(
    spec: Spec,
    inventory: Path,
    hosts: list[Host],
    results_root: Path,
    fresh: bool = False,
    evict: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> SweepOutcome:
    """Run every cell of the spec on every host. Returns what happened; the results tree holds the numbers."""
    cancel = cancel or threading.Event()
    progress = progress or Progress(enabled=False)
    for h in hosts:  # a host name becomes a folder of the results tree
        try:
            results.path_part(h.name, "host")
        except ValueError as exc:
            raise UserError(f"{inventory}: {exc}") from None
    warnings = plan.spec_warnings(spec)
    for w in warnings:
        log.warning("spec_warning", warning=w)
    check_reachable(hosts)
    facts = gather_facts(inventory, hosts)
    cells = plan_fleet(spec, hosts, facts)
    for host, cs in cells.items():
        for note in sorted({n for c in cs for n in c.notes}):
            log.warning("plan_note", host=host, note=note)
    collect.clear_incoming(results_root, spec.name)
    todo = {
        h: [c for c in cs if fresh or not results.is_finished(results_root, spec.name, h, c.id)]
        for h, cs in cells.items()
    }
    provision(inventory, spec, hosts, todo)
    outcome = SweepOutcome(sweep_dir=Path(results_root) / spec.name, hosts={}, warnings=warnings)
    progress.start({h: [c for c in todo[h]] for h in todo})
    runners = [
        threading.Thread(
            target=_host_worker,
            name=f"host-{h.name}",
            args=(
                inventory,
                h,
                cells[h.name],
                todo[h.name],
                facts[h.name],
                results_root,
                evict,
                progress,
                cancel,
                outcome,
            ),
            daemon=True,
        )
        for h in hosts
    ]
    try:
        for t in runners:
            t.start()
        _join(runners)
    except KeyboardInterrupt:
        outcome.interrupted = True
        cancel.set()
        log.warning("interrupted", action="stopping the server on every host")
        _join(runners, timeout=10)
        _stop_our_playbooks()
        teardown(inventory, hosts, spec.name)
        raise
    finally:
        progress.stop()
    return outcome


def _join(threads: list[threading.Thread], timeout: float | None = None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    for t in threads:
        while t.is_alive() and (deadline is None or time.monotonic() < deadline):
            t.join(timeout=0.2)


def _stop_our_playbooks() -> None:
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
    all_cells: list[Cell],
    todo: list[Cell],
    facts: dict,
    results_root: Path,
    evict: bool,
    progress: Progress,
    cancel: threading.Event,
    outcome: SweepOutcome,
) -> None:
    result = HostOutcome(host=host.name, skipped=[c.id for c in all_cells if c not in todo])
    outcome.hosts[host.name] = result
    for cell in todo:
        if cancel.is_set():
            result.lost.append(cell.id)
            continue
        try:
            record = run_cell(inventory, host, cell, facts, results_root, evict, progress, cancel)
        except UserError as exc:  # the host can't take cells (busy, no docker): say so, keep other hosts going
            result.error = exc.message
            result.lost += [c.id for c in todo[todo.index(cell) :]]
            log.error("host_stopped", host=host.name, error=exc.message)
            progress.host_failed(host.name, exc.message)
            return
        (result.done if record else result.lost).append(cell.id)


def run_cell(
    inventory: Path,
    host: Host,
    cell: Cell,
    facts: dict,
    results_root: Path,
    evict: bool,
    progress: Progress,
    cancel: threading.Event,
) -> dict | None:
    """Serve, bench, collect and tear down one cell on one host (playbooks/cell.yml), then write its results."""
    started = time.time()
    progress.cell_started(host.name, cell)
    extravars = {
        "cell": hostdata.unsafe(cell.playbook_vars()),  # facts reach it (the simulator's chip): never a template
        "sweep": cell.sweep,
        "spark_results_dir": str(Path(results_root).resolve()),
        "controller": controller_identity(cell.sweep, cell.id),
        "spark_evict": evict,
    }
    run = fleet.run_playbook(
        "cell", inventory, extravars, limit=host.name, on_event=progress.event_hook(host.name), cancel=cancel
    )
    if _stale_lock_reclaimed(inventory, host, run):
        run = fleet.run_playbook(
            "cell", inventory, extravars, limit=host.name, on_event=progress.event_hook(host.name), cancel=cancel
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
        raise UserError(f"host {host.name} became unreachable: {run.unreachable[host.name]}")
    measure_s = sum(i["elapsed_s"] for i in bench)
    record = collect.finalize_cell(results_root, cell, facts, started, time.time(), measure_s)
    progress.cell_finished(host.name, cell, record)
    log.info(
        "cell_done",
        host=host.name,
        cell=cell.id,
        label=cell.label,
        verdict=record["verdict"] if record else "lost",
        failure=(record or {}).get("failure_class") or None,
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
