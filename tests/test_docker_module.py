"""The spark_image Ansible module through real playbook runs: idempotent pull by digest, errors verbatim.

One inventory, one host per situation, so two playbook runs cover them all (ansible-playbook is slow to start).
"""

from __future__ import annotations

import subprocess

import pytest

from agent.hostside import docker as sdocker
from agent.running import playbooks as fleet

pytest_plugins = ["tests.fixtures_docker"]  # dockerd, sim_image: one of each per session

pytestmark = [pytest.mark.integration, pytest.mark.docker]

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  environment: "{{ task_env | default({}) }}"
  tasks:
    - name: image
      spark_image:
        ref: "{{ image_ref }}"
        docker_host: "{{ spark_docker_host | default(omit) }}"
"""


def test_provision_pulls_once_and_fails_clearly(dockerd, sim_image, tmp_path):
    name, digest = sdocker.parse_ref(sim_image)
    missing = f"{name}@sha256:" + "0" * 64
    inventory = dockerd.inventory(
        tmp_path / "inventory.yml",
        {
            "spark-ok": {"image_ref": sim_image},
            "spark-missing": {"image_ref": missing},
            "spark-tag": {"image_ref": f"{name}:test"},
            "spark-nodocker": {"image_ref": sim_image, "task_env": {"PATH": "/nonexistent"}},
        },
    )
    playbook = tmp_path / "provision.yml"
    playbook.write_text(PLAYBOOK)
    image_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", sim_image],
        env=dockerd.env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if image_id:
        subprocess.run(["docker", "image", "rm", "--force", image_id], env=dockerd.env, check=True, capture_output=True)
    direct = subprocess.run(["docker", "pull", "--quiet", missing], env=dockerd.env, capture_output=True, text=True)

    first = fleet.run_playbook(str(playbook), inventory, limit="spark-ok,spark-missing,spark-tag,spark-nodocker")
    assert first.changed == {"spark-ok": 1}
    assert first.results["spark-ok"]["image"]["digest"] == digest
    assert sdocker.image_present(sim_image, dockerd.env)
    assert set(first.failures) == {"spark-missing", "spark-tag", "spark-nodocker"}
    assert first.results["spark-missing"]["image"]["msg"] == direct.stderr.strip()  # the pull error, verbatim
    assert "not pinned by digest" in first.results["spark-tag"]["image"]["msg"]
    assert first.results["spark-nodocker"]["image"]["msg"] == sdocker.NOT_INSTALLED

    second = fleet.run_playbook(str(playbook), inventory, limit="spark-ok")
    assert second.ok and second.changed == {}
    assert second.results["spark-ok"]["image"]["changed"] is False
