"""The docker runtime end to end, over real SSH: provision pulls the pinned simulator image by digest from a local
registry (idempotent), the cell runs in a labelled container whose digest is verified, docker logs become
server.log, and the container is gone afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from agent.judging import correctness
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.running import tasks
from agent.running.follow import run_sweep
from agent.running.sweep import gather_facts, plan_fleet, provision

from .sshd_hosts import inventory_for
from .test_sweep import write_spec

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture()
def docker_inventory(ssh_fleet, dockerd, tmp_path) -> Path:
    inv = inventory_for(ssh_fleet, dockerd.sweep_vars())
    path = tmp_path / "docker-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def docker(dockerd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], env=dockerd.env, capture_output=True, text=True, timeout=60)


def test_docker_sweep_pulls_by_digest_runs_verifies_and_cleans_up(tmp_path, docker_inventory, dockerd, sim_image):
    docker(dockerd, "image", "rm", "-f", sim_image)  # provision must pull it
    spec_path = write_spec(tmp_path, "in-docker", backends=("marlin",))
    spec_path.write_text(spec_path.read_text().replace("nvcr.io/nvidia/vllm@sha256:" + "ab" * 32, sim_image))
    spec = load_spec(spec_path)
    hosts = load_inventory(docker_inventory, limit="spark-a")

    facts = gather_facts(docker_inventory, hosts)
    cells = plan_fleet(spec, hosts, facts)
    first = provision(docker_inventory, spec, hosts, cells)
    assert first.results["spark-a"][tasks.IMAGE.name]["changed"] is True
    second = provision(docker_inventory, spec, hosts, cells)
    assert second.changed == {}, "a second provision must report no changes"

    outcome = run_sweep(spec, docker_inventory, hosts, tmp_path / "results")
    assert len(outcome.hosts["spark-a"].done) == 1, outcome
    (cell,) = correctness.judged_cells(tmp_path / "results" / "in-docker")
    assert cell["verdict"] == "valid", (cell["verdict_reasons"], cell.get("failure_evidence"))
    assert cell["attestation"]["moe_backend"] == "marlin"
    assert "Application startup complete." in (Path(cell["dir"]) / "server.log").read_text()
    launch = (Path(cell["dir"]) / "launch.txt").read_text()
    assert launch.startswith("docker run") and "--gpus all" in launch and sim_image in launch
    assert all(r["ok"] for r in cell["runs"]) and len(cell["runs"]) == 2
    ps = docker(dockerd, "ps", "-a", "--filter", "label=spark-agent=1", "--format", "{{.Names}}")
    assert ps.stdout.strip() == "", "the cell's container must be removed after the cell"


def test_missing_digest_fails_provision_with_the_pull_error(tmp_path, docker_inventory, dockerd, sim_image):
    name = sim_image.split("@")[0]
    missing = f"{name}@sha256:{'0' * 64}"
    spec_path = write_spec(tmp_path, "missing", backends=("marlin",))
    spec_path.write_text(spec_path.read_text().replace("nvcr.io/nvidia/vllm@sha256:" + "ab" * 32, missing))
    spec = load_spec(spec_path)
    hosts = load_inventory(docker_inventory, limit="spark-a")
    from agent.errors import UserError

    with pytest.raises(UserError) as exc:
        run_sweep(spec, docker_inventory, hosts, tmp_path / "results")
    assert (
        "host spark-a" in exc.value.message and "manifest unknown" in exc.value.message.lower()
    ) or "not found" in exc.value.message.lower()
