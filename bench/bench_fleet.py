"""The fleet's speed-up and the host's idle time, on sshd test hosts with the simulated Spark (calibrated rate).

1. A 12-cell matrix on 1 host, then on 4 equal hosts (attached sweep: hand-out, the hosts' runners, followed): wall
   time each, and the ratio (issue 13 asks for at most 0.35), split into the fixed head (start → first cell starts:
   facts, provision, hand-out), the cells (first start → last end) and the tail (last end → exit: the last look
   and fetch).
2. Host idle time between cells, attached (the sweep follows the runners) and detached (`--detach` + `collect
   --wait`): from each cell.toml, per host in cell order, the gap between one cell's end and the next one's start,
   and the time of each cell that is neither server startup nor measuring (per-cell overhead).

Wall times include facts and provisioning (what a user waits for). The machine is shared: say its load average
(printed) next to any figure.

    SPARK_TEST_NET=127.0.1 python bench/bench_fleet.py [--cells 12] [--hosts 4] [--duration 2.0] [--keep DIR]
        [--attached-only]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.results import tree as results  # noqa: E402
from tests.sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_fleet  # noqa: E402
from tests.test_sweep import write_spec  # noqa: E402

CLI = [sys.executable, "-m", "agent.cli"]


def spec_for(tmp: Path, name: str, cells: int, duration: float) -> Path:
    """`cells` distinct cells (even, at most 20): 2 MoE backends x 2 memory fractions x cells/4 attention backends,
    rounded up to whole attention backends, then the spec says exactly how many it plans; one window per cell."""
    per = -(-cells // 4)  # attention backends needed
    attention = ["auto", "flash_attn", "triton_attn", "flashinfer", "flex_attention"][:per]
    path = write_spec(tmp, name, backends=("marlin", "flashinfer_b12x"), duration=duration, concurrency=(1,), warmup=0)
    text = path.read_text().replace(
        "[matrix]\n",
        "[matrix]\nattention_backend = "
        + str(attention).replace("'", '"')
        + "\ngpu_memory_utilization = [0.85, 0.9]\n",
    )
    path.write_text(text)
    return path


def stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def idle(out: Path, sweep: str) -> tuple[list[float], list[float]]:
    """Gaps between consecutive cells of each host, and each cell's overhead (elapsed - startup - measure)."""
    gaps, overhead = [], []
    for host_dir in sorted((out / sweep).iterdir()):
        cells = sorted(
            (results.read_toml(f) for f in host_dir.glob(f"*/{results.CELL_FILE}")), key=lambda c: c["started_at"]
        )
        for prev, nxt in itertools.pairwise(cells):
            gaps.append(stamp(nxt["started_at"]) - stamp(prev["finished_at"]))
        overhead += [c["elapsed_s"] - c.get("startup_s", 0.0) - c.get("measure_s", 0.0) for c in cells]
    return gaps, overhead


def run(cmd: list[str], log: Path | None = None) -> float:
    """Wall seconds of one CLI run; its stderr (the structured log) is kept in `log` when given."""
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if log is not None:
        log.write_text(proc.stderr)
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-3000:])
    return time.monotonic() - t0


def phases(out: Path, sweep: str, t0: float, t1: float) -> str:
    """head (start → first cell starts), cells (first start → last end), tail (last end → exit); whole seconds."""
    cells = [results.read_toml(f) for f in (out / sweep).glob(f"*/*/{results.CELL_FILE}")]
    first = min(stamp(c["started_at"]) for c in cells)
    last = max(stamp(c["finished_at"]) for c in cells)
    return f"head {first - t0:.0f} s, cells {last - first:.0f} s, tail {t1 - last:.0f} s"


def timed(cmd: list[str], out: Path, sweep: str) -> tuple[float, str]:
    t0 = time.time()
    wall = run(cmd, out.parent / f"{sweep}.log")
    return wall, phases(out, sweep, t0, time.time())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cells", type=int, default=12)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--duration", type=float, default=2.0, help="the measurement window of each cell, s")
    parser.add_argument("--keep", help="keep the hosts' and results' folders (and each sweep's log) here")
    parser.add_argument("--attached-only", action="store_true", help="skip the detached run (idle time, part 2)")
    args = parser.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-fleet-"))
    fleet = start_fleet(tmp / "fleet", count=args.hosts)
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8200})
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inv))
        inventory, first = str(fleet.inventory), fleet.hosts[0].name
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
        spec = spec_for(tmp, "one", args.cells, args.duration)
        one, one_phases = timed(
            [
                *CLI,
                "sweep",
                str(spec),
                "-i",
                inventory,
                "--limit",
                first,
                "--results",
                str(tmp / "r1"),
                "--no-progress",
            ],
            tmp / "r1",
            "one",
        )
        print(f"load average after 1 host: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        spec = spec_for(tmp, "many", args.cells, args.duration)
        many, many_phases = timed(
            [*CLI, "sweep", str(spec), "-i", inventory, "--results", str(tmp / "rn"), "--no-progress"],
            tmp / "rn",
            "many",
        )
        print(f"load average after {args.hosts} hosts: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        spread = sorted(len(list(d.glob(f"*/{results.CELL_FILE}"))) for d in (tmp / "rn" / "many").iterdir())
        planned = len(list((tmp / "r1" / "one").glob(f"*/*/{results.CELL_FILE}")))
        print(
            f"{planned} cells, 1 host: {one:.1f} s ({one_phases}); {args.hosts} hosts: {many:.1f} s "
            f"({many_phases}); ratio {many / one:.2f} (cells per host {spread})"
        )
        gaps_a, over_a = idle(tmp / "r1", "one")
        if args.attached_only:
            return 0
        spec = spec_for(tmp, "detached", args.cells, args.duration)
        t0 = time.monotonic()
        run([*CLI, "sweep", str(spec), "-i", inventory, "--limit", first, "--results", str(tmp / "rd"), "--detach"])
        run([*CLI, "collect", "detached", "--results", str(tmp / "rd"), "--wait", "--interval", "2"])
        detached = time.monotonic() - t0
        gaps_d, over_d = idle(tmp / "rd", "detached")
        for label, gaps, over in (("attached", gaps_a, over_a), ("detached", gaps_d, over_d)):
            mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
            mean_over = sum(over) / len(over) if over else 0.0
            print(
                f"1 host, {label}: mean gap between cells {mean_gap:.1f} s (max {max(gaps, default=0):.1f}), "
                f"mean per-cell overhead {mean_over:.1f} s (not startup, not measuring)"
            )
        print(f"1 host, detached incl. collect --wait: {detached:.1f} s (attached: {one:.1f} s)")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        stop_fleet(fleet)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
