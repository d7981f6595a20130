"""`spark-agent check` over real SSH test hosts: facts per host, and the status probe (playbooks/status.yml) that
names whoever holds a host."""

from __future__ import annotations

import pytest

from agent.cli import main

from .sshd_hosts import foreign_holder

pytestmark = pytest.mark.integration


def test_check_shows_every_host_and_a_clean_fleet_exits_0(sim_inventory, ssh_fleet, capsys):
    assert main(["check", "-i", str(sim_inventory)]) == 0
    out = capsys.readouterr().out
    assert all(h.name in out for h in ssh_fleet.hosts) and "NVIDIA GB10" in out and "busy" not in out


def test_check_names_the_holder_of_a_busy_host(sim_inventory, ssh_fleet, capsys):
    with foreign_holder(ssh_fleet.hosts[0].workdir):
        assert main(["check", "-i", str(sim_inventory), "--limit", ssh_fleet.hosts[0].name]) == 1
        out = capsys.readouterr().out
        assert "busy" in out and "alice@lab-7" in out
