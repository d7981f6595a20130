#!/usr/bin/python
"""Ansible module: start, report or stop the runner of a detached sweep on a host. Thin: the logic is
agent/hostside/runner.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_runner
short_description: Start, report or stop the host-side runner of a detached spark-agent sweep
description:
  - C(started) forks the runner of sweep O(sweep), which runs the cells of C(<workdir>/sweeps/<sweep>/plan.json)
    back to back (serve, bench, teardown, seal), with no controller connected. It holds the host for the whole
    sweep, so anyone else who wants to start a server here is refused with the holder named. Idempotent, a runner
    of this sweep that already runs is left alone (it re-reads the plan before each cell).
  - C(status) reports the runner's progress (done, running now, sealed) and whether it is alive. Changes nothing.
  - C(stopped) stops the runner and its current server (that cell is not sealed).
  - The logic is agent/hostside/runner.py (standard library only).
options:
  state:
    description: What to do.
    type: str
    choices: [started, status, stopped]
    default: status
  workdir:
    description: The host's spark-agent folder (state, env files, runs, sweeps); a leading C(~) is expanded.
    type: str
    required: true
  sweep:
    description: The sweep's name (a plain folder name).
    type: str
    required: true
attributes:
  check_mode:
    support: full
    details:
      - C(status) runs as usual. C(started) reports whether it would start a runner, C(stopped) whether it would
        stop one; neither touches anything.
author: spark-agent
"""

EXAMPLES = r"""
- name: Start the runner of the sweep
  spark_runner:
    state: started
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4

- name: Runner progress
  spark_runner:
    state: status
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4
  register: progress
"""

RETURN = r"""
started:
  description: A runner was started by this task (state=started).
  type: bool
  returned: state=started
pid:
  description: The runner's process id on the host (state=started).
  type: int
  returned: state=started
progress:
  description:
    - The runner's progress.json (C(state) running, finished or stopped; C(current), the cell running now, and
      C(current_since); C(done), cell id to outcome; C(updated)), with C(alive) (the runner process runs) and
      C(sealed) (done cells whose packed run folder waits to be collected). Empty when no runner ever ran this sweep.
  type: dict
  returned: state=status
holder:
  description: Who holds the host with a runner (any sweep); empty when no runner runs.
  type: dict
  returned: always
stopped:
  description: A runner was stopped (state=stopped).
  type: bool
  returned: state=stopped
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import (  # noqa: F401 (loaded before the fork: the runner imports nothing late)
    docker,
    loadgen,
    logparse,
    metrics,
    runner,
    serving,
    supervise,
)
from ansible.module_utils.spark_hostside.errors import HostError

ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "status", "choices": ["started", "status", "stopped"]},
    "workdir": {"type": "str", "required": True},
    "sweep": {"type": "str", "required": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    workdir, sweep = p["workdir"], p["sweep"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", sweep):
        module.fail_json(msg=f"sweep {sweep!r}: give a plain name (letters, digits, . _ -)")
    holder = supervise.runner_holder(workdir)
    if p["state"] == "status":
        module.exit_json(changed=False, progress=runner.read_progress(workdir, sweep), holder=holder)
    if p["state"] == "stopped":
        ours = holder.get("sweep") == sweep
        if module.check_mode or not ours:
            module.exit_json(changed=ours, stopped=False, holder=holder)
        module.exit_json(changed=True, stopped=runner.stop(workdir, sweep), holder=holder)
    if module.check_mode:
        module.exit_json(changed=holder.get("sweep") != sweep, started=False, pid=0, holder=holder)
    try:
        result = runner.start(workdir, sweep)
    except supervise.HostBusy as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, busy=True, host_error=True)
    except HostError as exc:
        module.fail_json(msg=str(exc), host_error=True)
    module.exit_json(changed=result["started"], holder=supervise.runner_holder(workdir), **result)


if __name__ == "__main__":
    main()
