"""Capacity of the load driver: streamed tokens/s and driver CPU time per token on one core.

The simulated Spark runs with `--sim-rate unlimited` pinned to one core, the driver (this process) on
another; 16 closed-loop streams for --duration seconds. Re-run with:

    .venv/bin/python bench/bench_loadgen.py [--duration 10] [--streams 16] [--output-len 1024]

The driver's capacity on one core is 1 / (CPU seconds per token); the streamed rate is also bounded
by the simulator's own core, so both figures are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.hostside import loadgen  # noqa: E402
from tests.test_sim_support import SimServer  # noqa: E402  (the one way to start the simulator)

GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pick_cores():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two cores (one for the simulator, one for the driver)")
    return cores[0], cores[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=1024)
    args = p.parse_args()
    sim_core, driver_core = pick_cores()
    sim = SimServer(
        "uns-fast",
        "--moe-backend",
        "marlin",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "256",
        "--sim-rate",
        "unlimited",
        env=GB10_ENV,
    )
    try:
        sim.start()
        os.sched_setaffinity(sim.proc.pid, {sim_core})
        os.sched_setaffinity(0, {driver_core})
        sim.wait_ready()
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        res = loadgen.run_level(sim.url, "uns-fast", args.streams, args.duration, 0.0, args.prompt_len, args.output_len)
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
    finally:
        sim.stop()
    if not res["ok"]:
        raise SystemExit("run failed: {}".format(res["error"]))
    tokens = res["total_output_tokens"]
    per_token_us = 1e6 * cpu / tokens
    print(
        json.dumps(
            {
                "streams": args.streams,
                "duration_s": args.duration,
                "output_len": args.output_len,
                "streamed_tokens_per_s": round(res["output_throughput"], 1),
                "completed_requests": res["completed"],
                "failed": res["failed"],
                "driver_cpu_s": round(cpu, 3),
                "driver_wall_s": round(wall, 3),
                "driver_cpu_us_per_token": round(per_token_us, 2),
                "driver_capacity_tokens_per_s_one_core": round(1e6 / per_token_us),
                "cores": {"simulator": sim_core, "driver": driver_core},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
