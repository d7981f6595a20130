"""Run the playbooks through ansible-runner; turn its events into results, progress and structlog logs.

Nothing host-specific lives here: which playbook, which hosts and which variables is the caller's business.
"""

from __future__ import annotations

import json
import os
import re
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

from agent.errors import UserError
from agent.paths import AGENT, ANSIBLE_CFG, PLAYBOOKS
from agent.planning import vault
from agent.running.archive import MAX_ARCHIVE_BYTES
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
    failed_tasks: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> task name -> its failure message
    unreachable: dict[str, str] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    host_keys: dict[str, str] = field(default_factory=dict)  # host -> why its SSH host key was refused

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures and not self.unreachable


def playbook_path(name: str) -> Path:
    path = Path(name)
    if not path.is_absolute():
        path = PLAYBOOKS / (name if name.endswith(".yml") else f"{name}.yml")
    return path


# The largest file a playbook may write on the controller: a sealed tar at archive.py's limit and a margin; archive.py
# then refuses anything over its own limit with its own message.
MAX_FETCH_BYTES = MAX_ARCHIVE_BYTES + 4 * 1024 * 1024


def ansible_env() -> dict[str, str]:
    """The environment ansible-playbook runs in: our config, and this venv's bin first on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_NOCOLOR": "1",
        # a playbook dies with the controller that started it (playbooks/callback_plugins/spark_parent_guard.py)
        "ANSIBLE_CALLBACK_PLUGINS": str(PLAYBOOKS / "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "spark_parent_guard,spark_file_limit",
        "SPARK_AGENT_CONTROLLER_PID": str(os.getpid()),
        # no file a playbook writes (a fetched tar above all) grows past this (callback_plugins/spark_file_limit.py)
        "SPARK_AGENT_MAX_FILE_BYTES": str(MAX_FETCH_BYTES),
        # ansible-runner turns checking off unless told, and Ansible then puts StrictHostKeyChecking=no ahead of
        # any inventory setting. On, always: an inventory that must skip it says so itself.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        **vault.runner_env(),
    }


MAX_MESSAGE = 500  # a host's failure message, as we quote it


def write_extravars(private: Path, extravars: dict[str, Any]) -> None:
    """Extra vars go in a file only we can read, in ansible-runner's private dir (0700), where it finds them and
    passes `-e @file`: given as a dict, it would put them on ansible-playbook's command line for any `ps` to see."""
    env_dir = private / "env"
    env_dir.mkdir(mode=0o700)
    fd = os.open(env_dir / "extravars", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(extravars, handle)


_KNOWN_FOR = re.compile(r"(?:host key is known for|Host key for) (\S+) (?:and you|has changed)")
_OFFENDING = re.compile(r"Offending \S+ key in (\S+):(\d+)")


def host_key_message(host: str, ssh_output: str) -> str | None:
    """One line for a host whose SSH key is unknown or changed (None when that is not the problem)."""
    text = ssh_output.replace("\r", "")
    changed = "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "has changed and you have" in text
    if not changed and "Host key verification failed" not in text:
        return None
    named = _KNOWN_FOR.search(text)
    target = named[1] if named else "ADDRESS"
    bracketed = re.fullmatch(r"\[(.+)\]:(\d+)", target)
    keyscan = f"ssh-keyscan -p {bracketed[2]} {bracketed[1]}" if bracketed else f"ssh-keyscan {target}"
    if changed:
        offending = _OFFENDING.search(text)
        where = f" ({offending[1]} line {offending[2]})" if offending else ""
        return (
            f"host {host}: its SSH host key has CHANGED and no longer matches known_hosts{where}: refused, nothing "
            "ran on it. This is what a man-in-the-middle looks like. Only if you know the host was reinstalled: "
            f"read its new fingerprint on its console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), compare "
            f"it with `{keyscan} | ssh-keygen -lf -`, then ssh-keygen -R '{target}' and add the new line"
        )
    return (
        f"host {host}: its SSH host key is not in known_hosts: refused, nothing ran on it. Verify it: compare "
        f"`{keyscan} | ssh-keygen -lf -` with the fingerprint on the host's console "
        "(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then append the ssh-keyscan line to ~/.ssh/known_hosts "
        "or to the UserKnownHostsFile the inventory names (`spark-agent trust` will do this for you)"
    )


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
            if kind == "runner_on_failed" and host:
                self.run.failed_tasks.setdefault(host, {})[task] = _failure_message(res)
            if kind == "runner_on_failed" and host and not data.get("ignore_errors"):
                self.run.failures.setdefault(host, f"{task}: {_failure_message(res)}")
            if kind == "runner_on_unreachable" and host:
                refused = host_key_message(host, str(res.get("msg", "")))
                if refused:
                    self.run.host_keys[host] = refused
                self.run.unreachable[host] = refused or _failure_message(res)
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
    skip_tags: str | None = None,
) -> FleetRun:
    """Run one playbook with ansible-runner and return what happened on each host.

    A host whose SSH key is unknown or changed raises UserError (nothing ran on it): every command refuses it alike."""
    cancel = cancel or threading.Event()
    outcome: dict[str, Any] = {}
    # ansible-runner installs its own SIGINT/SIGTERM handlers when called from the main thread (and leaves them
    # there, swallowing every later Ctrl-C); in a worker thread it doesn't, and Ctrl-C reaches us.
    worker = threading.Thread(
        target=_run_in_thread,
        name="ansible-runner",
        daemon=True,
        args=(playbook, inventory, extravars, limit, tags, skip_tags, on_event, cancel, outcome),
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


def _run_in_thread(playbook, inventory, extravars, limit, tags, skip_tags, on_event, cancel, outcome) -> None:
    try:
        outcome["run"] = _run(playbook, inventory, extravars, limit, tags, skip_tags, on_event, cancel)
    except BaseException as exc:  # handed to the caller's thread
        outcome["error"] = exc


def _run(playbook, inventory, extravars, limit, tags, skip_tags, on_event, cancel) -> FleetRun:
    run = FleetRun(rc=-1, status="unstarted")
    collector = _Collector(run, on_event)
    private = Path(tempfile.mkdtemp(prefix="spark-agent-runner-"))  # 0700
    try:
        write_extravars(private, {"spark_agent_dir": str(AGENT), **(extravars or {})})
        runner = ansible_runner.run(
            private_data_dir=str(private),
            playbook=str(playbook_path(playbook)),
            inventory=str(Path(inventory).resolve()),
            limit=limit,
            tags=tags,
            skip_tags=skip_tags,
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
    if run.host_keys:  # every command refuses such a host the same way: bad input, said before anything else
        raise UserError("; ".join(run.host_keys.values()))
    return run
