#!/usr/bin/python
"""Ansible module: gather a Spark's host facts. Thin: the logic is agent/hostside/facts.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_facts
short_description: GPU, driver, CUDA, memory, disk, docker/nvidia runtime and python facts of a host
description:
  - Returns the [facts] table of a cell (see ARCHITECTURE.md) as C(spark_facts), also set as a host fact.
  - Each note (no nvidia-smi, unknown GPU architecture: no rules apply, ...) becomes a warning.
options:
  simulate_gpu:
    description: Report this arch's chip from gpus.toml (e.g. gb10) instead of querying a GPU; sets simulated=true.
    type: str
    default: ""
  model_cache:
    description: Model cache whose free disk is reported.
    type: str
    default: ~/.cache/huggingface
    aliases: [cache_dir]
  gpu_rules_toml:
    description:
      - Text of agent/rules/gpus.toml, to classify the GPU on the host, e.g.
        C("{{ lookup('file', playbook_dir ~ '/../agent/rules/gpus.toml') }}").
      - Without it arch/sm stay empty and the controller classifies the GPU.
    type: str
    default: ""
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "simulate_gpu": {"type": "str", "default": ""},
            "model_cache": {"type": "str", "default": facts.DEFAULT_CACHE_DIR, "aliases": ["cache_dir"]},
            "gpu_rules_toml": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    rules = facts.parse_gpu_rules(params["gpu_rules_toml"]) if params["gpu_rules_toml"] else {}
    try:
        gathered = facts.gather(params["simulate_gpu"] or None, params["model_cache"] or facts.DEFAULT_CACHE_DIR, rules)
    except ValueError as exc:
        module.fail_json(msg=f"{exc} (inventory variable spark_simulate_gpu)")
    for note in gathered["notes"]:
        module.warn(note)
    module.exit_json(changed=False, spark_facts=gathered, ansible_facts={"spark_facts": gathered})


if __name__ == "__main__":
    main()
