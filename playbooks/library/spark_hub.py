#!/usr/bin/python
"""Ansible module: download a checkpoint from a Hugging Face hub into this host's hub cache, once.
Thin: the logic is agent/hostside/hub.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_hub
short_description: Download a hub checkpoint into the hub cache layout (the fleet's one download)
description:
  - Asks the hub (I(endpoint)) for the commit and file list of I(repo) at I(revision)
    (C(GET /api/models/{repo}/revision/{revision})), downloads every file (C(GET /{repo}/resolve/{commit}/{file}))
    into a hidden folder and renames it to C(<cache>/models--<org>--<name>/snapshots/<commit>), then writes
    C(refs/<revision>). vLLM given the hub id finds it there.
  - Idempotent, a snapshot already complete is not downloaded again (C(changed=false)).
  - The token is sent only as an Authorization header to the hub's own host, never to a host a redirect names.
  - The logic is agent/hostside/hub.py (standard library only).
options:
  endpoint:
    description: The hub's base URL.
    type: str
    default: https://huggingface.co
  repo:
    description: The hub id, org/name.
    type: str
    required: true
  revision:
    description: A branch, tag or commit.
    type: str
    default: main
  cache:
    description: The hub cache folder (huggingface_hub's HF_HUB_CACHE, by default ~/.cache/huggingface/hub).
    type: str
    required: true
  token:
    description: The hub token ("" for a public repo). Never logged.
    type: str
    default: ""
attributes:
  check_mode:
    support: partial
    details: Asks the hub for the commit and reports whether a download is needed; downloads nothing.
"""

EXAMPLES = r"""
- name: Download the checkpoint once
  spark_hub:
    repo: nvidia/Qwen3.6-35B-A3B-NVFP4
    cache: ~/.cache/huggingface/hub
    token: "{{ spark_hub_token }}"
  register: hub
"""

RETURN = r"""
path:
  description: The snapshot folder (what the other hosts copy).
  type: str
  returned: success
commit:
  description: The commit the revision resolved to.
  type: str
  returned: success
files:
  description: How many files the snapshot has.
  type: int
  returned: success
bytes:
  description: Bytes downloaded now (0 when the snapshot was already there).
  type: int
  returned: success
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import hub

ARGUMENT_SPEC = {
    "endpoint": {"type": "str", "default": "https://huggingface.co"},
    "repo": {"type": "str", "required": True},
    "revision": {"type": "str", "default": "main"},
    "cache": {"type": "str", "required": True},
    "token": {"type": "str", "default": "", "no_log": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        if module.check_mode:
            commit, files = hub.revision_info(p["endpoint"], p["repo"], p["revision"], p["token"])
            path = hub.snapshot_path(p["cache"], p["repo"], commit)
            missing = not all(os.path.isfile(os.path.join(path, f)) for f in files)
            module.exit_json(changed=missing, path=path, commit=commit, files=len(files), bytes=0)
        got = hub.download(p["endpoint"], p["repo"], p["revision"], p["cache"], p["token"])
    except (hub.HubError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=got["downloaded"], path=got["path"], commit=got["commit"], files=got["files"], bytes=got["bytes"]
    )


if __name__ == "__main__":
    main()
