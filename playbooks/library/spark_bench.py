#!/usr/bin/python
"""Ansible module: drive load at one concurrency level against the local server. Thin: the logic is
agent/hostside/loadgen.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_bench
short_description: Drive streaming load (closed loop, or open loop at a request rate) against the cell's server
description:
  - Runs O(warmup) warmup windows, then O(repeats) measured windows of O(duration) seconds each, at O(level)
    requests in flight, against the OpenAI-compatible server at O(url) (on the host itself, so the network is not
    what gets measured).
  - Each measured window is written to O(out_dir) as soon as it is over, named by its load point and repeat
    (C(c008-r1.json) closed loop; C(q2.5-c008-d8192-r1.json) at 2.5 req/s and 8192-token prompts); warmups are
    not stored.
  - One task measures one load point; cell.yml loops the cell's points (rate x context depth x concurrency).
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
  warmup_max:
    description:
      - With O(warmup_tolerance), the most warmup windows (0 = O(warmup)); the load driver warms up until the
        server is steady (no JIT line in its log for a window, the last two warmup windows within the tolerance).
    type: int
    default: 0
  warmup_tolerance:
    description:
      - Largest relative difference of output tok/s between the last two warmup windows that counts as steady;
        0 keeps the fixed O(warmup) (agent/hostside/steady.py).
    type: float
    default: 0.0
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
  request_rate:
    description:
      - Open loop at this many requests per second (arrivals drawn as C(vllm bench serve --request-rate)); O(level)
        then caps the requests in flight (0 = no cap). 0 = closed loop at O(level).
    type: float
    default: 0
  burstiness:
    description: Gamma shape of the open-loop arrival gaps; 1 is a Poisson process, below 1 burstier.
    type: float
    default: 1
  dataset:
    description: Where prompts come from.
    type: str
    choices: [random, sharegpt, prefix]
    default: random
  dataset_path:
    description: With O(dataset=sharegpt), a ShareGPT-format JSON file on the host; a leading C(~) is expanded.
    type: path
    default: ""
  range_ratio:
    description: With O(dataset=random), lengths drawn within +- this share of O(prompt_len) and O(output_len).
    type: float
    default: 0
  prefix_len:
    description: With O(dataset=prefix), tokens of the prefix each group of prompts shares.
    type: int
    default: 0
  prefix_group_size:
    description: With O(dataset=prefix), prompts per shared prefix.
    type: int
    default: 1
  context_depth:
    description: Every prompt this many tokens (the context-depth axis); 0 = O(prompt_len).
    type: int
    default: 0
  exact_lengths:
    description: Count prompt tokens with the server's own C(/tokenize) so prompts are exactly as long as asked.
    type: bool
    default: false
  reset_prefix_cache:
    description:
      - Empty the server's prefix cache (C(POST /reset_prefix_cache)) before every window. vLLM serves it only
        with C(VLLM_SERVER_DEV_MODE=1); each window records what happened (reset, unavailable, failed, kept).
    type: bool
    default: false
  goodput:
    description: SLOs as C(vllm bench serve --goodput) takes them, e.g. C(ttft:500), milliseconds.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description:
      - The C(nvidia-smi) command the telemetry sampler runs (agent/hostside/telemetry.py), as a list; a simulated
        Spark names agent/sim/nvidia_smi.py here. Not found, the windows are measured with "no GPU telemetry".
    type: list
    elements: str
    default: [nvidia-smi]
  telemetry_interval:
    description: Seconds between GPU samples (> 0).
    type: float
    default: 1.0
  throttle_threshold:
    description: Percent of a window with a power or thermal throttle reason active above which it is flagged.
    type: float
    default: 5.0
  telemetry_required:
    description: Fail the task, before any load, when the host has no GPU telemetry.
    type: bool
    default: false
  cooldown_s:
    description: Idle seconds before this level's warmup (the spec gives it to a cell's first level).
    type: float
    default: 0.0
  cool_to_c:
    description: Then wait until the GPU reads at most this temperature, Celsius (0 = do not wait).
    type: float
    default: 0.0
  cool_timeout_s:
    description: Stop waiting for O(cool_to_c) after this many seconds (the window records that it gave up).
    type: float
    default: 600.0
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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spark_hostside import serving
from ansible.module_utils.spark_hostside.errors import HostError

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "model": {"type": "str", "required": True},
    "level": {"type": "int", "required": True},
    "duration": {"type": "float", "required": True},
    "warmup": {"type": "int", "default": 1},
    "warmup_max": {"type": "int", "default": 0},
    "warmup_tolerance": {"type": "float", "default": 0.0},
    "repeats": {"type": "int", "default": 3},
    "prompt_len": {"type": "int", "default": 1024},
    "output_len": {"type": "int", "default": 256},
    "profile": {"type": "str", "default": "uniform", "choices": ["uniform", "mixed"]},
    "seed": {"type": "int", "default": 0},
    "time_scale": {"type": "float", "default": 1.0},
    "out_dir": {"type": "path", "required": True},
    "workdir": {"type": "str", "default": ""},  # with cell_id: watch the server spark_server started for this cell
    "cell_id": {"type": "str", "default": ""},
    "request_rate": {"type": "float", "default": 0.0},
    "burstiness": {"type": "float", "default": 1.0},
    "dataset": {"type": "str", "default": "random", "choices": ["random", "sharegpt", "prefix"]},
    "dataset_path": {"type": "path", "default": ""},
    "range_ratio": {"type": "float", "default": 0.0},
    "prefix_len": {"type": "int", "default": 0},
    "prefix_group_size": {"type": "int", "default": 1},
    "context_depth": {"type": "int", "default": 0},
    "exact_lengths": {"type": "bool", "default": False},
    "reset_prefix_cache": {"type": "bool", "default": False},
    "goodput": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "list", "elements": "str", "default": ["nvidia-smi"]},
    "telemetry_interval": {"type": "float", "default": 1.0},
    "throttle_threshold": {"type": "float", "default": 5.0},
    "telemetry_required": {"type": "bool", "default": False},
    "cooldown_s": {"type": "float", "default": 0.0},
    "cool_to_c": {"type": "float", "default": 0.0},
    "cool_timeout_s": {"type": "float", "default": 600.0},
}
SHAPE_OPTIONS = (
    "burstiness",
    "dataset",
    "dataset_path",
    "range_ratio",
    "prefix_len",
    "prefix_group_size",
    "context_depth",
    "exact_lengths",
    "reset_prefix_cache",
    "goodput",
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=True, level=p["level"], runs=[], engine_died=False, died={}, elapsed_s=0.0)
    try:
        result = serving.bench_level(
            url=p["url"],
            model=p["model"],
            level=p["level"],
            duration=p["duration"],
            warmup=p["warmup"],
            warmup_max=p["warmup_max"],
            warmup_tolerance=p["warmup_tolerance"],
            repeats=p["repeats"],
            prompt_len=p["prompt_len"],
            output_len=p["output_len"],
            profile=p["profile"],
            seed=p["seed"],
            out_dir=p["out_dir"],  # type path: a spark_workdir of ~/... is expanded on the host
            workdir=p["workdir"],
            cell_id=p["cell_id"],
            time_scale=p["time_scale"],
            shape={"request_rate": p["request_rate"], **{k: p[k] for k in SHAPE_OPTIONS}},
            telemetry_opts={
                "nvidia_smi": p["nvidia_smi"],
                "interval_s": p["telemetry_interval"],
                "throttle_threshold": p["throttle_threshold"],
                "required": p["telemetry_required"],
                "cooldown_s": p["cooldown_s"],
                "cool_to_c": p["cool_to_c"],
                "cool_timeout_s": p["cool_timeout_s"],
            },
        )
    except (HostError, ValueError, OSError) as exc:  # a bad URL, profile, dataset, SLO or telemetry setting
        module.fail_json(msg=str(exc), level=p["level"])
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
