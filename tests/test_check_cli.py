"""`spark-agent check` over real SSH test hosts: facts per host, and the status probe (playbooks/status.yml) that
names whoever holds a host."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent.cli import main

pytestmark = pytest.mark.integration


def test_check_shows_every_host_and_a_clean_fleet_exits_0(sim_inventory, ssh_fleet, capsys):
    assert main(["check", "-i", str(sim_inventory)]) == 0
    out = capsys.readouterr().out
    assert all(h.name in out for h in ssh_fleet.hosts) and "NVIDIA GB10" in out and "busy" not in out


def test_check_names_the_holder_of_a_busy_host(sim_inventory, ssh_fleet, capsys):
    host = ssh_fleet.hosts[0]
    state = host.workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    # A live process stands for the supervisor of another controller's server (it only has to be alive).
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (state / "server.json").write_text(json.dumps({"supervisor_pid": holder.pid, "cell_id": "abc123"}))
        (state / "holder.json").write_text(json.dumps({"user": "alice", "controller_host": "lab-7", "since": "then"}))
        assert main(["check", "-i", str(sim_inventory), "--limit", host.name]) == 1
        out = capsys.readouterr().out
        assert "busy" in out and "alice@lab-7" in out
    finally:
        holder.kill()
        holder.wait()
        for name in ("server.json", "holder.json"):
            (state / name).unlink(missing_ok=True)
