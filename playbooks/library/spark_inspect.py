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
options:
  path:
    description: Checkpoint folder (or one .safetensors file) on the host.
    type: str
    required: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import safetensors


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "str", "required": True}}, supports_check_mode=True)
    try:
        summary = safetensors.inspect_checkpoint(module.params["path"])
    except (safetensors.CheckpointError, OSError) as exc:
        module.fail_json(msg=str(exc))
    for warning in summary["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, summary=summary)


if __name__ == "__main__":
    main()
