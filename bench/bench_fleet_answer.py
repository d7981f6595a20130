"""The fleet keeps the answer: the shipped examples on 1, 2 and 3 equal sshd hosts (the simulated GB10 at its
calibrated rate, which sleeps), with wall time, "what to run", and the margin's interval.

For each example and host count: `spark-agent sweep EXAMPLE --duration D --limit <hosts>` into a fresh results folder,
then the report's recommendations read back through the same code (stats.recommend). Printed per run: wall seconds
and the ratio to one host, the answer, and the margin: the winner against its runner-up at the highest concurrency
both were measured at, as the ratio and its 95% interval (the bootstrap of the ranking on one host, the Welch interval
with the host effect divided out across hosts). Goals: identical answers on every host count; gb10-nvfp4 on 3 hosts
in at most 0.45x one host's wall; the interval on N hosts at most 25% wider than on one.

    SPARK_TEST_NET=127.0.47 python bench/bench_fleet_answer.py [--duration 3] [--hosts 1,2,3] [--examples quick,...]
"""

from __future__ import annotations

import argparse
import math
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
from tests.sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_fleet  # noqa: E402

CLI = [sys.executable, "-m", "agent.cli"]


def margin(rec: stats.Recommendation, summaries: list[summary.CellSummary]) -> tuple[float, tuple[float, float], str]:
    """The backend question's winner against its runner-up at the highest concurrency they share: the ratio and its
    95% interval (the bootstrap on one host; across hosts, the interval with the host effect divided out)."""
    q = next((q for q in rec.questions if q.axis == "backend"), rec.questions[0])
    if not q.winner or not q.versus:
        return math.nan, (math.nan, math.nan), ""
    runner = min(q.versus, key=lambda v: v.ratio_median).backend
    valid = [s for s in summaries if s.rankable]
    win = [s for s in valid if s.backend == q.winner]
    lose = [s for s in valid if s.backend == runner]
    pairs = [
        (w, x, c)
        for w in win
        for x in lose
        for c in set(w.points) & set(x.points)
        if stats.comparison_key(w.cell) == stats.comparison_key(x.cell)
    ]
    if not pairs:
        return math.nan, (math.nan, math.nan), ""
    local = [p for p in pairs if p[0].cell["host"] == p[1].cell["host"]]
    w, x, c = max(local or pairs, key=lambda p: p[2])
    if w.cell["host"] == x.cell["host"]:
        a, b = w.points[c].values, x.points[c].values
        return stats._ratio(a, b), stats.bootstrap_ratio_ci(a, b, seed=0), ""
    r = stats.rank_hosts(w, x, c, rec.hosts)
    return r.ratio, r.ci or (math.nan, math.nan), r.across


def run(example: Path, hosts: list[str], inventory: Path, duration: float, out: Path) -> tuple[float, str, str]:
    start = time.monotonic()
    args = ["sweep", str(example), "-i", str(inventory), "--limit", ",".join(hosts), "--results", str(out)]
    proc = subprocess.run([*CLI, *args, "--duration", str(duration)], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):  # 1: some cell failed or was INVALID, as gb10-fp8's four backends must
        tail = (proc.stdout + proc.stderr)[-600:]
        raise SystemExit(f"{example.name} on {len(hosts)} host(s) failed ({proc.returncode}): {tail}")
    summaries = summary.summarize_cells(correctness.judged_cells(out))
    recs = stats.recommend(summaries)
    answers = "; ".join(f"{r.winner or 'cannot rank'}" for r in recs)
    lines = []
    for r in recs:
        ratio, ci, across = margin(r, summaries)
        lines.append(f"{ratio:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" + (f" across {across}" if across else ""))
        lines += [e.words() for e in r.hosts.shown()]
    return wall, answers, " | ".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--hosts", default="1,2,3")
    ap.add_argument("--examples", default="quick,gb10-nvfp4,gb10-fp8")
    args = ap.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-answer-"))
    fleet = start_fleet(tmp / "fleet", count=max(counts))
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8300})
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inv))
        names = [h.name for h in fleet.hosts]
        print(f"load average at start: {os.getloadavg()[0]:.1f}; --duration {args.duration}")
        print("| example | hosts | wall s | vs 1 host | answer | margin [95% interval] and host effects |")
        print("|---|---|---|---|---|---|")
        for name in args.examples.split(","):
            one = math.nan
            for n in counts:
                wall, answers, margins = run(
                    REPO / "examples" / f"{name}.toml", names[:n], fleet.inventory, args.duration, tmp / f"{name}-{n}"
                )
                one = wall if n == 1 else one
                print(f"| {name} | {n} | {wall:.1f} | {wall / one:.2f} | {answers} | {margins} |", flush=True)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        stop_fleet(fleet)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
