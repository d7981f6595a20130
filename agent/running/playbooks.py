"""Run the playbooks through ansible-runner; turn its events into results, progress and structlog logs.

Nothing host-specific lives here: which playbook, which hosts and which variables is the caller's business.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import structlog

from agent.paths import ANSIBLE_CFG, PLAYBOOKS
from agent.running.hostdata import one_line

log = structlog.get_logger("spark_agent.fleet")

EventHook = Callable[[dict[str, Any]], None]


@dataclass
class FleetRun:
    """What one playbook run did, per host."""

    rc: int
    status: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> task name -> module result
    items: dict[str, dict[str, list]] = field(default_factory=dict)  # host -> task name -> loop item results
    failures: dict[str, str] = field(default_factory=dict)  # host -> first failure message
    unreachable: dict[str, str] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures and not self.unreachable


def playbook_path(name: str) -> Path:
    path = Path(name)
    if not path.is_absolute():
        path = PLAYBOOKS / (name if name.endswith(".yml") else f"{name}.yml")
    return path


def ansible_env() -> dict[str, str]:
    """The environment ansible-playbook runs in: our config, and this venv's bin first on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
    }


MAX_MESSAGE = 500  # a host's failure message, as we quote it


def _failure_message(res: dict[str, Any]) -> str:
    """The last line of what failed, as one bounded line: it is host text and ends up in errors and logs."""
    msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or "failed"
    return one_line(str(msg).strip().splitlines()[-1] if str(msg).strip() else "failed", MAX_MESSAGE)


class _Collector:
    """Folds runner events into a FleetRun as they arrive, and forwards them to a hook."""

    def __init__(self, run: FleetRun, hook: EventHook | None):
        self.run = run
        self.hook = hook
        self.lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        host, task, res = data.get("host"), data.get("task", ""), data.get("res") or {}
        kind = event.get("event", "")
        with self.lock:
            if kind in ("runner_on_ok", "runner_on_failed") and host:
                self.run.results.setdefault(host, {})[task] = res
                if res.get("changed"):
                    self.run.changed[host] = self.run.changed.get(host, 0) + 1
            if kind in ("runner_item_on_ok", "runner_item_on_failed") and host:
                self.run.items.setdefault(host, {}).setdefault(task, []).append(res)
            if kind == "runner_on_failed" and host and not data.get("ignore_errors"):
                self.run.failures.setdefault(host, f"{task}: {_failure_message(res)}")
            if kind == "runner_on_unreachable" and host:
                self.run.unreachable[host] = _failure_message(res)
        if self.hook and kind.startswith(("runner_", "playbook_on_task_start")):
            log.debug("ansible_event", kind=kind, host=host, task=task)
            self.hook(event)
        return True


def run_playbook(
    playbook: str,
    inventory: str | Path,
    extravars: dict[str, Any] | None = None,
    limit: str | None = None,
    tags: str | None = None,
    on_event: EventHook | None = None,
    cancel: threading.Event | None = None,
) -> FleetRun:
    """Run one playbook with ansible-runner and return what happened on each host."""
    cancel = cancel or threading.Event()
    outcome: dict[str, Any] = {}
    # ansible-runner installs its own SIGINT/SIGTERM handlers when called from the main thread (and leaves them
    # there, swallowing every later Ctrl-C); in a worker thread it doesn't, and Ctrl-C reaches us.
    worker = threading.Thread(
        target=_run_in_thread,
        name="ansible-runner",
        daemon=True,
        args=(playbook, inventory, extravars, limit, tags, on_event, cancel, outcome),
    )
    worker.start()
    try:
        while worker.is_alive():
            worker.join(timeout=0.2)
    except KeyboardInterrupt:
        cancel.set()
        worker.join()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["run"]


def _run_in_thread(playbook, inventory, extravars, limit, tags, on_event, cancel, outcome) -> None:
    try:
        outcome["run"] = _run(playbook, inventory, extravars, limit, tags, on_event, cancel)
    except BaseException as exc:  # handed to the caller's thread
        outcome["error"] = exc


def _run(playbook, inventory, extravars, limit, tags, on_event, cancel) -> FleetRun:
    run = FleetRun(rc=-1, status="unstarted")
    collector = _Collector(run, on_event)
    private = Path(tempfile.mkdtemp(prefix="spark-agent-runner-"))
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private),
            playbook=str(playbook_path(playbook)),
            inventory=str(Path(inventory).resolve()),
            extravars=extravars or {},
            limit=limit,
            tags=tags,
            envvars=ansible_env(),
            event_handler=collector,
            cancel_callback=cancel.is_set,
            quiet=True,
            suppress_env_files=True,
            settings={"suppress_ansible_output": True},
        )
        run.rc, run.status = runner.rc, runner.status
        if run.rc != 0 and not run.failures and not run.unreachable:
            stdout = runner.stdout.read() if runner.stdout else ""
            run.failures["*"] = stdout.strip().splitlines()[-1] if stdout.strip() else f"ansible {runner.status}"
    finally:
        shutil.rmtree(private, ignore_errors=True)
    log.info(
        "playbook_done",
        playbook=Path(str(playbook)).name,
        limit=limit,
        rc=run.rc,
        status=run.status,
        failures=run.failures or None,
        unreachable=run.unreachable or None,
    )
    return run
