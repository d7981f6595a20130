"""Fault drills against the real CLI: start `spark-agent sweep` as a user would, hurt it (SIGKILL, SIGINT, SIGTERM),
then read what it left behind. Shared by tests/test_faults.py and bench/bench_kill_resume.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agent.hostside import supervise
from agent.results import tree as results
from agent.running import collect
from agent.running.sweep import BUCKETS as SUMMARY_COLUMNS

from .sshd_hosts import REPO, SshFleet
from .terminal import ctrl_c_as_on_a_terminal
from .test_sweep import write_spec

CLI = [sys.executable, "-m", "agent.cli"]
COLUMNS = SUMMARY_COLUMNS  # the summary the CLI prints, one definition
BACKENDS = ("marlin", "flashinfer_b12x")


def fault_spec(tmp: Path, name: str, backends: tuple[str, ...] = BACKENDS, duration: float = 0.5) -> Path:
    """Small and quick: one concurrency level, no warmup, one repeat; a cell takes ~5 s over SSH."""
    return write_spec(tmp, name, backends=backends, duration=duration, concurrency=(1,), warmup=0)


def sweep_cmd(spec: Path, inventory: Path, out: Path, *extra: str) -> list[str]:
    """The drills count per host on the two-host test fleet: both hosts measure every cell (--replicas 2)."""
    every_host = [] if "--limit" in extra else ["--replicas", "2"]
    return CLI + ["sweep", str(spec), "-i", str(inventory), "--results", str(out), "--no-progress", *every_host, *extra]


def run_cli(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def start_cli(cmd: list[str]) -> subprocess.Popen:
    """In a process group of its own, like a terminal's foreground job: a signal to the group reaches only it."""
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_as_on_a_terminal,
    )


def descendants(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def playbooks_among(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The ansible-playbook processes among PIDs we started (still running)."""
    out = []
    for p in procs:
        try:
            if _alive(p) and any("ansible-playbook" in part for part in p.cmdline()[:3]):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _alive(p: psutil.Process) -> bool:
    """Running, and not a zombie: an orphan that ended waits to be reaped by whatever init this box has."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait for processes we started to end on their own; returns those still alive."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in procs if _alive(p)]


def engines_running(fleet: SshFleet) -> list[dict]:
    return [e for h in fleet.hosts for e in supervise.find_engines(str(h.workdir), scope="workdir")]


def parse_summary(stderr: str) -> dict[str, dict[str, int]]:
    """The summary table the CLI prints: host (and 'total') -> counts."""
    rows = {}
    pattern = re.compile(r"^  (\S+)\s+" + r"\s+".join(r"(\d+)" for _ in COLUMNS) + r"\s*$")
    for line in stderr.splitlines():
        m = pattern.match(line)
        if m:
            rows[m.group(1)] = dict(zip(COLUMNS, map(int, m.groups()[1:]), strict=True))
    return rows


def check_summary(stderr: str, out: Path, sweep: str, planned: dict[str, int]) -> dict[str, dict[str, int]]:
    """The numbers add up (per host and in total), match the plan, and match what is in the results tree."""
    rows = parse_summary(stderr)
    assert set(rows) == {*planned, "total"}, stderr[-3000:]
    for name, c in rows.items():
        assert c["planned"] == sum(c[k] for k in COLUMNS[1:]), f"{name}: {c} does not add up"
    for k in COLUMNS:
        assert rows["total"][k] == sum(rows[h][k] for h in planned), f"total {k} is not the sum of the hosts"
    for host, n in planned.items():
        c = rows[host]
        assert c["planned"] == n
        finished = len(list((out / sweep / host).glob(f"*/{results.CELL_FILE}")))
        assert finished == c["measured"] + c["invalid"] + c["failed"] + c["skipped"], (host, c, finished)
        assert c["lost"] == n - finished, (host, c, finished)
    return rows


def stray_temp_files(out: Path) -> list[Path]:
    """Half-written files: an atomic write's temp file, or collect's staging folder of a cell being received."""
    return [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(collect.STAGING_PREFIX)]


def finished_cells(out: Path, sweep: str) -> dict[str, tuple[int, int]]:
    """host/cell -> (inode, mtime) of cell.toml: a cell measured again would get a new one."""
    out_cells = {}
    for p in (out / sweep).glob(f"*/*/{results.CELL_FILE}"):
        st = p.stat()
        out_cells[f"{p.parent.parent.name}/{p.parent.name}"] = (st.st_ino, st.st_mtime_ns)
    return out_cells


@dataclass
class KillReport:
    seed: int
    kills: int = 0
    delays: list[float] = field(default_factory=list)
    finished_after_each: list[int] = field(default_factory=list)
    ran_to_end: int = 0  # runs that finished before their kill point
    remeasured: list[str] = field(default_factory=list)  # finished cells written again (must stay empty)
    temp_files: int = 0
    final_rc: int = -1
    final_stderr: str = ""
    cells: int = 0
    runs_per_cell: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    stray_servers: int = 0
    stray_playbooks: int = 0
    seconds: float = 0.0


def kill_resume(
    fleet: SshFleet,
    spec: Path,
    inventory: Path,
    out: Path,
    sweep: str,
    kills: int,
    seed: int,
    max_delay: float,
    say: Callable[[str], None] = print,
) -> KillReport:
    """SIGKILL the controller at `kills` random points (random by `seed`), re-running each time, then run to the end
    and count: every cell measured exactly once, none lost, no server and no playbook of ours left anywhere."""
    rng = random.Random(seed)
    report = KillReport(seed=seed)
    started = time.monotonic()
    orphans: list[psutil.Process] = []
    say(f"kill_resume seed={seed} kills={kills}")
    for i in range(kills):
        before = finished_cells(out, sweep)
        delay = round(rng.uniform(0.5, max_delay), 2)
        proc = start_cli(sweep_cmd(spec, inventory, out))
        killed = False
        try:
            proc.wait(timeout=delay)
            report.ran_to_end += 1
        except subprocess.TimeoutExpired:
            killed = True
            orphans += descendants(proc)  # ansible-playbook runs in its own session and outlives a SIGKILL
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            report.kills += 1
        proc.communicate()
        after = finished_cells(out, sweep)
        report.remeasured += [c for c, stamp in before.items() if after.get(c) != stamp]
        report.temp_files += len(stray_temp_files(out))
        report.delays.append(delay)
        report.finished_after_each.append(len(after))
        how = f"killed after {delay:.2f} s" if killed else f"ran to the end before {delay:.2f} s"
        say(f"  run {i + 1}: {how}, {len(after)} cell(s) finished")
    before = finished_cells(out, sweep)
    final = run_cli(sweep_cmd(spec, inventory, out), timeout=600)
    after = finished_cells(out, sweep)
    report.remeasured += [c for c, stamp in before.items() if after.get(c) != stamp]
    report.final_rc, report.final_stderr = final.returncode, final.stderr
    report.cells = len(after)
    for cell in after:
        report.runs_per_cell[cell] = len(list((out / sweep / cell).glob("c[0-9][0-9][0-9]-r*.toml")))
    report.lost = len(list((out / sweep).glob(f"*/*/{results.LOST_FILE}")))
    report.temp_files += len(stray_temp_files(out))
    leftover = wait_gone(playbooks_among(orphans), timeout=60)
    report.stray_playbooks = len(leftover)
    for p in leftover:  # ours, by PID: never leave them to the next test
        with contextlib.suppress(psutil.Error):
            p.kill()
    report.stray_servers = len(engines_running(fleet))
    report.seconds = round(time.monotonic() - started, 1)
    return report
