"""The attached sweep's pieces that need no host: when it looks again, what it hands out for tune's selection, and
the runner forgetting an earlier hand-out's cells (the integration tests run it over sshd hosts)."""

from __future__ import annotations

import json
import signal
import time

import pytest

from agent.hostside import runner, utc
from agent.planning import groups
from agent.planning.matrix import plan_cells
from agent.running import detach
from agent.running.follow import FAST_LOOK_S, SLOW_LOOK_S, next_look

from .test_queue import FACTS, _cells

pytestmark = pytest.mark.unit


def _looked(**hosts: detach.HostProgress) -> detach.Collected:
    return detach.Collected(progress=hosts, still_running={h: p.current for h, p in hosts.items() if p.alive})


def test_the_next_look_is_soon_only_when_a_cell_should_be_ending(tmp_path):
    _, cells = _cells(tmp_path, "a")  # one level, 1 warmup + 3 repeats of 1 s: 4 s planned
    cell = cells[0]
    by_id = {cell.id: cell}
    now = time.time()

    def on_it(started: float) -> detach.HostProgress:
        return detach.HostProgress(
            "a", True, state="running", alive=True, current=cell.id, current_since=utc.iso(started)
        )

    planned = next_look(_looked(a=on_it(now + 60)), by_id, now)  # a long way from its end (clock skew: a hint)
    assert planned == SLOW_LOOK_S
    assert next_look(_looked(a=on_it(now - 60)), by_id, now) == FAST_LOOK_S  # overdue: look soon
    between = detach.HostProgress("a", True, state="running", alive=True)
    assert next_look(_looked(a=between), by_id, now) == FAST_LOOK_S
    silent = detach.Collected(progress={}, unanswered={"a": "unreachable"})
    assert next_look(silent, by_id, now) == FAST_LOOK_S


def test_a_selection_for_some_hosts_only_is_handed_to_those_hosts(tmp_path):
    """tune selects per host: a cell chosen for b alone goes to b, never to a host that did not select it."""
    spec, _ = _cells(tmp_path, "a")
    hosts = ["a", "b"]
    cells = {h: plan_cells(spec, h, FACTS, {"spark_runtime": "process"}) for h in hosts}
    chosen = {"a": [], "b": cells["b"][:1]}
    g = groups.group_facts(dict.fromkeys(hosts, FACTS))
    assert detach.assign(g, chosen, chosen, replicas=1) == {"a": [], "b": [cells["b"][0].id]}
    assert detach.assign(g, chosen, chosen, replicas=2) == {"a": [], "b": [cells["b"][0].id]}  # only b may


def test_a_runner_forgets_what_it_did_for_an_earlier_hand_out(tmp_path):
    """A re-run (or --fresh) hands out anew: the cells done for the last hand-out are run again, and a tar left
    by an earlier run of the same cell id is never offered for collection."""
    workdir, sweep = str(tmp_path), "s"
    folder = runner.sweep_dir(workdir, sweep)
    folder.mkdir(parents=True)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "0123456789ab.tar").write_bytes(b"old")
    done = {"outcome": "sealed", "error": "", "started": 1.0, "finished": 2.0, "measure_s": 1.0}
    progress = {"state": "finished", "handout": "old", "done": {"0123456789ab": done}}
    (folder / runner.PROGRESS).write_text(json.dumps(progress))
    assert runner.read_progress(workdir, sweep)["sealed"] == ["0123456789ab"]
    failed = {**done, "outcome": "host_error"}
    (folder / runner.PROGRESS).write_text(json.dumps({**progress, "done": {"0123456789ab": failed}}))
    assert runner.read_progress(workdir, sweep)["sealed"] == [], "a host error's stale tar is not its answer"
    (folder / runner.PLAN).write_text(json.dumps({"sweep": sweep, "handout": "new", "cells": []}))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert runner.run(workdir, sweep) == 0  # nothing to run in the new plan
    finally:
        for sig, handler in handlers.items():  # the runner installs its own: give pytest its own back
            signal.signal(sig, handler)
    after = json.loads((folder / runner.PROGRESS).read_text())
    assert after["handout"] == "new" and after["done"] == {} and after["state"] == "finished"
