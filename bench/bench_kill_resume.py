"""Kill and resume: SIGKILL the controller at N random points of a two-host sweep (two sshd test hosts, the simulated
Spark, the real CLI), re-running after each kill, then run it to the end and count what is left: cells finished,
measurements per cell, cells measured twice, lost cells, half-written files, servers and playbooks left running.
The kill points come from a seed (printed; pass --seed to replay). The test suite runs a 3-kill version of this.

    flock /tmp/spark-agent-it.lock .venv/bin/python bench/bench_kill_resume.py [--kills 20] [--seed N] [--cells 6]

The final exit code is 0 only when every cell is valid; a backend the simulated GB10 refuses is a failed cell
(finished, counted, exit 1), which is not a loss.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fault_drills import BACKENDS, check_summary, fault_spec, kill_resume  # noqa: E402
from tests.sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_fleet  # noqa: E402

MORE_BACKENDS = (*BACKENDS, "humming", "emulation", "b12x", "flashinfer_trtllm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cells", type=int, default=6, help="cells per host (1-6): enough that kills land mid-sweep")
    ap.add_argument("--max-delay", type=float, default=45.0, help="latest kill point after a start, seconds")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    with tempfile.TemporaryDirectory(prefix="bench-kill-resume-") as tmp_name:
        tmp = Path(tmp_name)
        fleet = start_fleet(tmp / "fleet", count=2)
        try:
            inventory = tmp / "inventory.yml"
            inventory.write_text(yaml.safe_dump(inventory_for(fleet, SIM_HOST_VARS)))
            spec = fault_spec(tmp, "kill-resume", backends=MORE_BACKENDS[: args.cells])
            out = tmp / "results"
            t0 = time.monotonic()
            report = kill_resume(fleet, spec, inventory, out, "kill-resume", args.kills, seed, args.max_delay)
            planned = {h.name: args.cells for h in fleet.hosts}
            adds_up = "yes"
            try:
                check_summary(report.final_stderr, out, "kill-resume", planned)
            except AssertionError as exc:
                adds_up = f"NO: {exc}"
            expected = 2 * args.cells
            print()
            print(f"seed                     {seed}")
            print(f"kills                    {report.kills} of {args.kills} runs ({report.ran_to_end} ran to the end)")
            print(f"kill points (s)          {', '.join(f'{d:g}' for d in report.delays)}")
            print(f"cells finished per run   {report.finished_after_each}")
            print(f"final run exit code      {report.final_rc}")
            print(f"cells measured           {report.cells} of {expected}")
            print(f"measurements per cell    {sorted(set(report.runs_per_cell.values()))} (expected [1])")
            print(f"cells measured twice     {len(set(report.remeasured))}")
            print(f"cells lost               {expected - report.cells} (lost.toml left: {report.lost})")
            print(f"half-written files       {report.temp_files}")
            print(f"servers left on hosts    {report.stray_servers}")
            print(f"playbooks left running   {report.stray_playbooks}")
            print(f"summary adds up          {adds_up}")
            print(f"wall time                {time.monotonic() - t0:.0f} s")
            ok = (
                report.final_rc in (0, 1)
                and "  lost " not in report.final_stderr
                and report.cells == expected
                and set(report.runs_per_cell.values()) == {1}
                and not report.remeasured
                and report.lost == report.temp_files == report.stray_servers == report.stray_playbooks == 0
                and adds_up == "yes"
            )
            return 0 if ok else 1
        finally:
            stop_fleet(fleet)


if __name__ == "__main__":
    sys.exit(main())
