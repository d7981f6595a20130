"""Session fixtures that start real parts: OpenSSH test hosts (more fixture modules are imported below)."""

from __future__ import annotations

import pytest

from .sshd_hosts import start_fleet, stop_fleet

pytest_plugins = ["tests.fixtures_docker", "tests.engine.fixtures"]


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory):
    """Two real sshd test hosts on 127.0.0.11 and 127.0.0.12, with an inventory file (fleet.inventory)."""
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"), count=2)
    try:
        yield fleet
    finally:
        stop_fleet(fleet)
