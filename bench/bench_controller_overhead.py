"""Controller overhead per cell: wall time of a cell minus server startup and the load driver's time on the host.

Runs a real sweep (ansible-runner, playbooks, the simulated Spark) of N cells with tiny windows, over real SSH to a
test sshd host (default) or on localhost (--local), then prints, per cell: wall, measuring, server startup, and the
controller's overhead = wall - startup - load driver time (its windows, warmups, /metrics scrapes and the pause
between windows, as timed on the host). The sum of the windows alone is shown too. Target: under 3 s per cell.

    .venv/bin/python bench/bench_controller_overhead.py [--cells 6] [--local]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import logs  # noqa: E402
from agent.planning.inventory import load_inventory  # noqa: E402
from agent.planning.spec import load_spec  # noqa: E402
from agent.results import tree as results  # noqa: E402
from agent.running.follow import run_sweep  # noqa: E402
from tests.sshd_hosts import inventory_for, start_fleet, stop_fleet  # noqa: E402

BACKENDS = ["marlin", "flashinfer_b12x", "auto", "humming", "emulation", "flashinfer_cutlass", "b12x", "cutlass"]
HOST_VARS = {
    "spark_runtime": "process",
    "spark_simulate_gpu": "gb10",
    "spark_host_scope": "workdir",
    "spark_serve_cmd": ["/usr/bin/python3", "-m", "agent.sim", "serve"],
    "spark_serve_env": {"PYTHONPATH": str(REPO)},
}


def spec_text(cells: int, duration: float) -> str:
    return f"""
[sweep]
name = "overhead"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{"cd" * 32}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
max_num_seqs = 8
[matrix]
moe_backend = {BACKENDS[:cells]!r}
concurrency = [1]
duration_s = {duration}
warmup = 0
repeats = 1
[load]
prompt_len = 32
output_len = 16
""".replace("'", '"')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=6, choices=range(1, len(BACKENDS) + 1))
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--local", action="store_true", help="localhost (ansible_connection=local) instead of SSH")
    args = ap.parse_args()
    logs.configure("console")
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        tmp = Path(tmp)
        fleet = None
        if args.local:
            inv = {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "spark_workdir": str(tmp / "work"),
                            "spark_port": 18123,
                            **HOST_VARS,
                        }
                    }
                }
            }
        else:
            fleet = start_fleet(tmp / "fleet", count=1)
            inv = inventory_for(fleet, HOST_VARS)
        inventory = tmp / "inventory.yml"
        inventory.write_text(yaml.safe_dump(inv))
        (tmp / "spec.toml").write_text(spec_text(args.cells, args.duration))
        try:
            spec = load_spec(tmp / "spec.toml")
            hosts = load_inventory(inventory)
            t0 = time.monotonic()
            run_sweep(spec, inventory, hosts, tmp / "results")
            total = time.monotonic() - t0
        finally:
            if fleet:
                stop_fleet(fleet)
        rows = []
        for cell in results.load_cells(tmp / "results"):
            windows = sum(r.get("duration", 0.0) for r in cell["runs"])
            overhead = cell["elapsed_s"] - cell["measure_s"] - cell["startup_s"]
            rows.append(
                (
                    cell["config"]["moe_backend"] or "auto",
                    cell["status"],
                    cell["elapsed_s"],
                    windows,
                    cell["measure_s"],
                    cell["startup_s"],
                    overhead,
                )
            )
    print(
        f"\n{'backend':<20}{'status':<8}{'wall s':>8}{'windows s':>11}{'driver s':>10}{'startup s':>11}"
        f"{'overhead s':>12}"
    )
    for r in rows:
        print(f"{r[0]:<20}{r[1]:<8}{r[2]:>8.2f}{r[3]:>11.2f}{r[4]:>10.2f}{r[5]:>11.2f}{r[6]:>12.2f}")
    overheads = [r[6] for r in rows]
    print(
        f"\n{len(rows)} cells over {'localhost' if args.local else 'SSH'}; sweep total {total:.1f} s "
        f"(includes facts + provision once)"
    )
    print(
        f"controller overhead per cell: median {statistics.median(overheads):.2f} s, max {max(overheads):.2f} s "
        f"(target < 3 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
