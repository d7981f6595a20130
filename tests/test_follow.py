"""The attached sweep's pieces that need no host: a look that waits for the runner's progress to change, what it hands out for tune's selection, and
the runner forgetting an earlier hand-out's cells (the integration tests run it over sshd hosts)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from agent.hostside import runner, supervise, utc
from agent.planning import groups
from agent.planning.matrix import plan_cells
from agent.running import detach

from .test_queue import FACTS, _cells

pytestmark = pytest.mark.unit


def _write_progress(workdir, sweep: str, **fields) -> None:
    folder = runner.sweep_dir(str(workdir), sweep)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / runner.PROGRESS).write_text(json.dumps({"sweep": sweep, "state": "running", "done": {}, **fields}))


def test_a_look_waits_on_the_host_until_the_progress_changes(tmp_path):
    """A look with the last look's token returns when a cell ends (after the runner's next write settles), after
    wait_s when nothing changes, and at once without a token or without a live runner."""
    workdir, sweep = str(tmp_path), "s"
    _write_progress(tmp_path, sweep, current="aaaaaaaaaaaa")
    holder = {
        "user": "u",
        "controller_host": "c",
        "controller_pid": 1,
        "since": utc.iso(),
        "sweep": sweep,
        "cell_id": "",
    }
    lock = supervise.acquire_runner_lock(workdir, holder, sweep)  # this process plays the live runner
    try:
        seen = runner.progress_token(runner.read_progress(workdir, sweep))
        t0 = time.monotonic()
        assert runner.progress_token(runner.await_progress(workdir, sweep, seen, wait_s=0.6, poll_s=0.1)) == seen
        assert 0.6 <= time.monotonic() - t0 < 3
        t0 = time.monotonic()
        assert runner.await_progress(workdir, sweep, "", wait_s=5)["current"] == "aaaaaaaaaaaa"
        assert time.monotonic() - t0 < 1, "no token: nothing to wait for"

        def cell_ends() -> None:
            time.sleep(0.3)
            done = {"aaaaaaaaaaaa": {"outcome": "sealed", "error": "", "started": 1.0, "finished": 2.0, "measure_s": 1}}
            _write_progress(tmp_path, sweep, current="", done=done)
            time.sleep(0.05)  # the runner reads the plan and starts the next cell a moment later
            _write_progress(tmp_path, sweep, current="bbbbbbbbbbbb", done=done)

        writer = threading.Thread(target=cell_ends)
        t0 = time.monotonic()
        writer.start()
        got = runner.await_progress(workdir, sweep, seen, wait_s=10, poll_s=0.1, settle_s=0.3)
        writer.join()
        assert time.monotonic() - t0 < 3, "a change ends the wait"
        assert got["current"] == "bbbbbbbbbbbb" and "aaaaaaaaaaaa" in got["done"], "the settled state, both writes"
        seen = runner.progress_token(got)
    finally:
        os.close(lock)  # the runner dies: its record stays, naming a process that is not this one
    record = supervise.state_dir(workdir) / supervise.RUNNER_FILE
    record.write_text(json.dumps({**json.loads(record.read_text()), "runner_pid": 1}))
    t0 = time.monotonic()
    assert runner.await_progress(workdir, sweep, seen, wait_s=10)["alive"] is False
    assert time.monotonic() - t0 < 1, "no live runner: nothing will change, no wait"


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


def test_the_plan_is_written_whole_owner_only_with_the_serve_env_and_once(tmp_path):
    """spark_runner hands a host its plan and starts the runner in one module run: runner.write_plan."""
    workdir, sweep = str(tmp_path), "s"
    plan = {"sweep": sweep, "handout": "h1", "cells": [{"id": "aaaaaaaaaaaa"}], "host": {"url": "http://x:1"}}
    secret = {"HF_TOKEN": "hf_not_in_the_controllers_plan"}
    assert runner.write_plan(workdir, sweep, plan, secret, check=True) is True
    assert not (runner.sweep_dir(workdir, sweep) / runner.PLAN).exists(), "check mode writes nothing"
    assert runner.write_plan(workdir, sweep, plan, secret) is True
    path = runner.sweep_dir(workdir, sweep) / runner.PLAN
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    written = json.loads(path.read_text())
    assert written["host"] == {"url": "http://x:1", "serve_env": secret} and written["cells"] == plan["cells"]
    assert runner.write_plan(workdir, sweep, plan, secret) is False, "the same plan again: nothing changes"
    more = {**plan, "cells": [*plan["cells"], {"id": "bbbbbbbbbbbb"}]}
    assert runner.write_plan(workdir, sweep, more, secret) is True  # a lost host's cell appended for the live runner
    with pytest.raises(runner.HostError, match="not a plan"):
        runner.write_plan(workdir, sweep, {"cells": "all"}, {})


def test_the_bar_moves_with_the_running_cell_not_only_when_it_ends(tmp_path):
    """Fleet mode (issue 26 §10): at each look the host's bar advances by the running cell's time so far, never
    past its planned windows, and the cell's end adds exactly the rest (the bar ends full)."""
    import io

    from rich.console import Console

    from agent.running.progress import Progress, _cell_seconds

    _, cells = _cells(tmp_path, "a")
    cell = cells[0]
    planned = _cell_seconds(cell)
    shown = Progress(enabled=True, console=Console(file=io.StringIO(), force_terminal=True))
    shown.start({"a": [cell]})
    assert shown.display is not None
    task = shown.display.tasks[0]
    try:
        shown.runner_state("a", 0, 1, cell, utc.iso(time.time() - planned / 2))
        assert planned / 2 - 1.5 <= task.completed <= planned / 2 + 1.5
        shown.runner_state("a", 0, 1, cell, utc.iso(time.time() - planned * 10))  # a host clock far behind
        assert task.completed < planned
        shown.runner_state("a", 0, 1, cell, "not a time")
        shown.cell_done("a", cell, "valid")
        assert task.completed == pytest.approx(planned)
    finally:
        shown.stop()


def test_the_eta_is_the_whole_runs_rate_server_starts_included(tmp_path):
    """Issue 36 (an ETA of 32 min for an 11-min run): a bar moves in bursts (a server start moves it not at all), so
    the time left comes from the rate over the whole run so far, never a recent burst or nothing at all."""
    import io

    from rich.console import Console

    from agent.running.progress import Progress, _cell_seconds

    _, cells = _cells(tmp_path, "a")
    cell = cells[0]
    windows = _cell_seconds(cell)
    start_s = 300.0  # each cell: a server start of minutes, as on a Spark (the bar does not move), then its windows
    now = [0.0]
    shown = Progress(enabled=True, console=Console(file=io.StringIO(), force_terminal=True))
    shown.start({"a": [cell, cell, cell]})
    assert shown.display is not None
    task = shown.display.tasks[0]
    task._get_time = lambda: now[0]
    shown.display.get_time = lambda: now[0]
    try:
        for _ in range(2):
            now[0] += start_s + windows
            shown.cell_done("a", cell, "valid")
        assert task.time_remaining == pytest.approx(start_s + windows, rel=0.01)  # the third cell, start included
    finally:
        shown.stop()
