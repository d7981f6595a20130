#!/usr/bin/python
"""Ansible module: start, report or stop the runner of a detached sweep on a host. Thin: the logic is
agent/hostside/runner.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_runner
short_description: Start, report or stop the host-side runner of a detached spark-agent sweep
description:
  - C(started) forks the runner of sweep O(sweep), which runs the cells of C(<workdir>/sweeps/<sweep>/plan.json)
    back to back (serve, bench, teardown, seal), with no controller connected. With O(plan), it first writes that
    file (owner-only), with O(serve_env) in it. It holds the host for the whole
    sweep, so anyone else who wants to start a server here is refused with the holder named. Idempotent, a runner
    of this sweep that already runs is left alone (it re-reads the plan before each cell).
  - C(status) reports the runner's progress (done, running now, sealed) and whether it is alive. Changes nothing.
    With O(wait_s), it first waits on the host until the progress differs from O(seen) (the C(token) of an earlier
    look), so that one look returns the moment a cell starts or ends instead of the controller asking repeatedly.
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
  plan:
    description:
      - C(started) only. The host's share as the controller hands it out (C(sweep), C(holder), C(handout),
        C(cells), C(host)), written to the plan file before the runner starts. A live runner re-reads it before
        each cell, so a plan with more cells hands them to it.
    type: dict
  serve_env:
    description: C(started) with O(plan). The server's plumbing environment, kept in the plan file only (never
      logged; it may hold a token).
    type: dict
    default: {}
  wait_s:
    description:
      - C(status) only. Wait up to this many seconds (at most 60) for the progress to change from O(seen). It
        returns at once when O(seen) is empty, when the runner is not alive, or when the progress already differs.
    type: float
    default: 0
  seen:
    description: C(status) only. The C(token) an earlier look returned; empty for none.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details:
      - C(status) runs as usual. C(started) reports whether it would start a runner, C(stopped) whether it would
        stop one; neither touches anything.
author: spark-agent
"""

EXAMPLES = r"""
- name: Start the runner of the sweep (its plan file is there already)
  spark_runner:
    state: started
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4

- name: Hand the host its plan and start the runner
  spark_runner:
    state: started
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4
    plan: "{{ plans[inventory_hostname] }}"
    serve_env: "{{ spark_serve_env }}"

- name: Runner progress
  spark_runner:
    state: status
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4
  register: progress

- name: Runner progress, once it differs from what the last look saw (or after 10 s)
  spark_runner:
    state: status
    workdir: ~/.spark-agent
    sweep: gb10-nvfp4
    wait_s: 10
    seen: "{{ progress.token }}"
"""

RETURN = r"""
planned:
  description: The plan file was written (it was missing or different; state=started with plan).
  type: bool
  returned: state=started
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
      C(current_since); C(stopped), the cell it was on when stopped; C(done), cell id to outcome; C(updated)), with
      C(alive) (the runner process runs) and C(sealed) (done cells whose packed run folder waits to be collected).
      Empty when no runner ever ran this sweep.
  type: dict
  returned: state=status
token:
  description: A short digest of what this look saw of the progress; give it as O(seen) to wait for a change.
  type: str
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
    "plan": {"type": "dict"},
    "serve_env": {"type": "dict", "default": {}, "no_log": True},
    "wait_s": {"type": "float", "default": 0.0},
    "seen": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    workdir, sweep = p["workdir"], p["sweep"]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", sweep):
        module.fail_json(msg=f"sweep {sweep!r}: give a plain name (letters, digits, . _ -)")
    if not 0 <= p["wait_s"] <= runner.MAX_WAIT_S:
        module.fail_json(msg=f"wait_s {p['wait_s']}: give 0 to {runner.MAX_WAIT_S:.0f} seconds")
    if p["state"] == "status":
        progress = runner.await_progress(workdir, sweep, p["seen"], p["wait_s"])
        token = runner.progress_token(progress)
        module.exit_json(changed=False, progress=progress, token=token, holder=supervise.runner_holder(workdir))
    holder = supervise.runner_holder(workdir)
    if p["state"] == "stopped":
        ours = holder.get("sweep") == sweep
        if module.check_mode or not ours:
            module.exit_json(changed=ours, stopped=False, holder=holder)
        module.exit_json(changed=True, stopped=runner.stop(workdir, sweep), holder=holder)
    try:
        planned = p["plan"] is not None and runner.write_plan(
            workdir, sweep, p["plan"], p["serve_env"], check=module.check_mode
        )
        if module.check_mode:
            module.exit_json(
                changed=planned or holder.get("sweep") != sweep, planned=planned, started=False, pid=0, holder=holder
            )
        result = runner.start(workdir, sweep)
    except supervise.HostBusy as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, busy=True, host_error=True)
    except HostError as exc:
        module.fail_json(msg=str(exc), host_error=True)
    module.exit_json(
        changed=planned or result["started"], planned=planned, holder=supervise.runner_holder(workdir), **result
    )


if __name__ == "__main__":
    main()
