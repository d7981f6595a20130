#!/usr/bin/env python3
"""The simulated Spark's `nvidia-smi`: answers `--query-gpu=F1,F2,... --format=csv[,noheader][,nounits]
[-lms=N | -l N]` the way GB10's driver does (memory fields "[N/A]": unified memory), from the state the
simulator at --sim-server HOST:PORT publishes (agent/sim/gpu.py). No simulator running: an idle GPU.
Run as a file (no package on sys.path needed): `python3 agent/sim/nvidia_smi.py --sim-server 127.0.0.1:8000 ...`.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from agent.sim import calibration, gpu

UNITS = {"power.draw": "W", "clocks.sm": "MHz", "clocks.mem": "MHz", "utilization.gpu": "%", "utilization.memory": "%"}
HEADERS = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory"}
NA = "[N/A]"


def values(state: dict) -> dict[str, str]:
    reasons = f"0x{int(state['reasons']):016x}"
    return {
        "index": "0",
        "name": "NVIDIA GB10",
        "power.draw": f"{state['power_w']:.2f}",
        "power.limit": NA,
        "temperature.gpu": str(int(state["temp_c"])),
        "clocks.sm": str(state["sm_mhz"]),
        "clocks.mem": str(state["mem_mhz"]),
        "utilization.gpu": str(state["util_pct"]),
        "utilization.memory": str(state["util_pct"] // 2),  # assumption: no public GB10 reading of it
        "memory.used": NA,
        "memory.total": NA,
        "memory.free": NA,
        "clocks_event_reasons.active": reasons,
        "clocks_throttle_reasons.active": reasons,
    }


def read_state(path: str) -> dict:
    cal = calibration.load()["gpu"]
    idle = {"power_w": cal["idle_w"], "temp_c": cal["idle_c"], "sm_mhz": cal["idle_sm_clock_mhz"],
            "mem_mhz": cal["mem_clock_mhz"], "util_pct": 0, "reasons": 1}  # fmt: skip
    try:
        with open(path, encoding="utf-8") as f:
            return {**idle, **json.load(f)}
    except (OSError, ValueError):
        return idle


def main(argv: list[str]) -> int:
    fields: list[str] = []
    fmt = ""
    loop_ms = 0
    server = ""
    it = iter(argv)
    for arg in it:
        if arg.startswith("--query-gpu="):
            fields = [f.strip() for f in arg.split("=", 1)[1].split(",") if f.strip()]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-lms="):
            loop_ms = int(arg.split("=", 1)[1])
        elif arg == "-lms":
            loop_ms = int(next(it))
        elif arg == "-l":
            loop_ms = 1000 * int(next(it))
        elif arg == "--sim-server":
            server = next(it)
    if not fields:
        print("NVIDIA-SMI (simulated GB10): only --query-gpu=... is supported", file=sys.stderr)
        return 2
    host, _, port = server.rpartition(":")
    path = gpu.state_path(host or "127.0.0.1", int(port or 8000))
    known = values(read_state(path))
    bad = [f for f in fields if f not in known]
    if bad:
        print(f'Field "{bad[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    options = fmt.split(",")
    if "csv" not in options:
        print("Only CSV output is simulated.", file=sys.stderr)
        return 2
    if "noheader" not in options:
        print(", ".join(f"{HEADERS.get(f, f)} [{UNITS[f]}]" if f in UNITS else HEADERS.get(f, f) for f in fields))
    while True:
        row = values(read_state(path))
        cells = [
            row[f] if "nounits" in options or f not in UNITS or row[f] == NA else f"{row[f]} {UNITS[f]}" for f in fields
        ]
        try:
            print(", ".join(cells), flush=True)
        except BrokenPipeError:
            return 0
        if not loop_ms:
            return 0
        time.sleep(loop_ms / 1000)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
