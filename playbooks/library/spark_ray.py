#!/usr/bin/python
"""Ansible module: one Ray node of a multi-node cell (start, check the cluster, stop). Thin: agent/hostside/raynode.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_ray
short_description: Start, check or stop this host's Ray node of a multi-node cell
description:
  - C(started) runs C(ray start --block) as the head or a worker, in a session of its own with its own temp dir and
    ports, bound to the node's link address. A worker holds the host lock while it lives (one model per machine).
    A Ray node of ours left by a killed run is stopped first.
  - Every node runs with Ray's token authentication and the cell's O(token), kept in a 0600 file in the node's
    folder for the cell (O(temp_dir)/CELL, mode 0700, Ray's temp dir inside; removed on stop); Ray runs as the
    login user (process runtime) or as O(container_user), never root, in its container (docker runtime).
  - C(checked) (on the head) waits until C(ray status) shows O(nodes) nodes and O(gpus) GPUs, and fails otherwise.
  - C(stopped) ends our Ray node's whole process group (never C(ray stop), which ends every Ray of the user).
  - The logic is agent/hostside/raynode.py (standard library only).
options:
  state:
    description: What to do.
    type: str
    choices: [started, checked, stopped]
    default: started
  workdir:
    description: The host's spark-agent work dir (state/ray.json, runs/CELL/ray-node.log).
    type: str
    required: true
  cell_id:
    description: The cell; with C(stopped), only that cell's node is stopped (empty = any node of ours).
    type: str
    default: ""
  role:
    description: head or worker.
    type: str
    choices: [head, worker]
    default: worker
  ray_cmd:
    description: The C(ray) command on the host.
    type: list
    elements: str
    default: [ray]
  node_address:
    description: This node's address on the cluster link.
    type: str
    default: ""
  head_address:
    description: The head's Ray address, address:port (the head listens on its port).
    type: str
    default: ""
  port_base:
    description: First of the node's own ports (node manager, object manager, agents; workers from +10 to +99).
    type: int
    default: 46400
  temp_dir:
    description:
      - The root of Ray's temp dirs on this node (one folder per cell under it); keep it short, Ray's unix sockets
        live under it. It must belong to the login user, mode 0700 (made so if missing; refused otherwise).
    type: str
    default: /tmp/spark-agent-ray
  num_gpus:
    description: GPUs to declare (a simulated host); 0 lets Ray find them.
    type: int
    default: 0
  resources:
    description: Custom Ray resources of this node (a simulated GB10 declares its own).
    type: dict
    default: {}
  object_store_mb:
    description: Ray's object store size; 0 = Ray's default.
    type: int
    default: 0
  env_file:
    description:
      - The node's environment file (the cell's env and this node's link variables, written by provision, mode
        0600); the Ray node and so every rank on it get it. A file, so no value reaches a log or a command line.
    type: str
    default: ""
  token:
    description: The cell's Ray token (the same on every node; 32 characters at least). Never logged.
    type: str
    default: ""
  holder:
    description: The controller's identity, recorded with the lock.
    type: dict
    default: {}
  drop_page_cache:
    description: Drop the page cache before starting ("drop"), record that a simulated host does not ("simulated"), or not ("").
    type: str
    default: ""
  runtime:
    description:
      - C(process) runs O(ray_cmd) on the host; C(docker) runs it in a container of O(image) (host network and
        IPC, the env file, Ray's temp dir mounted), verifies the container's digest against the pin, and removes
        the container on stop. C(checked) then runs C(ray status) inside the head's container.
    type: str
    choices: [process, docker]
    default: process
  container_user:
    description:
      - With C(runtime=docker), the C(UID:GID) (numbers) the node's container runs as; empty means the login user's.
      - Never root. A root login must name a non-root user here; the module, as root, gives that user the cell's
        folder.
      - The container's HOME and working dir are O(temp_dir)/CELL/home (vLLM's, FlashInfer's, Triton's and Hugging
        Face's caches), and it mounts nothing else from the host. The env file is read by the docker CLI on the
        host, so a Ray task in the container finds no file of it; its values are in the container's environment, as
        vLLM's workers need them.
    type: str
    default: ""
  image:
    description: With C(runtime=docker), the pinned image (name@sha256:<64 hex>) every node runs.
    type: str
    default: ""
  nodes:
    description: With C(checked), the node count the cluster must reach.
    type: int
    default: 1
  gpus:
    description: With C(checked), the GPU count the cluster must reach.
    type: float
    default: 0
  timeout:
    description: Seconds to wait for the node to start, or the cluster to be complete.
    type: float
    default: 60
attributes:
  check_mode:
    support: full
    details: C(started) and C(stopped) change nothing in check mode; C(checked) only reads.
"""

EXAMPLES = r"""
- name: Start the Ray head
  spark_ray:
    state: started
    role: head
    workdir: ~/.spark-agent
    cell_id: 3f9a1c0e7b2d
    node_address: 192.168.100.10
    head_address: 192.168.100.10:6379

- name: Check the cluster before serving
  spark_ray:
    state: checked
    workdir: ~/.spark-agent
    head_address: 192.168.100.10:6379
    nodes: 2
    gpus: 2
"""

RETURN = r"""
pid:
  description: The C(ray start) process (its group is the node).
  type: int
  returned: state=started
page_cache:
  description: kept, dropped, or why not.
  type: str
  returned: state=started
image:
  description: The digest the node's container runs, verified (runtime=docker; empty otherwise).
  type: str
  returned: state=started
nodes:
  description: Alive nodes C(ray status) showed.
  type: int
  returned: state=checked
gpus:
  description: GPUs C(ray status) showed.
  type: float
  returned: state=checked
stopped:
  description: A node of ours was stopped.
  type: bool
  returned: state=stopped
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import docker, raynode, serving, supervise

ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "started", "choices": ["started", "checked", "stopped"]},
    "workdir": {"type": "str", "required": True},
    "cell_id": {"type": "str", "default": ""},
    "role": {"type": "str", "default": "worker", "choices": ["head", "worker"]},
    "ray_cmd": {"type": "list", "elements": "str", "default": ["ray"]},
    "node_address": {"type": "str", "default": ""},
    "head_address": {"type": "str", "default": ""},
    "port_base": {"type": "int", "default": 46400},
    "temp_dir": {"type": "str", "default": "/tmp/spark-agent-ray"},
    "num_gpus": {"type": "int", "default": 0},
    "resources": {"type": "dict", "default": {}},
    "object_store_mb": {"type": "int", "default": 0},
    "env_file": {"type": "str", "default": ""},
    "token": {"type": "str", "default": "", "no_log": True},
    "holder": {"type": "dict", "default": {}},
    "drop_page_cache": {"type": "str", "default": ""},
    "nodes": {"type": "int", "default": 1},
    "gpus": {"type": "float", "default": 0},
    "timeout": {"type": "float", "default": 60},
    "runtime": {"type": "str", "default": "process", "choices": ["process", "docker"]},
    "image": {"type": "str", "default": ""},
    "container_user": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["state"] == "checked":
        ray_cmd = raynode.status_cmd(p["workdir"], p["ray_cmd"])
        seen = raynode.check(ray_cmd, p["head_address"], p["nodes"], p["gpus"], p["timeout"], p["token"])
        if not seen["ok"]:
            module.fail_json(
                msg=f"the Ray cluster has {seen['nodes']} node(s) and {seen['gpus']:g} GPU(s), "
                f"needs {p['nodes']} and {p['gpus']:g}",
                **seen,
            )
        module.exit_json(changed=False, **seen)
    if module.check_mode:
        module.exit_json(changed=p["state"] == "started")
    if p["state"] == "stopped":
        result = raynode.stop(p["workdir"], p["cell_id"])
        module.exit_json(changed=result["stopped"], **result)
    docker_run = p["runtime"] == "docker"
    container = raynode.container_name(p["cell_id"], p["port_base"]) if docker_run else ""
    user: tuple[int, int] | None = None
    prefix: list[str] = []
    try:
        temp = str(raynode.cell_temp_dir(p["temp_dir"], p["cell_id"]))
        token_path = f"{temp}/{raynode.TOKEN_FILE}"
        gpus = p["num_gpus"] == 0
        if docker_run:
            user = raynode.container_user(p["container_user"])
            prefix = raynode.container_argv(
                p["image"], container, p["cell_id"], p["env_file"], temp, gpus, user, token_path
            )
    except ValueError as exc:
        module.fail_json(msg=f"image: {exc}")
    except raynode.RayError as exc:
        module.fail_json(msg=str(exc))
    command = prefix + raynode.argv(
        p["ray_cmd"],
        p["role"],
        p["node_address"],
        p["head_address"],
        p["port_base"],
        str(raynode.ray_temp_dir(p["temp_dir"], p["cell_id"])),
        p["num_gpus"],
        p["resources"],
        p["object_store_mb"],
    )
    try:
        result = raynode.start(
            workdir=p["workdir"],
            cell_id=p["cell_id"],
            role=p["role"],
            command=command,
            env=serving.read_env_file(p["env_file"]),
            holder=p["holder"],
            drop_page_cache=p["drop_page_cache"],
            timeout_s=p["timeout"],
            image=p["image"] if docker_run else "",
            container=container,
            temp_root=p["temp_dir"],
            token=p["token"],
            user=user,
        )
    except supervise.HostBusy as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, busy=True, host_error=True)
    except (raynode.RayError, docker.DockerError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
