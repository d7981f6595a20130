"""Issue 30, item 3: a detached sweep's record (results/.fleet/<sweep>.json) is checked before `status` or `collect`
hand its inventory to Ansible, which runs an executable inventory. A record that names a program, an inventory that
changed or became a program, a record someone else can write, and a record that is not the record's shape are each
refused in one line (exit 2) before anything runs; an honest record still loads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.running import detach, staterecord
from tests.sshd_hosts import REPO

pytestmark = pytest.mark.integration  # the CLI case would start Ansible if the record were trusted

SWEEP = "held"
INVENTORY = "all:\n  hosts:\n    spark-a:\n      ansible_host: 127.0.0.1\n"


def _state(inventory: Path) -> detach.FleetState:
    return detach.FleetState(
        sweep=SWEEP,
        spec="",
        inventory=str(inventory.resolve()),
        replicas=1,
        started="2026-12-01T00:00:00Z",
        groups={"g": ["spark-a"]},
        assignment={"spark-a": ["0123456789ab"]},
        facts={"spark-a": {}},
        handout="abc123",
    )


@pytest.fixture
def record(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(results root, the record, its inventory): an honest hand-out's record."""
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(INVENTORY)
    root = tmp_path / "results"
    detach.save_state(root, _state(inventory))
    return root, detach.state_path(root, SWEEP), inventory


def _program(path: Path, marker: Path) -> Path:
    """An inventory script: Ansible runs it (--list) and it leaves a marker when it does."""
    path.write_text(f'#!/bin/sh\ntouch {marker}\necho \'{{"all": {{"hosts": ["spark-a"]}}}}\'\n')
    path.chmod(0o755)
    return path


def _edit(path: Path, **fields: object) -> None:
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def test_an_honest_record_loads_and_is_private(record):
    root, path, inventory = record
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state = detach.load_state(root, SWEEP)
    assert state.inventory == str(inventory.resolve()) and state.assignment == {"spark-a": ["0123456789ab"]}
    detach.save_state(root, state)  # saving again keeps the hand-out's hash
    assert detach.load_state(root, SWEEP) == state


@pytest.mark.attack("sweep state: the record names an executable inventory and `status` runs it")
def test_status_refuses_a_record_that_names_a_program_and_runs_nothing(record, tmp_path):
    root, path, _ = record
    marker = tmp_path / "ran"
    _edit(path, inventory=str(_program(tmp_path / "inv.sh", marker)))
    for command in (["status", SWEEP], ["collect", SWEEP]):
        done = subprocess.run(
            [sys.executable, "-m", "agent.cli", *command, "--results", str(root)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "inventory was changed" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not marker.exists()


@pytest.mark.attack("sweep state: the record and its hash both name an executable inventory")
def test_a_record_whose_hash_names_a_program_is_refused(record, tmp_path):
    root, path, _ = record
    script = tmp_path / "inv.sh"
    _program(script, tmp_path / "ran")
    _edit(path, inventory=str(script), **{staterecord.GUARD: {"inventory": str(script), "inventory_sha256": "0" * 64}})
    with pytest.raises(UserError, match="executable inventory file"):
        detach.load_state(root, SWEEP)


@pytest.mark.attack("sweep state: the inventory file becomes a program after hand-out")
def test_an_inventory_that_became_a_program_is_refused(record):
    root, _, inventory = record
    inventory.chmod(0o755)
    with pytest.raises(UserError, match="executable inventory file"):
        detach.load_state(root, SWEEP)


@pytest.mark.attack("sweep state: the inventory is edited after hand-out (other hosts, other vars)")
def test_a_changed_inventory_is_refused(record):
    root, _, inventory = record
    inventory.write_text(INVENTORY.replace("127.0.0.1", "127.0.0.2"))
    with pytest.raises(UserError, match="changed since the sweep was handed out"):
        detach.load_state(root, SWEEP)


@pytest.mark.attack("sweep state: a record others can write, or a link to one")
def test_a_record_others_can_write_is_refused(record, tmp_path):
    root, path, _ = record
    path.chmod(0o666)
    with pytest.raises(UserError, match="only this user"):
        detach.load_state(root, SWEEP)
    path.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        with pytest.raises(UserError, match="belongs to uid 65534"):
            detach.load_state(root, SWEEP)
        os.chown(path, 0, 0)
    elsewhere = tmp_path / "elsewhere.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(UserError, match="not a plain file"):
        detach.load_state(root, SWEEP)


@pytest.mark.attack("sweep state: a record of the wrong shape (types, unknown fields, no hash)")
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"assignment": {"spark-a": "0123456789ab"}}, "field 'assignment'"),
        ({"replicas": "1"}, "field 'replicas'"),
        ({"inventory": ["a"]}, "field 'inventory'"),
        ({"playbook": "evil.yml"}, "unknown field 'playbook'"),
        ({staterecord.GUARD: None}, "no hash of its inventory"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused(record, fields, says):
    root, path, _ = record
    _edit(path, **fields)
    with pytest.raises(UserError, match=says):
        detach.load_state(root, SWEEP)


@pytest.mark.attack("inventory: an executable inventory given to any command is run by Ansible")
def test_an_executable_inventory_is_refused_before_any_host_is_touched(tmp_path):
    from agent.planning.inventory import load_inventory

    marker = tmp_path / "ran"
    with pytest.raises(UserError, match="executable inventory file"):
        load_inventory(_program(tmp_path / "inv.sh", marker))
    assert not marker.exists()
