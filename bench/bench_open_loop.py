"""Can the load driver keep an open-loop Poisson schedule of 2,000 requests/s on one core? Its start lag.

The simulated Spark runs with `--sim-rate unlimited` (its rate model off: no prefill or decode time) pinned to one
core, the driver (this process) to another. One open-loop window of --duration seconds at --rate requests/s
(Poisson, no cap on requests in flight), short prompts and outputs so the server is not what limits. Printed: how
late each request started against its scheduled time (p50/p90/p99/max), late starts (> loadgen.LATE_S),
requests never started, the request rate achieved, and the driver's CPU time. Re-run with:

    .venv/bin/python bench/bench_open_loop.py [--rate 2000] [--duration 10] [--output-len 4]

State the machine's load average with the figure (printed too): the driver shares its core with nothing of ours,
but other jobs on the machine take time slices from it.
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--output-len", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two cores (one for the simulator, one for the driver)")
    sim = SimServer(
        "uns-fast",
        "--moe-backend",
        "marlin",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "4096",
        "--sim-rate",
        "unlimited",
        env=GB10_ENV,
    )
    try:
        sim.start()
        os.sched_setaffinity(sim.proc.pid, {cores[0]})
        os.sched_setaffinity(0, {cores[1]})
        sim.wait_ready()
        load_before = os.getloadavg()
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        [res] = loadgen.run_levels(
            sim.url,
            "uns-fast",
            [0],
            args.duration,
            0.0,
            1,
            prompt_len=args.prompt_len,
            output_len=args.output_len,
            seed=args.seed,
            shape=loadgen.Shape(rate=args.rate),
        )
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
    finally:
        sim.stop()
    scheduled = round(args.rate * args.duration)
    print(
        json.dumps(
            {
                "rate": args.rate,
                "duration_s": args.duration,
                "scheduled_about": scheduled,
                "completed": res["completed"],
                "failed": res["failed"],
                "request_throughput": round(res["request_throughput"], 1),
                "start_lag_ms": {
                    "p50": round(res["p50_start_lag_ms"], 3),
                    "p99": round(res["p99_start_lag_ms"], 3),
                    "max": round(res["max_start_lag_ms"], 3),
                },
                "late_starts": res["late_starts"],
                "late_threshold_ms": 1000 * loadgen.LATE_S,
                "missed_starts": res["missed_starts"],
                "p50_ttft_ms": round(res["p50_ttft_ms"], 3),
                "driver_cpu_s": round(cpu, 2),
                "driver_wall_s": round(wall, 2),
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "cores": {"simulator": cores[0], "driver": cores[1]},
                "errors": res["errors"],
            }
        )
    )
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
