#!/usr/bin/python3
"""Ansible module: drive load at one concurrency level against the local server (logic: hostside/loadgen.py)."""

import functools
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import loadgen, metrics, serving, supervise  # noqa: F401

ARGS = dict(
    url=dict(type="str", required=True),
    model=dict(type="str", required=True),
    level=dict(type="int", required=True),
    duration=dict(type="float", required=True),
    warmup=dict(type="int", default=1),
    repeats=dict(type="int", default=3),
    prompt_len=dict(type="int", default=1024),
    output_len=dict(type="int", default=256),
    profile=dict(type="str", default="uniform"),
    seed=dict(type="int", default=0),
    out_dir=dict(type="str", required=True),
    workdir=dict(type="str", default=""),  # with cell_id: watch the server spark_server started for this cell
    cell_id=dict(type="str", default=""),
)


def main():
    module = AnsibleModule(argument_spec=ARGS)
    p = module.params
    p["out_dir"] = os.path.expanduser(p["out_dir"])  # spark_workdir may start with ~ (no shell to expand it)
    os.makedirs(p["out_dir"], exist_ok=True)

    def save(result):  # each window's file exists as soon as the window is over
        loadgen.write_json_atomic(
            os.path.join(p["out_dir"], loadgen.result_filename(p["level"], result["repeat"])), result
        )

    # A server that dies ends the bench at once: no window of this or any later level runs against a dead port.
    gone = functools.partial(supervise.gone, p["workdir"], p["cell_id"]) if p["workdir"] and p["cell_id"] else None
    watch = loadgen.EngineWatch(p["url"], gone=gone)
    started = time.monotonic()
    runs = loadgen.run_levels(
        p["url"],
        p["model"],
        [p["level"]],
        duration_s=p["duration"],
        warmup_s=p["warmup"] * p["duration"],
        repeats=p["repeats"],
        prompt_len=p["prompt_len"],
        output_len=p["output_len"],
        profile=p["profile"],
        seed=p["seed"],
        on_result=save,
        watch=watch,
    )
    if watch.died:
        serving.record_death(p["out_dir"], watch.died)
    summary = [
        {
            "repeat": r.get("repeat"),
            "ok": r.get("ok"),
            "output_throughput": r.get("output_throughput"),
            "error": r.get("error", ""),
        }
        for r in runs
    ]
    module.exit_json(
        changed=True,
        level=p["level"],
        runs=summary,
        engine_died=bool(watch.died),
        died=watch.died,
        elapsed_s=round(time.monotonic() - started, 3),
    )


if __name__ == "__main__":
    main()
