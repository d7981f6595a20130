"""What the correctness probe costs a cell: its time against the cell's windows at the study's settings.

    python bench/bench_probe.py                          # uns-fast, marlin and flashinfer_b12x, 3 probes each
    python bench/bench_probe.py --address 127.0.7.201 --probes 5

Starts the real simulator (`python -m agent.sim serve`) at its calibrated GB10 rates (time scale 1: real seconds
are simulated seconds) for each backend, runs hostside/probe.run against it --probes times (what teardown_cell
does), and prints the probe's median seconds beside a cell at the study's settings (docs/gb10-study.md: 60 s
windows, 1 warmup + 3 repeats, c = 1, 2, 4, 8, 16 = 1200 s of windows) and beside the smallest study cell (one
level: 240 s). The issue's bound: at most 5% of a cell's time.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.hostside import facts, probe
from agent.planning import envrules

ENV = envrules.resolve_env(facts.gather(simulate_gpu="gb10"), "nvfp4", "0.24.0", {}).env
STUDY_CELL_S = 60 * (1 + 3) * 5  # windows of one study cell: (warmup + repeats) x 5 levels
ONE_LEVEL_S = 60 * (1 + 3)


def serve(address: str, port: int, backend: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "agent.sim", "serve", "uns-fast", "--moe-backend", backend, "--host", address]
    argv += ["--port", str(port), "--max-model-len", "8192", "--sim-startup-s", "0.2", "--sim-seed", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **ENV})
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--address", default="127.0.7.201")
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["marlin", "flashinfer_b12x"])
    args = ap.parse_args()
    print(f"probe set v{probe.SET_VERSION}: {len(probe.prompts())} prompts; study cell {STUDY_CELL_S} s of windows")
    for backend in args.backends:
        proc = serve(args.address, args.port, backend)
        try:
            times = [probe.run(f"http://{args.address}:{args.port}", "uns-fast")["seconds"] for _ in range(args.probes)]
        finally:
            proc.terminate()
            proc.wait(10)
        median = statistics.median(times)
        print(
            f"{backend:18s} probe {median:5.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}): "
            f"{median / STUDY_CELL_S:.2%} of a study cell, {median / ONE_LEVEL_S:.2%} of a one-level cell"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
