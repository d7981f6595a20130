"""`tune` against a plain sweep, for real, on sshd hosts running the simulated GB10: wall time and the answer, on one
host and on three (one logging in as root, two as a non-root user whose sudo asks a password, as tests/sshd_hosts.py
login_as_user makes them).

For each spec and host count: `spark-agent sweep SPEC --duration D --limit HOSTS` into a fresh results folder, then
`spark-agent tune SPEC --duration D --budget B --limit HOSTS` into another; the wall time of each, tune's exit code,
and the report's "what to run" of each (stats.recommend over the cells, as `report` does). The hosts serve on the
simulator's accelerated clock (`spark_sim_time_scale`): a window of D simulated seconds takes D/K real ones, and every
figure stays in simulated seconds (bench/bench_time_scale.py checks it changes no decision).

    SPARK_TEST_NET=127.0.38 python bench/bench_tune_fleet.py [--specs examples/quick.toml,...] [--hosts 1,3]
        [--duration 20] [--time-scale 10] [--budget 30m] [--root-only] [--port 8300]

Prints one markdown row per (spec, hosts): sweep s, tune s, tune / sweep, same answer, both exit codes, both answers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.judging import correctness, stats, summary  # noqa: E402
from agent.planning.spec import load_spec  # noqa: E402
from tests.sshd_hosts import SIM_HOST_VARS, inventory_for, login_as_user, start_fleet, stop_fleet  # noqa: E402

CLI = [sys.executable, "-m", "agent.cli"]
EXAMPLES = ["examples/quick.toml", "examples/gb10-nvfp4.toml", "examples/gb10-fp8.toml"]


def answer(sweep_dir: Path) -> str:
    recs = stats.recommend(summary.summarize_cells(correctness.judged_cells(sweep_dir))) if sweep_dir.is_dir() else []
    return "; ".join(r.winner or "cannot rank" for r in recs) or "nothing measured"


def timed(args: list[str], log: Path | None = None) -> tuple[float, int, str]:
    """Run the CLI; its whole output goes to `log` (kept with KEEP=1: where each step's wall went)."""
    start = time.monotonic()
    proc = subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    return time.monotonic() - start, proc.returncode, (proc.stdout + proc.stderr)[-800:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", default=",".join(EXAMPLES))
    ap.add_argument("--hosts", default="1,3")
    ap.add_argument("--duration", type=float, default=20.0, help="window, simulated seconds (default 20)")
    ap.add_argument("--time-scale", type=float, default=10.0, help="the simulator's accelerated clock (default 10)")
    ap.add_argument("--budget", default="30m", help="tune's --budget (default 30m)")
    ap.add_argument("--root-only", action="store_true", help="every host logs in as root")
    ap.add_argument("--port", type=int, default=8300, help="the simulator's port on every host (default 8300)")
    args = ap.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-tune-fleet-"))
    print(f"work folder: {root} (kept with KEEP=1: each run's log and results)", flush=True)
    fleet = start_fleet(root / "fleet", count=max(counts))
    cleanup = None if args.root_only or max(counts) < 2 else login_as_user(fleet, [h.name for h in fleet.hosts[1:]])
    rows = []
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": args.port, "spark_sim_time_scale": args.time_scale})
        inventory = root / "inventory.yml"
        inventory.write_text(yaml.safe_dump(inv))
        names = [h.name for h in fleet.hosts]
        for spec in args.specs.split(","):
            for n in counts:
                limit = ",".join(names[:n])
                common = ["-i", str(inventory), "--limit", limit, "--duration", str(args.duration), "--no-progress"]
                name = Path(spec).stem
                sweep_out, tune_out = root / f"sweep-{name}-{n}", root / f"tune-{name}-{n}"
                s_wall, s_rc, s_tail = timed(
                    ["sweep", spec, *common, "--results", str(sweep_out)], root / f"sweep-{name}-{n}.log"
                )
                t_wall, t_rc, t_tail = timed(
                    ["tune", spec, *common, "--results", str(tune_out), "--budget", args.budget],
                    root / f"tune-{name}-{n}.log",
                )
                sweep_name = load_spec(spec).name  # the results root also holds hosts.json, .fleet/...
                a_sweep, a_tune = answer(sweep_out / sweep_name), answer(tune_out / sweep_name)
                row = (
                    f"| {name} | {n} | {s_wall:.0f} | {t_wall:.0f} | {t_wall / s_wall:.2f} | "
                    f"{'yes' if a_sweep == a_tune else 'NO'} | {s_rc} | {t_rc} | {a_sweep} | {a_tune} |"
                )
                rows.append(row)
                print(row, flush=True)
                said = [t for t in t_tail.splitlines() if t.lstrip().startswith(("undecided", "not run (budget)"))]
                if said:  # tune's exit 1 for open points or budget, not for the cells that failed as in the sweep
                    print("  tune: " + "\n  tune: ".join(said), flush=True)
                if t_rc not in (0, 1) or s_rc not in (0, 1):
                    print(f"  sweep rc {s_rc}: {s_tail}\n  tune rc {t_rc}: {t_tail}", flush=True)
    finally:
        stop_fleet(fleet)  # the simulator's servers stopped with their cells; the sshd hosts by PID
        if cleanup:
            cleanup()
        if not os.environ.get("KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    print(
        "\n| spec | hosts | sweep s | tune s | tune/sweep | same answer | sweep exit | tune exit | sweep's answer | "
        "tune's answer |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
