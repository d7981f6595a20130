"""Issue 40, the attacks that need hosts (real sshd test hosts, real Ansible): a sealed archive above the archive
limit is never fetched (its size is read on the host first), and the peers of a multi-node cell."""

from __future__ import annotations

import pytest
import yaml

from agent.paths import PLAYBOOKS
from agent.running import archive
from agent.running import playbooks as fleet

pytestmark = pytest.mark.integration

LIMIT = 2 * 1024 * 1024  # the archive limit, scaled down for the test


def test_the_playbooks_default_limit_is_the_archives():
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / "spark" / "defaults" / "main.yml").read_text())
    assert defaults["spark_max_archive_bytes"] == archive.MAX_ARCHIVE_BYTES


def _sealed(host, cell_id: str, size: int) -> None:
    runs = host.workdir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    with open(runs / f"{cell_id}.tar", "wb") as tar:  # a sparse file: as big as it says, nothing on the disk
        tar.truncate(size)


@pytest.mark.attack("collect: a sealed tar far above the archive limit is fetched (no size bound before the fetch)")
def test_a_sealed_archive_above_the_limit_is_never_fetched(sim_inventory, ssh_fleet, tmp_path):
    host = ssh_fleet.hosts[0]
    _sealed(host, "c0ffee000040", 64 * LIMIT)
    extravars = {
        "cell": {"id": "c0ffee000040"},
        "sweep": "huge",
        "spark_results_dir": str(tmp_path),
        "torn_down": {"sealed": True},  # sealed already: only the fetch runs
        "spark_max_archive_bytes": LIMIT,
    }
    run = fleet.run_playbook("collect", sim_inventory, extravars, limit=host.name)
    assert not run.ok and "archive limit" in run.failures.get(host.name, ""), run.failures
    assert not any(p.is_file() for p in tmp_path.rglob("*"))  # not a byte of it
