#!/usr/bin/python
"""Ansible module: drive load at one concurrency level against the local server. Thin: the logic is
agent/hostside/loadgen.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_bench
short_description: Drive closed-loop streaming load at one concurrency level against the cell's server
description:
  - Runs O(warmup) warmup windows, then O(repeats) measured windows of O(duration) seconds each, at O(level)
    requests in flight, against the OpenAI-compatible server at O(url) (on the host itself, so the network is not
    what gets measured).
  - Each measured window is written to O(out_dir) as C(cNNN-rK.json) as soon as it is over; warmups are not stored.
  - The logic is agent/hostside/loadgen.py (standard library only).
options:
  url:
    description: Base URL of the server, C(http://HOST:PORT).
    type: str
    required: true
  model:
    description: Model name as the server knows it (the C(model) field of each request).
    type: str
    required: true
  level:
    description: Concurrency, the number of requests kept in flight.
    type: int
    required: true
  duration:
    description: Length of each window, seconds.
    type: float
    required: true
  warmup:
    description: Warmup windows before the measured ones (each O(duration) long).
    type: int
    default: 1
  repeats:
    description: Measured windows.
    type: int
    default: 3
  prompt_len:
    description: Prompt length, tokens (approximately, in common words).
    type: int
    default: 1024
  output_len:
    description: Output tokens asked for per request.
    type: int
    default: 256
  profile:
    description: C(uniform) lengths, or C(mixed) lengths drawn around them.
    type: str
    choices: [uniform, mixed]
    default: uniform
  seed:
    description: Seed of the prompts and lengths (per level, so levels do not share prefixes).
    type: int
    default: 0
  time_scale:
    description:
      - The accelerated clock of a simulated Spark started with the same C(--sim-time-scale) (1 on real hardware).
      - The driver's clock runs this many times faster, so windows, throughputs and latencies are in simulated
        seconds while a window takes 1/time_scale of them in real time.
    type: float
    default: 1.0
  out_dir:
    description: Folder on the host for the window files; a leading C(~) is expanded.
    type: path
    required: true
  workdir:
    description:
      - With O(cell_id), the spark_server work dir whose supervisor record is watched during every window. A
        server that dies (process gone, or /health refused or erroring) ends the task at once; the windows left are
        skipped and C(died.json) in O(out_dir) says when, how and in which window.
      - Empty, only /health is watched.
    type: str
    default: ""
  cell_id:
    description: The cell whose server is watched (see O(workdir)).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: In check mode no load is driven and nothing is written; the task reports that it would change.
"""

EXAMPLES = r"""
- name: Bench every concurrency level of a cell
  spark_bench:
    url: "http://127.0.0.1:8000"
    model: /models/Qwen3.6-35B-A3B-NVFP4
    level: "{{ item }}"
    duration: 60
    out_dir: "~/.spark-agent/runs/3f9a1c0e7b2d"
  loop: [1, 2, 4, 8]
"""

RETURN = r"""
level:
  description: The concurrency level measured.
  type: int
  returned: always
runs:
  description: One entry per measured window (the full window is the file in O(out_dir)).
  type: list
  elements: dict
  returned: always
  contains:
    repeat:
      description: Window number, 1..repeats.
      type: int
    ok:
      description: False when the window failed; C(error) says why.
      type: bool
    output_throughput:
      description: Output tokens per second over the window.
      type: float
    error:
      description: Why the window failed, or empty.
      type: str
engine_died:
  description: True when the server died during this task (then no later level should run).
  type: bool
  returned: always
died:
  description: When (C(at), C(detected_at), epoch seconds), how, and in which window the server died; empty if not.
  type: dict
  returned: always
elapsed_s:
  description: Wall time of the task, warmups included, seconds.
  type: float
  returned: always
"""

import functools
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import atomic, loadgen, serving, supervise
from ansible.module_utils.spark_hostside.errors import HostError

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "model": {"type": "str", "required": True},
    "level": {"type": "int", "required": True},
    "duration": {"type": "float", "required": True},
    "warmup": {"type": "int", "default": 1},
    "repeats": {"type": "int", "default": 3},
    "prompt_len": {"type": "int", "default": 1024},
    "output_len": {"type": "int", "default": 256},
    "profile": {"type": "str", "default": "uniform", "choices": ["uniform", "mixed"]},
    "seed": {"type": "int", "default": 0},
    "time_scale": {"type": "float", "default": 1.0},
    "out_dir": {"type": "path", "required": True},
    "workdir": {"type": "str", "default": ""},  # with cell_id: watch the server spark_server started for this cell
    "cell_id": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=True, level=p["level"], runs=[], engine_died=False, died={}, elapsed_s=0.0)
    out_dir = p["out_dir"]  # type path: a spark_workdir of ~/... is expanded on the host
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        module.fail_json(msg=f"cannot create {out_dir}: {exc.strerror}", level=p["level"])

    def save(result: dict) -> None:  # each window's file exists as soon as the window is over
        name = loadgen.result_filename(concurrency=p["level"], repeat=result["repeat"])
        atomic.write_json(path=os.path.join(out_dir, name), data=result)

    # A server that dies ends the bench at once: no window of this or any later level runs against a dead port.
    watched = p["workdir"] and p["cell_id"]
    gone = functools.partial(supervise.gone, workdir=p["workdir"], cell_id=p["cell_id"]) if watched else None
    watch = loadgen.EngineWatch(url=p["url"], gone=gone)
    started = time.monotonic()
    try:
        runs = loadgen.run_levels(
            url=p["url"],
            model=p["model"],
            levels=[p["level"]],
            duration_s=p["duration"],
            warmup_s=p["warmup"] * p["duration"],
            repeats=p["repeats"],
            prompt_len=p["prompt_len"],
            output_len=p["output_len"],
            profile=p["profile"],
            seed=p["seed"],
            on_result=save,
            watch=watch,
            clock=loadgen.scaled_clock(p["time_scale"]),
        )
    except (HostError, ValueError, OSError) as exc:  # a bad URL or profile, an unwritable window file
        module.fail_json(msg=str(exc), level=p["level"])
    if watch.died:
        serving.record_death(rdir=p["out_dir"], died=watch.died)
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
