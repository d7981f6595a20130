"""Where a sweep's CPU goes: one `spark-agent sweep` against one sshd host running the simulated GB10, every process
on the machine sampled with psutil while it runs, its CPU-seconds summed by kind (ansible-playbook, the CLI, the
simulator, sshd, ...). The suite is CPU-bound on 2 cores (bench/README.md), so this says which work a cut must remove.

    SPARK_TEST_NET=127.0.39 python bench/bench_sweep_cpu.py [--spec examples/quick.toml] [--duration 0.5]
        [--repeats 2] [--env NAME=VALUE ...] [--port 8990]

`--env` is given to the sweep (and so to ansible-playbook) on every other run, ABAB, to compare a setting
(e.g. ANSIBLE_MODULE_COMPRESSION=ZIP_STORED). A process that lives less than one sample (0.5 s) is missed: the
totals are a floor. The machine's other processes count too, so run it on a quiet machine and state the load.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.sshd_hosts import start_fleet, stop_sim_fleet, write_sim_inventory  # noqa: E402

SAMPLE_S = 0.5


def kind(cmdline: list[str], name: str) -> str:
    """A process's kind from its command line."""
    joined = " ".join(cmdline[:6])
    if not cmdline:
        return name
    for needle, label in (
        ("ansible-playbook", "ansible-playbook"),
        ("AnsiballZ", "ansible module (host)"),
        ("agent.sim", "simulator"),
        ("nvidia_smi", "simulator"),
        ("agent.cli", "spark-agent CLI"),
        ("sshd", "sshd"),
    ):
        if needle in joined:
            return label
    if Path(cmdline[0]).name == "ssh":
        return "ssh"
    return "python (other)" if "python" in Path(cmdline[0]).name else name


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def sample_while(proc: subprocess.Popen) -> collections.Counter[str]:
    """CPU-seconds by kind, of every process, from now until `proc` exits (less what each had before)."""
    before: dict[tuple[int, float], float] = {}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            before[(p.pid, p.create_time())] = _cpu(p)
    seen: dict[tuple[int, float], tuple[str, float]] = {}
    me = os.getpid()
    while proc.poll() is None:
        for p in psutil.process_iter():
            if p.pid == me:
                continue
            try:
                key = (p.pid, p.create_time())
                label = seen[key][0] if key in seen else kind(p.cmdline(), p.name())
                seen[key] = (label, _cpu(p))
            except psutil.Error:
                pass
        time.sleep(SAMPLE_S)
    totals: collections.Counter[str] = collections.Counter()
    for key, (label, cpu) in seen.items():
        totals[label] += cpu - before.get(key, 0.0)
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="examples/quick.toml")
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for every other run")
    ap.add_argument("--port", type=int, default=8990)
    args = ap.parse_args()
    variant = dict(e.split("=", 1) for e in args.env)
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-cpu-"))
    fleet = start_fleet(root, count=1)
    try:
        write_sim_inventory(fleet, args.port, lambda name: {})
        runs = [("base", {})] + ([("variant", variant)] if variant else [])
        print("| run | exit | wall s | CPU-s | ansible-playbook | CLI | simulator | other |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for i in range(args.repeats):
            for name, env in runs if i % 2 == 0 else runs[::-1]:
                out = root / f"r{i}-{name}"
                argv = [sys.executable, "-m", "agent.cli", "sweep", args.spec, "-i", str(fleet.inventory)]
                argv += ["--results", str(out), "--duration", str(args.duration)]
                started = time.monotonic()
                proc = subprocess.Popen(
                    argv, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                totals = sample_while(proc)
                wall = time.monotonic() - started
                main_kinds = ("ansible-playbook", "spark-agent CLI", "simulator")
                other = sum(v for k, v in totals.items() if k not in main_kinds)
                cells = " | ".join(f"{totals[k]:.1f}" for k in main_kinds)
                print(
                    f"| {name} | {proc.returncode} | {wall:.1f} | {sum(totals.values()):.1f} | {cells} | {other:.1f} |"
                )
        print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    finally:
        stop_sim_fleet(fleet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
