#!/usr/bin/python
"""Ansible module: gather a Spark's host facts. Thin: the logic is agent/hostside/facts.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_facts
short_description: GPU, driver, CUDA, memory, disk, docker/nvidia runtime and python facts of a host
description:
  - Returns the [facts] table of a cell (see docs/results-tree.md) as C(spark_facts), also set as a host fact.
  - Each note (no nvidia-smi, an unknown GPU architecture so no rules apply, ...) becomes a warning.
  - The logic is agent/hostside/facts.py (standard library only).
options:
  simulate_gpu:
    description: Report this arch's chip from gpus.toml (e.g. gb10) instead of querying a GPU; sets simulated=true.
    type: str
    default: ""
  model_cache:
    description: Model cache whose free disk is reported; a leading C(~) is expanded.
    type: str
    default: ~/.cache/huggingface
    aliases: [cache_dir]
  simulate_link:
    description:
      - With O(simulate_gpu), the host's address; its simulated ConnectX-7 reports this address as its link
        (marked simulated), so multi-node rules run on loopback test hosts.
    type: str
    default: ""
  gpu_rules_toml:
    description:
      - Text of agent/rules/gpus.toml, to classify the GPU on the host, e.g.
        C("{{ lookup('file', spark_agent_dir ~ '/rules/gpus.toml') }}").
      - Without it arch/sm stay empty and the controller classifies the GPU.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: It only reads, so check mode gathers the facts as usual.
"""

EXAMPLES = r"""
- name: Gather host facts
  spark_facts:
    gpu_rules_toml: "{{ lookup('file', spark_agent_dir ~ '/rules/gpus.toml') }}"
  register: host_facts

- name: Pretend to be a GB10 (the simulated Spark)
  spark_facts:
    simulate_gpu: gb10
"""

RETURN = r"""
spark_facts:
  description:
    - The host facts; the same dict is set as the host fact C(spark_facts).
    - The stable ones (GPU, compute capability, driver, CUDA, memory, python, runtimes) make C(fingerprint).
  type: dict
  returned: success
  contains:
    gpu_name:
      description: e.g. NVIDIA GB10, or empty without a GPU.
      type: str
    compute_capability:
      description: e.g. 12.1.
      type: str
    arch:
      description: Architecture from gpus.toml (e.g. gb10), empty if unknown.
      type: str
    sm:
      description: e.g. sm_121a.
      type: str
    driver:
      description: NVIDIA driver version.
      type: str
    cuda:
      description: CUDA version the driver supports.
      type: str
    mem_total_gib:
      description: Memory of the host (unified on a GB10).
      type: float
    disk_free_gib:
      description: Free disk under O(model_cache).
      type: float
    python:
      description: The host's python version.
      type: str
    docker:
      description: The docker CLI reaches a daemon.
      type: bool
    nvidia_runtime:
      description: Docker lists the nvidia runtime.
      type: bool
    simulated:
      description: The facts come from O(simulate_gpu).
      type: bool
    fingerprint:
      description: Hash of the stable facts.
      type: str
    interfaces:
      description: Network interfaces (name, state, IPv4 addresses, speed_mbps, RDMA devices, simulated).
      type: list
      elements: dict
    notes:
      description: What could not be found, and what that means.
      type: list
      elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import facts

ARGUMENT_SPEC = {
    "simulate_gpu": {"type": "str", "default": ""},
    "model_cache": {"type": "str", "default": facts.DEFAULT_CACHE_DIR, "aliases": ["cache_dir"]},
    "gpu_rules_toml": {"type": "str", "default": ""},
    "simulate_link": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    rules = facts.parse_gpu_rules(text=params["gpu_rules_toml"]) if params["gpu_rules_toml"] else {}
    try:
        gathered = facts.gather(
            simulate_gpu=params["simulate_gpu"] or None,
            cache_dir=params["model_cache"] or facts.DEFAULT_CACHE_DIR,
            gpu_rules=rules,
            simulate_link=params["simulate_link"],
        )
    except ValueError as exc:  # an arch to simulate that gpus.toml does not know
        module.fail_json(msg=f"{exc} (inventory variable spark_simulate_gpu)")
    for note in gathered["notes"]:
        module.warn(note)
    module.exit_json(changed=False, spark_facts=gathered, ansible_facts={"spark_facts": gathered})


if __name__ == "__main__":
    main()
