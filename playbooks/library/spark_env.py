#!/usr/bin/python
"""Ansible module: every cell's env file on a host, in one call. Thin: the logic is agent/hostside/serving.py
(write_env_files), next to read_env_file, which the server start reads them back with."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_env
short_description: Write the env file of each of spark-agent's cells on a host
description:
  - Writes C(workdir)/env/<cell id>.env for every cell given (the rules' environment plus the spec's overrides),
    owner-only (0600) and whole or not at all; a file whose text is already the same is left alone.
  - One module run for all of a host's cells, where a loop of copies cost one run per cell.
  - The values may carry tokens, so the cells are not logged and never returned.
options:
  workdir:
    description: spark-agent's work folder on the host.
    type: str
    required: true
  cells:
    description: The cells, C({id, env}) each (C(id) is 12 hex; C(env) maps variable names to values).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: In check mode it reports which files would change and writes nothing.
"""

EXAMPLES = r"""
- name: Write the env file of every cell
  spark_env:
    workdir: /var/lib/spark-agent
    cells:
      - id: 0123456789ab
        env: {VLLM_USE_FLASHINFER_MOE_FP4: "1"}
  no_log: true
"""

RETURN = r"""
written:
  description: The ids of the cells whose env file was written (or would be, in check mode).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import serving
from ansible.module_utils.spark_hostside.errors import HostError

ARGUMENT_SPEC = {
    "workdir": {"type": "str", "required": True},
    "cells": {"type": "list", "elements": "dict", "required": True, "no_log": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        written = serving.write_env_files(module.params["workdir"], module.params["cells"], check=module.check_mode)
    except (HostError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
