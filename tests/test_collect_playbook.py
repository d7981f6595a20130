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


@pytest.mark.attack("collect: a host's huge sealed tar is fetched whole onto the controller's disk")
def test_no_fetched_file_grows_past_the_limit(sim_inventory, ssh_fleet, tmp_path, monkeypatch):
    host = ssh_fleet.hosts[0]
    run_dir = host.workdir / "runs" / "c0ffee000002"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "server.log", "wb") as log:  # what a hostile server writes: far more than any log
        log.truncate(48 * 1024 * 1024)
    limit = 2 * 1024 * 1024
    monkeypatch.setattr(fleet, "MAX_FETCH_BYTES", limit, raising=False)  # the archive limit, scaled down for the test
    extravars = {"cell": {"id": "c0ffee000002"}, "sweep": "huge", "spark_results_dir": str(tmp_path)}

    run = fleet.run_playbook("collect", sim_inventory, extravars, limit=host.name)

    assert not run.ok and host.name in run.failures, run
    fetched = tmp_path / ".incoming" / "huge" / host.name / "c0ffee000002.tar"
    assert not fetched.exists() or fetched.stat().st_size <= limit
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) <= 2 * limit
