#!/usr/bin/python
"""Ansible module: inspect a checkpoint on the host from its safetensors headers. Thin: the logic is
agent/hostside/safetensors.py, so tens of GB of weights never cross the network, only a summary."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_inspect
short_description: Summarise a checkpoint folder from its safetensors headers, config.json and quant config
description:
  - Reads only the 8-byte length and JSON header of every shard; returns the summary of
    agent/hostside/safetensors.inspect_checkpoint as C(summary).
  - The logic is agent/hostside/safetensors.py (standard library only).
options:
  path:
    description: Checkpoint folder (or one .safetensors file) on the host.
    type: str
    required: true
attributes:
  check_mode:
    support: full
    details: It only reads, so check mode inspects as usual.
"""

EXAMPLES = r"""
- name: Inspect checkpoint
  spark_inspect:
    path: /models/Qwen3.6-35B-A3B-NVFP4
  register: inspected
"""

RETURN = r"""
summary:
  description: What the headers say (agent/hostside/safetensors.inspect_checkpoint).
  type: dict
  returned: success
  contains:
    name:
      description: The checkpoint's folder name.
      type: str
    shards:
      description: Number of .safetensors files.
      type: int
    tensors:
      description: Number of tensors.
      type: int
    total_bytes:
      description: Bytes of tensor data.
      type: int
    total_gib:
      description: The same in GiB.
      type: float
    bytes_per_token:
      description: Weight bytes read per decoded token (active experts only).
      type: int
    dtypes:
      description: Tensors and bytes per dtype.
      type: dict
    quant_configs:
      description: The quantization configs found.
      type: list
      elements: dict
    mtp:
      description: Multi-token-prediction weights, C({present, quantized}).
      type: dict
    warnings:
      description: Anything odd; each also becomes a task warning.
      type: list
      elements: str
memory:
  description: What the model needs in memory (weights per format, KV bytes per token, layers); null when
    config.json is missing or says too little. Also returned when the summary fails for a folder without weights.
  returned: always
  type: dict
memory_error:
  description: Why memory is null ("" otherwise).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import memplan, safetensors

ARGUMENT_SPEC = {"path": {"type": "str", "required": True}}


def _memory(path, summary):
    """The memory plan's inputs (memplan.model_memory), or None with why."""
    try:
        return memplan.model_memory(path, summary), ""
    except (safetensors.CheckpointError, OSError) as exc:
        return None, str(exc)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    path = module.params["path"]
    try:
        summary = safetensors.inspect_checkpoint(path=path)
    except (safetensors.CheckpointError, OSError) as exc:
        memory, why = _memory(path, None)  # a folder of config.json alone (--load-format dummy) still has a plan
        module.fail_json(msg=str(exc), memory=memory, memory_error=why)
    for warning in summary["warnings"]:
        module.warn(warning)
    memory, why = _memory(path, summary)
    module.exit_json(changed=False, summary=summary, memory=memory, memory_error=why)


if __name__ == "__main__":
    main()
