"""playbooks/collect.yml on its own (no teardown before it): the host packs the run folder without a shell and the
controller fetches the archive."""

from __future__ import annotations

import tarfile

import pytest

from agent.running import playbooks as fleet

pytestmark = pytest.mark.integration


def test_collect_alone_packs_and_fetches_the_run_folder(sim_inventory, ssh_fleet, tmp_path):
    host = ssh_fleet.hosts[0]
    run_dir = host.workdir / "runs" / "c0ffee000001"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "server.log").write_text("INFO Application startup complete.\n")
    (run_dir / "launch.txt").write_text("vllm serve m\n")
    extravars = {"cell": {"id": "c0ffee000001"}, "sweep": "alone", "spark_results_dir": str(tmp_path)}

    run = fleet.run_playbook("collect", sim_inventory, extravars, limit=host.name)

    assert run.ok, run.failures
    fetched = tmp_path / ".incoming" / "alone" / host.name / "c0ffee000001.tar"
    with tarfile.open(fetched) as tar:
        assert sorted(tar.getnames()) == ["launch.txt", "server.log"]
        member = tar.extractfile("server.log")
        assert member is not None and b"startup complete" in member.read()
