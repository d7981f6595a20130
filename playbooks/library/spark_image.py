#!/usr/bin/python
"""Ansible module: the vLLM image on a Spark, by digest. Thin: the logic is agent/hostside/docker.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_image
short_description: Pull a container image by digest (idempotent), or resolve a tag to its digest
description:
  - C(present) makes sure C(name@sha256:<64 hex>) is in the host's image store, pulling it only when missing.
  - C(resolved) pulls C(name:tag) on the host and returns the C(name@sha256:...) it resolves to there
    (multi-arch manifests included), for C(spark-agent pin).
  - With I(mirror), C(present) pulls the same digest from that registry instead of the image's own (the fleet's
    link instead of the office's), and C(mirrored) makes the mirror serve it (run once, on one host), pushing it
    there unless the mirror already has it or proxies it. The digest is checked either way.
  - The logic is agent/hostside/docker.py (standard library only; it runs the docker CLI).
options:
  ref:
    description: "state=present: name@sha256:<64 hex> (a tag is refused). state=resolved: name:tag."
    type: str
    required: true
  state:
    description: "present: pull unless `docker image inspect` already has it. resolved: pull the tag, return `pinned`."
    type: str
    choices: [present, resolved, mirrored]
    default: present
  mirror:
    description: A registry (host:port) that serves the image by digest to the fleet, e.g. one Spark's registry.
    type: str
  docker_host:
    description: DOCKER_HOST for the docker CLI (default, the host's own environment).
    type: str
attributes:
  check_mode:
    support: full
    details:
      - C(present) reports whether it would pull, and pulls nothing.
      - C(resolved) pulls nothing; it answers from the local image store, and is skipped when the tag is not there.
"""

EXAMPLES = r"""
- name: The cell's image, by digest
  spark_image:
    ref: nvcr.io/nvidia/vllm@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    state: present

- name: Resolve the tag
  spark_image:
    ref: nvcr.io/nvidia/vllm:25.11-py3
    state: resolved
  register: resolved
"""

RETURN = r"""
ref:
  description: The reference asked for.
  type: str
  returned: always
digest:
  description: "sha256:<64 hex> (state=present)."
  type: str
  returned: success and state=present
local_ref:
  description: The local reference that carries the digest (the pinned name, or the mirror's name for it).
  type: str
  returned: success and state=present, not in check mode
pinned:
  description: "name@sha256:<64 hex> the tag resolves to (state=resolved)."
  type: str
  returned: success and state=resolved
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import docker as sdocker
from ansible.module_utils.spark_hostside.errors import HostError

ARGUMENT_SPEC = {
    "ref": {"type": "str", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "resolved", "mirrored"]},
    "mirror": {"type": "str", "default": ""},
    "docker_host": {"type": "str", "default": None},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    ref, env = module.params["ref"], sdocker.docker_env_for(host=module.params["docker_host"])
    try:
        if module.params["state"] == "resolved":
            if module.check_mode and not sdocker.image_present(ref=ref, docker_env=env):
                module.exit_json(changed=False, skipped=True, ref=ref, msg=f"check mode: {ref} would be pulled")
            # A lookup: the pulled tag is only a by-product, so it does not count as a change.
            pinned = sdocker.resolve_tag(tag=ref, docker_env=env, pull=not module.check_mode)
            module.exit_json(changed=False, ref=ref, pinned=pinned)
        mirror = module.params["mirror"] or ""
        if module.params["state"] == "mirrored":
            if module.check_mode:
                module.exit_json(changed=False, ref=ref, msg="check mode: the mirror is not seeded")
            seeded = sdocker.seed_mirror(ref=ref, mirror=mirror, docker_env=env)
            module.exit_json(changed=seeded, ref=ref, mirror_ref=sdocker.mirror_ref(ref=ref, mirror=mirror))
        changed = sdocker.pull(ref=ref, docker_env=env, dry_run=module.check_mode, mirror=mirror)
        local = "" if module.check_mode else sdocker.local_ref(ref=ref, docker_env=env)
        module.exit_json(changed=changed, ref=ref, digest=sdocker.parse_ref(ref=ref)[1], local_ref=local)
    except (ValueError, HostError) as exc:  # ValueError: not a reference by digest
        module.fail_json(msg=str(exc), ref=ref)


if __name__ == "__main__":
    main()
