"""The image reaches the fleet through a mirror: one host seeds a registry on the fleet's link, the others pull the
pinned digest from it, and every host ends with the same digest (real dockerds, real registries, real Ansible).

Each host has its own dockerd (its own image store), as separate machines do: spark-a shares the session's daemon,
whose registry plays the image's own (slow, far) registry; spark-b has a second daemon, whose registry plays the
mirror on the fleet's link."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from agent.hostside import docker as sdocker
from agent.running import playbooks as fleet
from agent.running import tasks
from tests.fixtures_docker import start_daemon, stop_daemon

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture(scope="module")
def second_host(dockerd):
    daemon = start_daemon()
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
        _forget_mirror_names(dockerd, daemon.registry)


def _forget_mirror_names(daemon, mirror: str) -> None:
    """The session's daemon seeded the mirror (a tag and a digest under the mirror's name): remove those names, so
    the pinned digest is not 'present' there for the tests that come after."""
    listed = subprocess.run(
        ["docker", "image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}"],
        env=daemon.env, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    for line in listed.splitlines():
        repo, tag, digest = (line.split() + ["", "", ""])[:3]
        if repo.startswith(mirror + "/"):
            for ref in ([f"{repo}:{tag}"] if tag != "<none>" else []) + (
                [f"{repo}@{digest}"] if digest != "<none>" else []
            ):
                subprocess.run(["docker", "image", "rm", ref], env=daemon.env, capture_output=True, timeout=60)


def test_hosts_pull_the_digest_from_the_mirror_one_host_seeded(dockerd, sim_image, second_host, tmp_path):
    mirror = second_host.registry
    _, digest = sdocker.parse_ref(sim_image)
    shared = {"spark_runtime": "docker", "spark_image_mirror": mirror}
    inventory = dockerd.inventory(
        tmp_path / "inventory.yml",
        {
            "spark-a": {**shared, "spark_docker_host": dockerd.host, "spark_workdir": str(tmp_path / "a")},
            "spark-b": {**shared, "spark_docker_host": second_host.host, "spark_workdir": str(tmp_path / "b")},
        },
    )
    assert not sdocker.local_ref(sim_image, second_host.env), "spark-b starts without the image"

    run = fleet.run_playbook("provision", inventory, {"image": sim_image})
    assert run.ok, run.failures
    pulled = run.results["spark-b"][tasks.IMAGE.name]
    assert pulled["changed"] and pulled["digest"] == digest
    assert pulled["local_ref"] == sdocker.mirror_ref(sim_image, mirror), "spark-b pulled from the mirror"
    assert sdocker.repo_digests(pulled["local_ref"], second_host.env) == [pulled["local_ref"]], (
        "nothing came from the image's own registry"
    )
    repo = sdocker.mirror_ref(sim_image, mirror).split("/", 1)[1].split("@")[0]
    head = urllib.request.Request(
        f"http://{mirror}/v2/{repo}/manifests/{digest}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(head, timeout=10) as resp:
        assert resp.headers["Docker-Content-Digest"] == digest, "the mirror serves the pinned digest itself"
    digests = {h: run.results[h][tasks.IMAGE.name]["digest"] for h in ("spark-a", "spark-b")}
    assert set(digests.values()) == {digest}

    again = fleet.run_playbook("provision", inventory, {"image": sim_image})
    assert again.ok and not again.results["spark-b"][tasks.IMAGE.name]["changed"], "present by digest: no pull"
    assert not again.results["spark-a"].get(tasks.MIRROR.name, {}).get("changed"), "a seeded mirror is not pushed again"


def test_a_mirror_that_lacks_the_digest_is_one_clear_line(dockerd, sim_image, second_host):
    other = sim_image.split("@")[0] + "@sha256:" + "0" * 64
    with pytest.raises(sdocker.DockerError, match="does not serve"):
        sdocker.pull(other, second_host.env, mirror=second_host.registry)


def test_a_bad_mirror_is_refused_before_any_host(dockerd, tmp_path):
    from agent.errors import UserError
    from agent.planning.inventory import load_inventory

    inventory = dockerd.inventory(tmp_path / "inv.yml", {"spark-a": {"spark_image_mirror": "evil; rm -rf /"}})
    with pytest.raises(UserError, match="spark_image_mirror"):
        load_inventory(inventory)


def test_a_host_with_only_the_mirrors_copy_runs_and_verifies_the_pinned_digest(
    dockerd, sim_image, second_host, tmp_path
):
    """What serving does on such a host: run the local name of the digest, verify against the pinned ref."""
    env, port, name = second_host.env, second_host.free_port(), "spark-agent-cell-mirror0000ab"
    sdocker.pull(sim_image, env, mirror=second_host.registry)
    run_ref = sdocker.local_ref(sim_image, env)
    assert run_ref.startswith(second_host.registry + "/")
    server = sdocker.run_server(
        run_ref, name,
        ["vllm", "serve", "uns-fast", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096"],
        env={"SPARK_SIM_STARTUP_S": "0.2"}, label="mirror0000ab", log_path=str(tmp_path / "server.log"), docker_env=env,
    )  # fmt: skip
    try:
        sdocker.verify_running_digest(name, sim_image, env)  # the pinned ref's digest, whatever the local name
    finally:
        sdocker.stop(name, timeout_s=5, docker_env=env)
        server.log_follower.wait(timeout=10)
        sdocker.remove(name, env)


def test_the_seed_runs_in_the_background_and_its_failure_fails_the_provision(dockerd, sim_image, tmp_path):
    """The seed is started before the other hosts' tasks and waited for before the pull: the module's own error
    (here, a mirror nobody listens on) still fails the run, on the seed's task, naming the mirror."""
    from tests.fixtures_docker import free_port

    mirror = f"127.0.0.1:{free_port()}"  # nothing listens there
    inventory = dockerd.inventory(
        tmp_path / "inventory.yml",
        {"spark-a": {"spark_runtime": "docker", "spark_image_mirror": mirror, "spark_workdir": str(tmp_path / "a")}},
    )
    order: list[str] = []
    run = fleet.run_playbook(
        "provision",
        inventory,
        {"image": sim_image},
        on_event=lambda e: order.append(e.get("event_data", {}).get("task", "")),
    )
    assert not run.ok and tasks.MIRROR.name in run.failures["spark-a"] and mirror in run.failures["spark-a"]
    seen = list(dict.fromkeys(t for t in order if t))
    assert (
        seen.index("Start seeding the image mirror")
        < seen.index("Write the env file of every cell")
        < seen.index(tasks.MIRROR.name)
    ), "the seed overlaps the other tasks, and is waited for after them"
    assert tasks.IMAGE.name not in seen, "no host pulls before the seed is done"
