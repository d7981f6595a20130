"""Host facts through real Ansible: the spark_facts module on local hosts, and `spark-agent env -i` gathering them."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from agent.hostside import facts
from agent.running import playbooks as fleet
from tests.test_envrules import SPEC, env_json

pytestmark = pytest.mark.integration


# --- the Ansible module, run by real Ansible ----------------------------------------------------

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: facts
      spark_facts:
        simulate_gpu: "{{ spark_simulate_gpu }}"
        model_cache: "{{ cache }}"
        gpu_rules_toml: "{{ lookup('file', rules) }}"
"""


@pytest.fixture(scope="module")
def module_run(tmp_path_factory) -> fleet.FleetRun:
    """One real Ansible run of spark_facts over three local hosts: a simulated GB10, a chip the rules
    cannot classify, and a chip that is not in gpus.toml at all."""
    tmp = tmp_path_factory.mktemp("spark_facts")
    (tmp / "facts.yml").write_text(PLAYBOOK)
    mystery = tmp / "mystery-gpus.toml"
    mystery.write_text('[mystery]\nname = "NVIDIA Mystery"\ncompute_capability = "7.5"\n')
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "cache": str(tmp)}
    hosts = {
        "sim-gb10": dict(local, spark_simulate_gpu="gb10", rules=str(facts.DEFAULT_GPU_RULES)),
        "sim-mystery": dict(local, spark_simulate_gpu="mystery", rules=str(mystery)),
        "sim-gb99": dict(local, spark_simulate_gpu="gb99", rules=str(facts.DEFAULT_GPU_RULES)),
    }
    (tmp / "inventory.yml").write_text(json.dumps({"all": {"hosts": hosts}}))
    return fleet.run_playbook(str(tmp / "facts.yml"), tmp / "inventory.yml")


def test_ansible_module_reports_a_simulated_gb10(module_run):
    res = module_run.results["sim-gb10"]["facts"]
    assert res["spark_facts"]["arch"] == "gb10" and res["spark_facts"]["simulated"] is True
    assert res["ansible_facts"]["spark_facts"]["fingerprint"] == res["spark_facts"]["fingerprint"]


def test_ansible_module_warns_on_an_unknown_architecture(module_run):
    res = module_run.results["sim-mystery"]["facts"]
    assert res["spark_facts"]["gpu_name"] == "NVIDIA Mystery" and res["spark_facts"]["arch"] == ""
    assert any("no rules apply" in warning for warning in res.get("warnings", []))


def test_ansible_module_fails_on_an_unknown_simulated_chip(module_run):
    assert "spark_simulate_gpu" in module_run.failures["sim-gb99"]
    assert set(module_run.failures) == {"sim-gb99"}


# --- `spark-agent env` with an inventory ------------------------------------------------------


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


def test_env_command_with_an_inventory_gathers_facts_through_ansible(spec_file, tmp_path, capsys):
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "spark_runtime": "process",
        "spark_model_cache": str(tmp_path),
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"here": local, "sim": dict(local, spark_simulate_gpu="gb10")}}}))
    out = env_json(capsys, str(spec_file), "-i", str(inventory))
    by_host = {host: [cell for cell in out["cells"] if cell["host"] == host] for host in ("here", "sim")}
    assert len(by_host["here"]) == len(by_host["sim"]) == 4
    sim_rows = {row["name"]: row for row in by_host["sim"][0]["provenance"]}
    assert sim_rows["CUTE_DSL_ARCH"]["action"] == "override"  # the GB10 rule applied
    assert sim_rows["FLASHINFER_DISABLE_VERSION_CHECK"]["rule"] == "gb10-flashinfer-version-check"
    if shutil.which("nvidia-smi") is None:
        here = by_host["here"][0]
        assert any("no GPU rules apply" in note for note in here["notes"])
        assert "FLASHINFER_DISABLE_VERSION_CHECK" not in here["env"]
        assert {row["name"]: row["action"] for row in here["provenance"]}["CUTE_DSL_ARCH"] == "set"  # spec only
