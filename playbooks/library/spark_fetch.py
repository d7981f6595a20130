#!/usr/bin/python
"""Ansible module: copy a checkpoint folder from a fleet peer that serves it (spark_share), verified.
Thin: the logic is agent/hostside/share.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_fetch
short_description: Copy a checkpoint folder from a peer over the fleet's link, checked against its manifest
description:
  - Downloads every file the manifest lists into a hidden folder beside I(dest), checks each file's size and each
    safetensors header's sha256 against I(manifest), and only then renames the folder to I(dest).
  - Idempotent, if I(dest) already holds the same files, sizes and header hashes, nothing is copied.
  - An existing I(dest) that is something else is never overwritten.
  - The logic is agent/hostside/share.py (standard library only).
options:
  address:
    description:
      - The serving peer's address on the fleet link, as the controller knows it (its inventory), never as the peer
        reports it. The copy is fetched over http from this address only; redirects are not followed.
    type: str
    required: true
  port:
    description: The port the peer serves on (RETURN C(port) of M(spark_share)).
    type: int
    required: true
  token:
    description: The share's token. Never logged.
    type: str
    required: true
  dest:
    description: Where the checkpoint goes on this host.
    type: str
    required: true
  manifest:
    description: The manifest the source returned (RETURN C(manifest) of M(spark_share)).
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reports whether a copy is needed, copies nothing.
"""

EXAMPLES = r"""
- name: Copy the checkpoint from the host that has it
  spark_fetch:
    address: "{{ hostvars[source].spark_fleet_address | default(hostvars[source].ansible_host) }}"
    port: "{{ hostvars[source].shared.port }}"
    token: "{{ share_token }}"
    dest: /models/Qwen3.6-35B-A3B-NVFP4
    manifest: "{{ hostvars[source].shared.manifest }}"
"""

RETURN = r"""
bytes:
  description: Bytes copied (0 when the folder was already there).
  type: int
  returned: success
headers_sha256:
  description: The checkpoint's identity, a hash over its safetensors header hashes, as verified here.
  type: str
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import share

ARGUMENT_SPEC = {
    "address": {"type": "str", "required": True},
    "port": {"type": "int", "required": True},
    "token": {"type": "str", "required": True, "no_log": True},
    "dest": {"type": "str", "required": True},
    "manifest": {"type": "dict", "required": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        expected = share.check_manifest(p["manifest"])
        if module.check_mode:
            module.exit_json(changed=not share.matches(p["dest"], expected), bytes=0)
        copied = share.fetch(p["address"], p["port"], p["token"], p["dest"], expected)
    except (share.ShareError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=copied > 0, bytes=copied, headers_sha256=expected["headers_sha256"])


if __name__ == "__main__":
    main()
