"""The Ansible boundary, read from the YAML: every task the controller reads by name is where it expects it, no
task runs a shell, and every task that carries the server's environment keeps it out of the logs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.paths import PLAYBOOKS
from agent.running import tasks

from .module_specs import argument_spec

REPO = Path(__file__).resolve().parent.parent  # the checkout these tests run from

pytestmark = pytest.mark.unit

# Keys of a task that are not its module (the module is the one key left over).
TASK_KEYWORDS = {
    "name", "register", "when", "loop", "loop_control", "tags", "failed_when", "changed_when", "no_log",
    "environment", "vars", "block", "always", "rescue", "become", "become_user", "delegate_to", "ignore_errors",
    "until", "retries", "delay", "notify", "args", "check_mode", "run_once", "throttle", "timeout", "async", "poll",
}  # fmt: skip
IMPORTS = {"ansible.builtin.import_tasks", "ansible.builtin.include_tasks", "import_tasks", "include_tasks"}
# Variables that hold the server's environment (may carry tokens).
ENV_VARIABLES = ("item.env", "cell.env", "spark_serve_env", "host_env")


def module_of(task: dict[str, Any]) -> str:
    [module] = [key for key in task if key not in TASK_KEYWORDS]
    return module


def flatten(task_list: list[dict[str, Any]], base: Path, inherited: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every task of a list, blocks and imported task files expanded; each gets `_tags`: its own and inherited."""
    out = []
    for task in task_list or []:
        tags = inherited + tuple(task.get("tags", []))
        if "block" in task:
            for part in ("block", "rescue", "always"):
                out += flatten(task.get(part, []), base, tags)
            continue
        module = module_of(task)
        if module in IMPORTS:
            out += flatten(yaml.safe_load((base / task[module]).read_text()), base, tags)
            continue
        out.append({**task, "_tags": tags, "_module": module})
    return out


def playbook_tasks(name: str) -> list[dict[str, Any]]:
    path = PLAYBOOKS / f"{name}.yml"
    return [t for play in yaml.safe_load(path.read_text()) for t in flatten(play.get("tasks", []), path.parent)]


def all_task_files() -> list[Path]:
    """Every playbook and task file (role defaults are variables, not tasks)."""
    patterns = ("*.yml", "tasks/*.yml", "roles/*/tasks/*.yml")
    return sorted(p for pattern in patterns for p in PLAYBOOKS.glob(pattern))


@pytest.mark.parametrize("ref", tasks.ALL, ids=lambda r: r.name)
def test_every_task_the_controller_reads_exists_once_in_its_playbook(ref: tasks.TaskRef) -> None:
    found = [t for t in playbook_tasks(ref.playbook) if t.get("name") == ref.name]
    assert len(found) == 1, f"playbooks/{ref.playbook}.yml must run exactly one task named {ref.name!r}"
    [task] = found
    assert task["_module"] == ref.module
    assert ("loop" in task) == ref.loop, "a looped task reports in FleetRun.items, a plain one in FleetRun.results"
    if ref.tag:
        assert ref.tag in task["_tags"], f"the controller runs only --tags {ref.tag}"


def test_task_names_are_unique_within_each_playbook() -> None:
    # FleetRun keys results by name: two tasks of one name would overwrite each other.
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        names = [t.get("name") for t in playbook_tasks(path.stem)]
        assert len(names) == len(set(names)), f"{path.name}: duplicate task names {names}"


def test_every_playbook_the_controller_runs_exists() -> None:
    calls = set()
    for source in (REPO / "agent").rglob("*.py"):
        calls |= set(re.findall(r'run_playbook\(\s*"([a-z_]+)"', source.read_text()))
    calls |= {ref.playbook for ref in tasks.ALL}
    assert {"cell", "provision", "teardown"} <= calls  # the scan itself works
    missing = sorted(c for c in calls if not (PLAYBOOKS / f"{c}.yml").is_file())
    assert missing == []


def test_no_shell_anywhere_in_the_playbooks() -> None:
    shells = {"ansible.builtin.shell", "shell", "ansible.builtin.raw", "raw", "ansible.builtin.script", "script"}
    for path in all_task_files():
        for task in flatten(_tasks_of(path), path.parent):
            assert task["_module"] not in shells, f"{path}: {task.get('name')} runs a shell"
            if task["_module"] in ("ansible.builtin.command", "command"):
                args = task[task["_module"]]
                assert isinstance(args, dict) and "argv" in args, f"{path}: {task.get('name')}: command takes argv"


def test_tasks_that_carry_the_server_environment_never_log_it() -> None:
    for path in all_task_files():
        for task in flatten(_tasks_of(path), path.parent):
            args = task[task["_module"]]
            if not isinstance(args, dict):
                continue
            for option, value in args.items():
                if not any(var in str(value) for var in ENV_VARIABLES):
                    continue
                hidden = task.get("no_log") is True or (
                    task["_module"].startswith("spark_") and argument_spec(task["_module"])[option].get("no_log")
                )
                assert hidden, f"{path}: task {task.get('name')!r} passes {option} without no_log"


def test_the_env_file_is_readable_by_its_owner_only() -> None:
    [task] = [t for t in playbook_tasks("provision") if "spark_env" in t]  # 0600: tests/test_env_files.py
    assert task["no_log"] is True


def _tasks_of(path: Path) -> list[dict[str, Any]]:
    """The tasks of a playbook (all its plays) or of a task file."""
    data = yaml.safe_load(path.read_text()) or []
    plays = ("hosts", "import_playbook", "ansible.builtin.import_playbook")
    if data and all(any(key in entry for key in plays) for entry in data):
        return [t for play in data for t in play.get("tasks", [])]
    return data
