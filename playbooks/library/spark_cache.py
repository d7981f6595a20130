#!/usr/bin/python
"""Ansible module: the warm-start cache folders of a host (one per image digest). Thin: the logic is
agent/hostside/warmcache.py, the same code that hands a folder to every server of an image."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_cache
short_description: List or remove the per-image warm-start cache folders of spark-agent on a host
description:
  - Every image digest gets one cache folder under C(workdir)/cache/ (torch.compile, Inductor, Triton and FlashInfer
    caches); see agent/hostside/warmcache.py.
  - With C(state=list) it only reads; with C(state=absent) it removes the folders named in C(keys).
options:
  workdir:
    description: spark-agent's work folder on the host.
    type: str
    required: true
  state:
    description: C(list) the caches, or remove the ones in C(keys) (C(absent)).
    type: str
    choices: [list, absent]
    default: list
  keys:
    description: Cache keys (16 hex of an image digest) to remove with C(state=absent).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: In check mode C(state=absent) reports what it would remove and removes nothing.
"""

EXAMPLES = r"""
- name: List the caches
  spark_cache:
    workdir: /var/lib/spark-agent
  register: caches

- name: Remove the caches of images no longer pinned
  spark_cache:
    workdir: /var/lib/spark-agent
    state: absent
    keys: [3c0a6e4b9f1d2c8e]
"""

RETURN = r"""
caches:
  description: The cache folders before any removal, C({key, bytes, files}) each.
  type: list
  elements: dict
  returned: always
removed:
  description: The keys removed (or that would be, in check mode).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import warmcache

ARGUMENT_SPEC = {
    "workdir": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["list", "absent"], "default": "list"},
    "keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        caches = warmcache.list_caches(p["workdir"])
        removed: list[str] = []
        if p["state"] == "absent":
            removed = warmcache.remove(p["workdir"], p["keys"], dry_run=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"cache folders under {p['workdir']}: {exc}")
    module.exit_json(changed=bool(removed), caches=caches, removed=removed)


if __name__ == "__main__":
    main()
