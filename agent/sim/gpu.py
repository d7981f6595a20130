"""The simulated Spark's GPU: power and temperature that follow the engine's load, published to a small state
file that the simulated `nvidia-smi` (agent/sim/nvidia_smi.py) reads. The host-side sampler then runs the very
code it runs on a real Spark (hostside/telemetry.py over `nvidia-smi --query-gpu`).

Fault `--sim-throttle-after S`: after S seconds of busy time the GPU reports thermal throttling (clocks-event
reasons sw/hw thermal slowdown), its SM clock drops and decoding slows to `throttle_slowdown` of normal.
Figures: calibration.toml [gpu]; the idle ones are sourced, the loaded ones are marked assumptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import tempfile
import time
from typing import Any

from . import calibration

PUBLISH_S = 0.25


def state_path(host: str, port: int) -> str:
    """Where the simulator at host:port publishes its GPU state (the simulated nvidia-smi's --sim-server)."""
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in f"{host}-{port}")
    return os.path.join(tempfile.gettempdir(), f"spark-sim-gpu-{os.getuid()}-{safe}.json")


class GpuModel:
    def __init__(self, throttle_after: float | None, cal: dict[str, Any] | None = None) -> None:
        self.cal = cal or calibration.load()["gpu"]
        self.throttle_after = throttle_after
        self.power = float(self.cal["idle_w"])
        self.temp = float(self.cal["idle_c"])
        self.busy_s = 0.0
        self.throttled = False

    def step(self, dt: float, running: int) -> dict[str, Any]:
        c = self.cal
        load = min(1.0, running / c["saturation_requests"])
        self.busy_s += dt if running else 0.0
        self.throttled = bool(running) and self.throttle_after is not None and self.busy_s >= self.throttle_after
        target_w = c["idle_w"] + (c["loaded_w"] - c["idle_w"]) * load
        if self.throttled:
            target_w *= c["throttle_slowdown"]
        self.power += (target_w - self.power) * (1 - math.exp(-dt / c["power_tau_s"]))
        heat = (self.power - c["idle_w"]) / (c["loaded_w"] - c["idle_w"])
        target_c = c["throttled_c"] if self.throttled else c["idle_c"] + (c["loaded_c"] - c["idle_c"]) * heat
        self.temp += (target_c - self.temp) * (1 - math.exp(-dt / c["temp_tau_s"]))
        sm = c["throttled_sm_clock_mhz"] if self.throttled else c["sm_clock_mhz"] if running else c["idle_sm_clock_mhz"]
        return {
            "power_w": round(self.power, 2),
            "temp_c": round(self.temp),
            "sm_mhz": sm,
            "mem_mhz": c["mem_clock_mhz"],
            "util_pct": round(100 * load),
            "reasons": int(c["throttle_mask"]) if self.throttled else (0 if running else 1),  # 0x1: GPU idle
            "at": time.time(),
        }


async def publish(engine: Any, path: str, throttle_after: float | None) -> None:
    """Every PUBLISH_S: step the model with the engine's load, slow the engine while throttled, write the state."""
    model = GpuModel(throttle_after)
    loop = asyncio.get_running_loop()
    last = loop.time()
    try:
        while True:
            await asyncio.sleep(PUBLISH_S)
            now = loop.time()
            state = model.step(now - last, len(engine.running))
            last = now
            engine.slowdown = model.cal["throttle_slowdown"] if model.throttled else 1.0
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(state, f)
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
