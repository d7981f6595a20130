"""Does the simulated Spark's accelerated clock change any decision? The same seeds at time scale 1 and K.

    python bench/bench_time_scale.py                               # seeds 1 2 3, K = 10, 5 s windows
    python bench/bench_time_scale.py --seeds 1 2 --scale 20 --duration 10 --address 127.0.7.200

For each seed and scale: start the real simulator (`python -m agent.sim serve`, --sim-seed, --sim-time-scale) for
nv + marlin and nv + flashinfer_b12x, drive tune's screen (lowest and highest level, 1 warmup + 2 windows) with the
real load driver on the scaled clock (hostside/loadgen.scaled_clock), then ask tune's decision code
(judging/sequential.plan_next) what it would do. Prints the medians and the decision per scale, and whether the
decisions agree. Times are simulated seconds; a window at scale K takes 1/K of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.hostside import facts, loadgen
from agent.judging import sequential as seq
from agent.planning import envrules

LEVELS = [1, 16]
CELLS = {"nvm": "marlin", "nvb": "flashinfer_b12x"}
ENV = envrules.resolve_env(facts.gather(simulate_gpu="gb10"), "nvfp4", "0.24.0", {}).env


def serve(address: str, port: int, backend: str, seed: int, scale: float) -> subprocess.Popen:
    argv = [sys.executable, "-m", "agent.sim", "serve", "nv", "--moe-backend", backend, "--host", address]
    argv += ["--port", str(port), "--max-model-len", "8192", "--max-num-seqs", "16"]
    argv += ["--sim-seed", str(seed), "--sim-time-scale", str(scale), "--sim-startup-s", "0.2"]
    env = {**os.environ, **ENV}  # the env rules' environment for NVFP4 on GB10 (CUTE_DSL_ARCH=sm_121a ...)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the simulator did not come up on {address}:{port}")


def screen(address: str, port: int, backend: str, seed: int, scale: float, duration: float) -> dict[str, Any]:
    proc = serve(address, port, backend, seed, scale)
    try:
        runs = loadgen.run_levels(
            f"http://{address}:{port}",
            "nv",
            LEVELS,
            duration_s=duration,
            warmup_s=duration,
            repeats=2,
            prompt_len=64,
            output_len=32,
            clock=loadgen.scaled_clock(scale),
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {
        "status": "done",
        "verdict": "valid",
        "config": {"moe_backend": backend},
        "runs": [dict(r) for r in runs],
    }


def decide(measured: dict[str, dict[str, Any]]) -> str:
    cands = [seq.Candidate(k, "nv", b, f"nv {b}", (1, 2, 4, 8, 16)) for k, b in CELLS.items()]
    plan = seq.plan_next(cands, measured, seq.TuneSettings())
    return "; ".join([f"stopped {s.label}" for s in plan.stopped] + [f"{s.stage} {s.cell_id}" for s in plan.steps])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument("--scale", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=5.0, help="window, simulated seconds")
    ap.add_argument("--address", default="127.0.7.200")
    ap.add_argument("--port", type=int, default=18931)
    args = ap.parse_args()
    agree = 0
    for seed in args.seeds:
        decisions = {}
        for scale in (1.0, args.scale):
            t0 = time.monotonic()
            measured = {k: screen(args.address, args.port, b, seed, scale, args.duration) for k, b in CELLS.items()}
            real = time.monotonic() - t0
            medians = {
                k: [
                    statistics.median(r["output_throughput"] for r in m["runs"] if r["concurrency"] == c)
                    for c in LEVELS
                ]
                for k, m in measured.items()
            }
            decisions[scale] = decide(measured)
            shown = ", ".join(f"{CELLS[k]} {[round(x, 1) for x in v]}" for k, v in medians.items())
            print(f"seed {seed} scale {scale:g}: medians tok/s at c={LEVELS}: {shown}; decision: {decisions[scale]} "
                  f"({real:.0f} s real)", flush=True)  # fmt: skip
        agree += decisions[1.0] == decisions[args.scale]
    print(f"decisions equal at scale 1 and {args.scale:g}: {agree} of {len(args.seeds)} seeds")
    return 0 if agree == len(args.seeds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
