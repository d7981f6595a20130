#!/usr/bin/python
"""Ansible module: serve a checkpoint folder read-only to the other hosts of the fleet, or stop serving it.
Thin: the logic is agent/hostside/share.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_share
short_description: Serve a checkpoint folder to fleet peers over HTTP, behind a one-time token
description:
  - With C(state=started), forks a small HTTP server (standard library) bound to I(bind) that serves only the files
    of the folder's manifest, to requests that carry I(token). It stops on C(state=stopped), or by itself after
    I(idle_timeout) seconds without a request.
  - Returns the folder's manifest (file sizes and safetensors header hashes), which the fetching hosts check
    their copy against (M(spark_fetch)).
  - The logic is agent/hostside/share.py (standard library only).
options:
  folder:
    description: The checkpoint folder on this host.
    type: str
    required: true
  bind:
    description: The address to listen on (the host's address on the fleet's link).
    type: str
    default: 127.0.0.1
  port:
    description: The port; 0 picks a free one.
    type: int
    default: 0
  token:
    description: The secret the fetching hosts present. Never logged.
    type: str
    required: true
  idle_timeout:
    description: Seconds without a request after which the server stops by itself.
    type: int
    default: 300
  workdir:
    description: spark-agent's work dir on the host; the server's pid file goes to its state folder.
    type: str
    required: true
  state:
    description: C(started) or C(stopped).
    type: str
    choices: [started, stopped]
    default: started
attributes:
  check_mode:
    support: partial
    details: In check mode nothing is served; C(started) returns the manifest only.
"""

EXAMPLES = r"""
- name: Serve the checkpoint to the other hosts
  spark_share:
    folder: /models/Qwen3.6-35B-A3B-NVFP4
    bind: "{{ ansible_host }}"
    token: "{{ share_token }}"
    workdir: "{{ spark_workdir }}"
  register: shared
  no_log: true
"""

RETURN = r"""
url:
  description: Where the peers fetch from, e.g. http://10.0.0.1:41234 (shown; the peers use their own address for it).
  type: str
  returned: state=started, not in check mode
port:
  description: The port it serves on.
  type: int
  returned: state=started, not in check mode
manifest:
  description: C({files:[{path, size, header_sha256}], total_bytes, headers_sha256}).
  type: dict
  returned: state=started
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import share

ARGUMENT_SPEC = {
    "folder": {"type": "str", "required": True},
    "bind": {"type": "str", "default": "127.0.0.1"},
    "port": {"type": "int", "default": 0},
    "token": {"type": "str", "required": True, "no_log": True},
    "idle_timeout": {"type": "int", "default": 300},
    "workdir": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    state_file = os.path.join(os.path.expanduser(p["workdir"]), "state", "share.json")
    try:
        if p["state"] == "stopped":
            module.exit_json(changed=False if module.check_mode else share.stop(state_file))
        if module.check_mode:
            module.exit_json(changed=True, manifest=share.manifest(p["folder"]))
        share.stop(state_file)  # one share per host at a time: a rerun replaces the last one
        info = share.serve(p["folder"], p["bind"], p["port"], p["token"], p["idle_timeout"], state_file)
    except (share.ShareError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, url=info["url"], port=info["port"], manifest=info["manifest"])


if __name__ == "__main__":
    main()
