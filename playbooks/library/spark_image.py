#!/usr/bin/python
"""Ansible module: the vLLM image on a Spark, by digest. Logic lives in agent/hostside/docker.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_image
short_description: Pull a container image by digest (idempotent), or resolve a tag to its digest
options:
  ref:
    description: "state=present: name@sha256:<64 hex> (a tag is refused). state=resolved: name:tag."
    type: str
    required: true
  state:
    description: "present: pull unless `docker image inspect` already has it. resolved: pull the tag, return `pinned`."
    type: str
    choices: [present, resolved]
    default: present
  docker_host:
    description: DOCKER_HOST for the docker CLI (default: the host's own environment).
    type: str
"""

RETURN = r"""
ref: {description: the reference asked for, type: str, returned: always}
digest: {description: "sha256:<64 hex> (state=present)", type: str, returned: success}
pinned: {description: "name@sha256:<64 hex> the tag resolves to (state=resolved)", type: str, returned: success}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import docker as sdocker


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ref": {"type": "str", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "resolved"]},
            "docker_host": {"type": "str", "default": None},
        },
        supports_check_mode=True,
    )
    ref, env = module.params["ref"], sdocker.docker_env_for(module.params["docker_host"])
    try:
        if module.params["state"] == "resolved":
            # A lookup: the pulled tag is only a by-product, so it does not count as a change.
            module.exit_json(changed=False, ref=ref, pinned=sdocker.resolve_tag(ref, env))
        changed = sdocker.pull(ref, env, dry_run=module.check_mode)
        module.exit_json(changed=changed, ref=ref, digest=sdocker.parse_ref(ref)[1])
    except (ValueError, sdocker.DockerError) as exc:
        module.fail_json(msg=str(exc), ref=ref)


if __name__ == "__main__":
    main()
