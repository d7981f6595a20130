"""Host data never goes back to Ansible as a template: real ansible-playbook on localhost, connection local (no SSH,
no fixed ports)."""

from __future__ import annotations

import pytest
import yaml

from agent.running import hostdata
from agent.running import playbooks as fleet
from tests.hostile import JINJA

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- back to Ansible: never a template

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: show
      ansible.builtin.debug:
        msg: "{{ cell.host_env.SPARK_SIM_HARDWARE }}|{{ cell.argv | join(' ') }}|{{ plain }}"
"""


def test_unsafe_values_reach_ansible_as_plain_text(tmp_path):
    playbook = tmp_path / "show.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "inv.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"hosts": {"local": {"ansible_connection": "local", "ansible_python_interpreter": "python3"}}}}
        )
    )
    cell = {"host_env": {"SPARK_SIM_HARDWARE": JINJA}, "argv": ["vllm", "{{ 6 * 7 }}"]}
    run = fleet.run_playbook(str(playbook), inventory, {"cell": hostdata.unsafe(cell), "plain": "{{ 6 * 7 }}"})
    assert run.ok, run.failures
    # the control: the same text not marked unsafe is templated, so the test can tell the difference
    assert run.results["local"]["show"]["msg"] == f"{JINJA}|vllm {{{{ 6 * 7 }}}}|42"
