"""The telemetry sampler against a real NVIDIA GPU under a PyTorch matmul load, and its CPU cost.

    python3 bench/bench_telemetry_gpu.py --out DIR [--interval 0.5] [--idle 8] [--load 30]

Runs hostside/telemetry.Sampler for idle + load + idle seconds; the load is a bf16 8192x8192 matmul loop in a
child process (the preinstalled PyTorch). Writes DIR/nvidia-smi.csv (the raw lines the sampler read: a test
fixture) and DIR/summary.json (each phase's WindowTelemetry and the sampler's CPU time), and prints the summary.
CPU cost = (sampler threads' CPU + the nvidia-smi process's CPU) / wall time, as a share of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.hostside import telemetry

MATMUL = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + {seconds}
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print(n, "matmuls", 2 * 8192**3 * n / {seconds} / 1e12, "TFLOP/s")
"""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--idle", type=float, default=8.0)
    p.add_argument("--load", type=float, default=30.0)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sampler = telemetry.Sampler(interval_s=args.interval, raw_path=os.path.join(args.out, "nvidia-smi.csv"))
    wall0 = time.monotonic()
    with sampler:
        m0 = sampler.mark()
        time.sleep(args.idle)
        m1 = sampler.mark()
        load = subprocess.run([sys.executable, "-c", MATMUL.format(seconds=args.load)], capture_output=True, text=True)
        m2 = sampler.mark()
        time.sleep(args.idle)
        m3 = sampler.mark()
    wall = time.monotonic() - wall0
    summary = {
        "note": sampler.note,
        "fields": list(sampler.fields),
        "interval_s": args.interval,
        "wall_s": round(wall, 2),
        "sampler_thread_cpu_s": round(sampler.cpu_s, 3),
        "nvidia_smi_cpu_s": round(sampler.child_cpu_s, 3),
        "cpu_share_of_one_core_pct": round(100 * (sampler.cpu_s + sampler.child_cpu_s) / wall, 3),
        "matmul": (load.stdout + load.stderr).strip()[-300:],
        "idle_before": sampler.summary(m0, m1, -1),
        "load": sampler.summary(m1, m2, -1),
        "idle_after": sampler.summary(m2, m3, -1),
        "loadavg": telemetry.read_loadavg(),
        "nproc": os.cpu_count(),
    }
    for phase in ("idle_before", "load", "idle_after"):
        summary[phase].pop("timeline")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
