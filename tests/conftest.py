"""Session fixtures that start real parts: OpenSSH test hosts (more fixture modules are imported below)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .sshd_hosts import REPO, inventory_for, start_fleet, stop_fleet

pytest_plugins = ["tests.fixtures_docker", "tests.engine.fixtures"]


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory):
    """Two real sshd test hosts on 127.0.0.11 and 127.0.0.12, with an inventory file (fleet.inventory)."""
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"), count=2)
    try:
        yield fleet
    finally:
        stop_fleet(fleet)


# The SSH test hosts as simulated GB10 Sparks: process runtime, the simulator as the engine.
SIM_HOST_VARS = {
    "spark_runtime": "process",
    "spark_simulate_gpu": "gb10",
    "spark_host_scope": "workdir",
    "spark_port": 8000,
    "spark_health_timeout": 60,
    "spark_serve_cmd": ["/usr/bin/python3", "-m", "agent.sim", "serve"],
    "spark_serve_env": {"PYTHONPATH": str(REPO)},
}


@pytest.fixture(scope="session")
def sim_inventory(ssh_fleet, tmp_path_factory) -> Path:
    """The SSH test hosts as simulated GB10 Sparks: process runtime, the simulator as the engine."""
    inv = inventory_for(ssh_fleet, SIM_HOST_VARS)
    path = tmp_path_factory.mktemp("inv") / "sim-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return path
