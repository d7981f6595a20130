#!/usr/bin/python
"""Ansible module: start, stop, seal or inspect the one model server of a cell. Thin: the logic is
agent/hostside/serving.py and agent/hostside/supervise.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_server
short_description: Start, stop, seal or report the one model server of a cell on a host
description:
  - C(started) takes the host lock, starts the cell's server under a forked supervisor (so it outlives the task),
    and waits until C(/health) answers, or until the server log shows it died (classified at once).
  - C(stopped) stops the server this controller started (idempotent), and with O(seal) packs the cell's run
    folder into C(runs/<cell_id>.tar) for collection.
  - C(sealed) only packs the run folder (collect without teardown).
  - C(status) reports whether a server runs here and who holds the host.
  - The logic is agent/hostside/serving.py and agent/hostside/supervise.py (standard library only).
options:
  state:
    description: What to do.
    type: str
    choices: [started, stopped, sealed, status]
    default: started
  workdir:
    description: The host's spark-agent folder (state, env files, runs); a leading C(~) is expanded.
    type: str
    required: true
  cell_id:
    description: The cell. C(stopped) with a cell id stops only that cell's server.
    type: str
    default: ""
  runtime:
    description: C(process) runs O(argv) directly; C(docker) runs it in O(image).
    type: str
    choices: [process, docker]
    default: process
  argv:
    description: The server command line (C(vllm serve MODEL ...)); with docker, what follows the image.
    type: list
    elements: str
    default: []
  env_file:
    description: The cell's environment file on the host (KEY=VALUE lines, written by provision).
    type: str
    default: ""
  extra_env:
    description:
      - Host plumbing added to the server's environment (PYTHONPATH, ...), not part of the cell.
      - Its values are never logged (it may carry tokens).
    type: dict
    default: {}
  image:
    description: The image by digest (C(name@sha256:<64 hex>)); docker runtime only.
    type: str
    default: ""
  url:
    description: Where the server answers, C(http://HOST:PORT); its port must be free before the start.
    type: str
    default: ""
  health_timeout:
    description: Seconds to wait for C(/health); a server that dies is noticed at once anyway.
    type: float
    default: 1800.0
  scope:
    description: C(machine) allows one model per machine; C(workdir) one per work dir (test hosts sharing a machine).
    type: str
    choices: [machine, workdir]
    default: machine
  evict:
    description: Stop a foreign vLLM server that occupies the machine instead of refusing to start.
    type: bool
    default: false
  holder:
    description: The controller's identity, recorded with the lock and shown to anyone refused.
    type: dict
    default: {}
  seal:
    description: With C(stopped) and a O(cell_id), pack the cell's run folder once the server is down.
    type: bool
    default: false
  probe:
    description:
      - With C(stopped), O(seal) and O(url), first send the correctness probe (agent/hostside/probe.py, greedy) to the
        cell's server if it still runs, as O(model), and write C(probe.json) into the run folder.
    type: bool
    default: false
  probe_long:
    description:
      - With O(probe), the long-decode check after the probe (agent/hostside/longdecode.py) with keys C(tokens),
        C(prompts), C(batch) (the cell's highest concurrency) and C(budget_s); empty or C(tokens=0) is off.
    type: dict
    default: {}
  model:
    description:
      - The cell's checkpoint as the server's command line names it. With the docker runtime, a folder given by
        absolute path is mounted read-only at the same path.
    type: str
    default: ""
  model_cache:
    description:
      - The host's Hugging Face cache folder. With the docker runtime it is mounted at /root/.cache/huggingface,
        so a hub checkpoint is downloaded once per host rather than once per container. Empty mounts none.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details:
      - C(status) runs as usual. C(started) and C(sealed) report a change and do nothing.
      - C(stopped) reports whether it would stop a running server of ours, and stops nothing.
"""

EXAMPLES = r"""
- name: Serve
  spark_server:
    state: started
    workdir: ~/.spark-agent
    cell_id: 3f9a1c0e7b2d
    runtime: docker
    image: nvcr.io/nvidia/vllm@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    argv: [vllm, serve, /models/Qwen3.6-35B-A3B-NVFP4, --port, "8000"]
    env_file: ~/.spark-agent/env/3f9a1c0e7b2d.env
    url: http://127.0.0.1:8000
  register: served

- name: Stop the server and seal the run folder
  spark_server:
    state: stopped
    workdir: ~/.spark-agent
    cell_id: 3f9a1c0e7b2d
    seal: true

- name: Server status
  spark_server:
    state: status
    workdir: ~/.spark-agent
"""

RETURN = r"""
ready:
  description: The server answered C(/health) (state=started).
  type: bool
  returned: success and state=started
failure:
  description: Why the server died before it was ready, C({class, evidence, root_cause}), or empty.
  type: dict
  returned: success and state=started
startup_s:
  description: Seconds from start to healthy (or to death).
  type: float
  returned: success and state=started
attestation:
  description: What the server log says really loaded (agent/hostside/logparse facts).
  type: dict
  returned: success and state=started
run_dir:
  description: The cell's run folder on the host.
  type: str
  returned: success and state=started
host_error:
  description: The host cannot take this cell (busy, port taken, no docker, wrong digest); not a result of the cell.
  type: bool
  returned: failure
busy:
  description: Another controller or a foreign server holds the host; C(holder) says who.
  type: bool
  returned: failure
holder:
  description: Who holds the host (state=status, or a refused start).
  type: dict
  returned: when held
stopped:
  description: A server was stopped (state=stopped).
  type: bool
  returned: state=stopped
ended:
  description:
    - How the cell's server had ended on its own before the stop (C(how), C(at), C(exit_code)); empty if it had not.
      Then C(died.json) is written into the cell's run folder, unless the load driver already wrote one.
  type: dict
  returned: state=stopped
skipped:
  description: Why a running server was left alone (another cell's, another controller's).
  type: str
  returned: when a server was left alone
probed:
  description: The correctness probe ran against the server before the stop (state=stopped).
  type: bool
  returned: state=stopped
cell_id:
  description: The cell of the server found (state=stopped).
  type: str
  returned: state=stopped
sealed:
  description: Path of the packed run folder on the host.
  type: str
  returned: when sealed
running:
  description: A spark-agent server runs on this host (state=status).
  type: bool
  returned: state=status
server:
  description: The server record (pids, cell, runtime, container) (state=status).
  type: dict
  returned: state=status
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import docker, logparse, longdecode, serving, supervise  # noqa: F401 (loaded for the fork)

ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "started", "choices": ["started", "stopped", "sealed", "status"]},
    "workdir": {"type": "str", "required": True},
    "cell_id": {"type": "str", "default": ""},
    "runtime": {"type": "str", "default": "process", "choices": ["process", "docker"]},
    "argv": {"type": "list", "elements": "str", "default": []},
    "env_file": {"type": "str", "default": ""},
    "extra_env": {"type": "dict", "default": {}, "no_log": True},
    "image": {"type": "str", "default": ""},
    "url": {"type": "str", "default": ""},
    "health_timeout": {"type": "float", "default": 1800.0},
    "scope": {"type": "str", "default": "machine", "choices": ["machine", "workdir"]},
    "evict": {"type": "bool", "default": False},
    "holder": {"type": "dict", "default": {}},
    "model": {"type": "str", "default": ""},
    "model_cache": {"type": "str", "default": ""},
    "seal": {"type": "bool", "default": False},
    "probe": {"type": "bool", "default": False},
    "probe_long": {"type": "dict", "default": {}},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    workdir, cell_id, holder = p["workdir"], p["cell_id"], p["holder"] or None
    if p["state"] == "status":
        module.exit_json(changed=False, **supervise.status(workdir=workdir))
    if p["state"] == "stopped":
        if module.check_mode:
            module.exit_json(changed=supervise.would_stop(workdir=workdir, cell_id=cell_id, holder=holder))
        result = serving.teardown_cell(
            workdir=workdir,
            cell_id=cell_id,
            holder=holder,
            seal_it=p["seal"],
            probe_url=p["url"] if p["probe"] else "",
            probe_model=p["model"],
            probe_long=longdecode.options(p["probe_long"]),
        )
        module.exit_json(changed=result["stopped"], **result)
    if module.check_mode:
        module.exit_json(changed=True)
    if p["state"] == "sealed":  # teardown did not seal (it failed): pack what there is, no shell involved
        module.exit_json(changed=True, sealed=serving.seal(workdir=workdir, cell_id=cell_id))
    try:
        result = serving.serve_cell(
            workdir=workdir,
            cell_id=cell_id,
            runtime=p["runtime"],
            argv=p["argv"],
            env_file=p["env_file"],
            extra_env=p["extra_env"],
            image=p["image"],
            url=p["url"],
            health_timeout=p["health_timeout"],
            scope=p["scope"],
            evict=p["evict"],
            holder=p["holder"],
            model=p["model"],
            model_cache=p["model_cache"],
        )
    # the host cannot take this cell (busy, port taken, no docker, wrong digest): not a result of the cell
    except supervise.HostBusy as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, busy=True, host_error=True)
    except serving.ServeError as exc:
        module.fail_json(msg=str(exc), host_error=True)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
