#!/usr/bin/python3
"""Ansible module: start, stop or inspect the one model server of a cell (logic: hostside/supervise.py)."""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import docker, logparse, serving, supervise  # noqa: F401 (loaded for the fork)

ARGS = dict(
    state=dict(type="str", default="started", choices=["started", "stopped", "status", "sealed"]),
    workdir=dict(type="str", required=True),
    cell_id=dict(type="str", default=""),
    runtime=dict(type="str", default="process", choices=["process", "docker"]),
    argv=dict(type="list", elements="str", default=[]),
    env_file=dict(type="str", default=""),
    extra_env=dict(type="dict", default={}),
    image=dict(type="str", default=""),
    url=dict(type="str", default=""),
    health_timeout=dict(type="float", default=1800.0),
    scope=dict(type="str", default="machine", choices=["machine", "workdir"]),
    evict=dict(type="bool", default=False),
    holder=dict(type="dict", default={}),
    seal=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=False)
    p = module.params
    if p["state"] == "status":
        module.exit_json(changed=False, **supervise.status(p["workdir"]))
    if p["state"] == "sealed":  # teardown did not seal (it failed): pack what there is, no shell involved
        module.exit_json(changed=True, sealed=serving.seal(p["workdir"], p["cell_id"]))
    if p["state"] == "stopped":
        result = supervise.stop(p["workdir"], cell_id=p["cell_id"], holder=p["holder"] or None)
        if result.get("ended") and p["cell_id"]:  # it died after the load driver last looked: still a death
            died = dict(result["ended"], detected_at=time.time(), window="at teardown")
            serving.record_death(str(serving.run_dir(p["workdir"], p["cell_id"])), died)
        if p["seal"] and p["cell_id"]:  # the log is final now: pack the run folder for collect
            result["sealed"] = serving.seal(p["workdir"], p["cell_id"])
        module.exit_json(changed=result["stopped"], **result)
    try:
        result = serving.serve_cell(p)
    # the host cannot take this cell (busy, port taken, no docker, wrong digest): not a result of the cell
    except supervise.HostBusy as exc:
        module.fail_json(msg=str(exc), holder=exc.holder, busy=True, host_error=True)
    except serving.ServeError as exc:
        module.fail_json(msg=str(exc), host_error=True)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
