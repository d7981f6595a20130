"""The attached sweep follows the host-side runners: hand out as `--detach` does, then collect until every host is done.

One code path for running cells (issue 13 §3): `sweep SPEC` = running/sweep.prepare → detach.record_hand_out +
start_hand_out (plan files, runners) → detach.collect_sweep every few seconds (what `collect --wait` repeats) → the
summary, built from the hand-out record and the results tree. Each host runs its cells back to back with no
controller connected, so a controller that goes away (SIGKILL, a closed laptop) costs no host time: running the same
spec again first follows the runners still going and collects what they sealed. Ctrl-C / SIGTERM stops the runners
(their current server too; that cell stays unsealed and is recorded `interrupted`). Node-set cells (server.nodes > 1)
still run one playbook per cell (sweep.run_node_sets): ARCHITECTURE.md says why.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from agent.errors import UserError
from agent.hostside import utc
from agent.planning.inventory import Host
from agent.planning.matrix import Cell
from agent.planning.spec import Spec
from agent.results import tree as results
from agent.running import collect, detach, tasks
from agent.running import playbooks as fleet
from agent.running.livemetrics import LiveMetrics
from agent.running.progress import Progress
from agent.running.sweep import (
    HostOutcome,
    Prepared,
    SweepOutcome,
    prepare,
    run_node_sets,
    stop_our_playbooks,
    stored_verdict,
    teardown,
)

log = structlog.get_logger("spark_agent.sweep")

LOOK_WAIT_S = 10.0  # a look waits on each host this long for its progress to change (progress shown this often)
SILENT_LOOK_S = 2.0
STOPPED_MID_CELL = "stopped mid-cell"  # lost.toml's error for the cell a runner was on when the sweep stopped  # with a host silent, looks come at most this often (each is an ansible-playbook run)


def run_sweep(
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
    spec_path: Path | None = None,
    lost_after: float = detach.LOST_AFTER_S,
    metrics: LiveMetrics | None = None,
) -> SweepOutcome:
    """Measure every cell of the spec once per fingerprint group (on `replicas` hosts of it), each host's share run
    by its runner. `select` (running/tune.py) picks the cells to run now from every planned cell per host; exactly
    those are handed out. `cancel` (set by another thread) stops the sweep as Ctrl-C does."""
    if spec.server.nodes > 1:
        return run_node_sets(spec, inventory, hosts, results_root, fresh, evict, progress, cancel, replicas, select)
    progress = progress or Progress(enabled=False)
    root = Path(results_root)
    prepared = prepare(spec, inventory, hosts, root, fresh, replicas, select)
    run = _Following(spec, hosts, root, prepared.cells, progress, cancel or threading.Event(), lost_after, evict)
    run.metrics = metrics
    state: detach.FleetState | None = None
    try:
        run.previous()
        prepared = dataclasses.replace(prepared, todo=_still_to_do(prepared, root, spec.name, fresh, run.collected))
        state = detach.record_hand_out(prepared, spec, spec_path, inventory, root, replicas)
        run.state = state
        detach.start_hand_out(state, spec, prepared.cells, inventory, root, evict)
        run.follow(state, show=True)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM turned into one by the CLI
        run.interrupted = True
        run.stop("interrupted")
    except OSError as exc:
        if not (collect.disk_full(str(exc)) or exc.errno in detach.DISK_FULL):
            raise
        run.fatal = f"the results folder {root} is full ({exc.strerror or exc})"
        log.error("controller_disk_full", error=run.fatal, action="stopping the runners")
        run.stop("controller")
    finally:
        progress.stop()
    return outcome_of(state, prepared, root, spec.name, replicas, run)


@dataclasses.dataclass
class _Following:
    """One attached sweep's following: the record followed now, and what the last look saw."""

    spec: Spec
    hosts: list[Host]
    root: Path
    cells: dict[str, list[Cell]]
    progress: Progress
    cancel: threading.Event
    lost_after: float
    evict: bool
    state: detach.FleetState | None = None
    last: detach.Collected | None = None
    collected: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # (host, cell) brought back by us
    interrupted: bool = False
    fatal: str = ""
    shown: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # host -> cells the display counted done
    metrics: LiveMetrics | None = None  # the live OpenMetrics view (--metrics), updated at each look

    def previous(self) -> None:
        """A controller of this sweep went away (SIGKILL, laptop closed) and its runners may still run: follow
        them to the end and collect what they sealed before handing out what is left."""
        try:
            old = detach.load_state(self.root, self.spec.name)
        except UserError:
            return
        if old.finished:
            return
        mine = {h: {c.id for c in cs} for h, cs in self.cells.items()}
        if any(cid not in mine.get(h, set()) for h, ids in old.assignment.items() for cid in ids):
            log.warning("previous_sweep_not_followed", sweep=old.sweep, why="other hosts or another spec")
            return
        log.info("following_previous_runners", sweep=old.sweep, started=old.started)
        self.state = old
        self.follow(old, show=False, hand_on=False)  # what is still missing after it is handed out anew below
        self.state = None

    def follow(self, state: detach.FleetState, show: bool, hand_on: bool = True) -> None:
        """Collect until nothing runs on any host that still counts; the record is then marked finished.
        hand_on=False (an earlier controller's runners): only collect, until no runner that answers still runs."""
        if not any(state.assignment.values()):
            state.finished = True
            detach.save_state(self.root, state)
            return
        by_id = {c.id: c for cs in self.cells.values() for c in cs}
        if show:
            self.progress.start({h: [by_id[c] for c in ids] for h, ids in state.assignment.items() if ids})
        seen: dict[str, str] = {}  # host -> what the last look saw: the next one waits on the host for a change
        wait_s = LOOK_WAIT_S
        while True:
            if self.cancel.is_set():
                raise KeyboardInterrupt
            began = time.monotonic()
            got = self._look(state, hand_on, wait_s, seen)
            seen = {h: p.token for h, p in got.progress.items() if p.answered and p.token}
            self._took(got, state, by_id, show)
            if got.finished or not (hand_on or got.still_running):
                break
            # A silent host fails its look at once: look again every SILENT_LOOK_S (not faster), so that it is
            # declared lost on time, without the others' waits in between.
            wait_s = SILENT_LOOK_S if got.unanswered else LOOK_WAIT_S
            if got.unanswered:
                self.cancel.wait(max(0.0, SILENT_LOOK_S - (time.monotonic() - began)))
        state.finished = True
        detach.save_state(self.root, state)

    def _look(
        self, state: detach.FleetState, hand_on: bool, wait_s: float = 0.0, seen: dict[str, str] | None = None
    ) -> detach.Collected:
        """One look at every runner, the sealed cells brought back (detach.collect_sweep)."""
        return detach.collect_sweep(
            state,
            self.spec,
            self.hosts,
            self.root,
            self.lost_after,
            self.evict,
            cells=self.cells,
            hand_on=hand_on,
            wait_s=wait_s,
            seen=seen,
        )

    def _took(self, got: detach.Collected, state: detach.FleetState, by_id: dict[str, Cell], show: bool) -> None:
        self.last = got
        for host, ids in got.new.items():
            self.collected.update((host, cid) for cid in ids)
        if self.metrics is not None:
            self.metrics.look(state, got, by_id, self.root)
        if not show:
            return
        for host, p in got.progress.items():
            assigned = state.assignment.get(host, [])
            if not assigned:
                continue
            if not p.answered:
                self.progress.host_failed(host, f"no answer: {p.error}")
                continue
            seen = self.shown.setdefault(host, set())
            for cid in assigned:
                if cid in p.done and cid not in seen:
                    seen.add(cid)
                    self.progress.cell_done(host, by_id[cid], _verdict(self.root, state.sweep, host, cid, p.done[cid]))
            current = by_id.get(p.current) if p.current else None
            self.progress.runner_state(host, len(seen), len(assigned), current, p.current_since)

    def stop(self, reason: str) -> None:
        """Stop every runner of the record followed now (their servers too), then bring back what they sealed;
        the cell each was on is recorded with `reason` (interrupted | controller)."""
        state = self.state
        if state is None:
            return
        stop_our_playbooks()  # a look or a fetch cut short by the signal: its ansible-playbook must not go on
        busy = [h for h in state.hosts() if state.assignment[h] and h not in state.lost]
        log.warning("stopping_runners", hosts=busy, reason=reason)
        inventory = Path(state.inventory)
        stopped = fleet.run_playbook(
            tasks.RUNNER_STOP.playbook, inventory, {"sweep": state.sweep}, limit=",".join(busy)
        )
        if not stopped.ok:  # a runner that would not stop: its server is stopped the attached way
            teardown(inventory, [h for h in self.hosts if h.name in busy], state.sweep)
        if reason == "controller":  # a fetch cut short by the full disk leaves no partial archive behind
            try:
                collect.clear_incoming(self.root, state.sweep)
            except OSError as exc:
                log.error("incoming_not_cleared", error=str(exc))
        on = {h: p.current for h, p in (self.last.progress if self.last else {}).items() if p.answered and p.current}
        if reason != "controller":  # with the disk full, a fetch fails again: the sealed tars wait on the hosts
            try:
                got = self._look(state, hand_on=False)
                self.collected.update((h, c) for h, ids in got.new.items() for c in ids)
                for host, p in got.progress.items():  # the runner names the cell it stopped (the last look may not)
                    if p.answered and p.stopped:
                        on[host] = p.stopped
            except (OSError, UserError) as exc:
                log.error("final_collect_failed", error=str(exc))
        for host, cid in on.items():
            if not detach.stored(state, self.root, host, cid):
                why = f"{STOPPED_MID_CELL}: the sweep was {reason}"
                try:
                    results.record_lost(self.root, state.sweep, host, cid, reason, why, utc.iso())
                except OSError as exc:  # a full disk can't take the note either; no cell.toml still says "measure"
                    log.error("lost_record_not_written", cell=cid, error=str(exc))
        state.finished = True
        try:
            detach.save_state(self.root, state)
        except OSError as exc:
            log.error("record_not_saved", error=str(exc))


def _still_to_do(
    prepared: Prepared, root: Path, sweep: str, fresh: bool, collected: set[tuple[str, str]]
) -> dict[str, list[Cell]]:
    """What prepare planned to run, less what the previous controller's runners finished since (resume); with
    --fresh, only those are kept."""
    return {
        h: [c for c in cs if (h, c.id) not in collected and (fresh or not results.is_finished(root, sweep, h, c.id))]
        for h, cs in prepared.todo.items()
    }


def _verdict(root: Path, sweep: str, host: str, cid: str, done: dict) -> str:
    if done.get("outcome") == "host_error":
        return "host error"
    if results.is_finished(root, sweep, host, cid):
        return str(results.read_toml(results.cell_dir(root, sweep, host, cid) / results.CELL_FILE).get("verdict"))
    return "sealed"


_BUCKET = {"valid": "measured", "invalid": "invalid"}


def outcome_of(
    state: detach.FleetState | None, prepared: Prepared, root: Path, sweep: str, replicas: int, run: _Following
) -> SweepOutcome:
    """Where each planned cell ended up, from the hand-out record and the results tree: every cell in one bucket."""
    outcome = SweepOutcome(
        sweep_dir=root / sweep,
        hosts={},
        interrupted=run.interrupted,
        fatal=run.fatal,
        warnings=prepared.warnings,
        groups=prepared.groups,
        replicas=replicas,
    )
    why_not_run = "interrupted" if run.interrupted else run.fatal or "stopped"
    for host, cells in prepared.cells.items():
        todo = {c.id for c in prepared.todo.get(host, [])}
        by_id = {c.id: c for c in cells}
        # measured while detached (an earlier hand-out's runners) and brought back by this run: this run's cells
        brought = [c.id for c in cells if c.id not in todo and (host, c.id) in run.collected]
        skipped = {c.id: stored_verdict(root, c) for c in cells if c.id not in todo and c.id not in brought}
        o = HostOutcome(host=host, planned=list(skipped) + brought, skipped=skipped, while_detached=brought)
        outcome.hosts[host] = o
        for cid in brought:
            o.add(_BUCKET.get(stored_verdict(root, by_id[cid]), "failed"), cid)
        assigned = state.assignment.get(host, []) if state else [c.id for c in prepared.todo.get(host, [])]
        o.planned += [cid for cid in assigned if cid not in skipped]
        if state and host in state.refused:
            o.error = state.refused[host]
        elif state and host in state.lost:
            o.host_lost, o.error = True, state.lost[host]
        for cid in assigned:
            if detach.stored(state, root, host, cid) if state else results.is_finished(root, sweep, host, cid):
                o.add(_BUCKET.get(stored_verdict(root, by_id[cid]), "failed"), cid)
            elif state and f"{host}/{cid}" in state.requeued:
                o.add("requeued", cid, f"handed to {state.requeued[f'{host}/{cid}']}")
            else:
                reason, error = _lost_reason(root, sweep, host, cid)
                if reason == "host_failed" and not o.error:  # the host could not take it (busy, port taken)
                    o.error = error
                o.add("lost", cid, f"{reason}: {error}" if reason else f"not run: {o.error or why_not_run}")
    return outcome


def _lost_reason(root: Path, sweep: str, host: str, cid: str) -> tuple[str, str]:
    """What lost.toml says about a cell started and not finished (reason, error); ("", "") when it never started."""
    try:
        lost = results.read_toml(results.cell_dir(root, sweep, host, cid) / results.LOST_FILE)
    except (OSError, ValueError):
        return "", ""
    return str(lost.get("reason", "lost")), str(lost.get("error", ""))
