"""The fleet runs the sweep (issue 13 §1-4), over six real sshd hosts with the simulated Spark (calibrated rate,
which sleeps): fingerprint groups, the group's queue spreading cells, a host lost mid-sweep, and a detached sweep
whose controller is SIGKILLed while the hosts go on."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agent.hostside import runner, supervise
from agent.judging import correctness
from agent.results import tree as results

from .fault_drills import parse_summary
from .sshd_hosts import SIM_HOST_VARS, inventory_for, lose_host, restore_host, start_fleet, stop_fleet
from .test_sweep import write_spec

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]
GB10 = ["spark-a", "spark-b", "spark-c", "spark-d", "spark-e"]


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    """Six sshd hosts: five simulated GB10s and spark-f, a simulated B200. Port 8100: never the session fleet's."""
    fleet = start_fleet(tmp_path_factory.mktemp("six"), count=6)
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8100})
        inv["all"]["children"]["sparks"]["hosts"]["spark-f"]["spark_simulate_gpu"] = "b200"
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inv))
        yield fleet
    finally:
        for h in fleet.hosts:  # a lost host's server kept running on its own: stop it by its supervisor
            with contextlib.suppress(Exception):
                supervise.stop(str(h.workdir))
        stop_fleet(fleet)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def fleet_spec(tmp: Path, name: str, variants: int, load: str = "") -> Path:
    """2 MoE backends × `variants` values of a server setting (gpu_memory_utilization): comparison sets of two cells
    the fleet may spread (the backend question itself is never split); one short window per cell (~5 s a cell over
    SSH). `load`: more [load] lines (the spec's last table)."""
    path = write_spec(tmp, name, backends=("marlin", "flashinfer_b12x"), duration=0.5, concurrency=(1,), warmup=0)
    values = [round(0.80 + 0.01 * i, 2) for i in range(variants)]
    text = path.read_text().replace("[matrix]\n", f"[matrix]\ngpu_memory_utilization = {values!r}\n")
    path.write_text(text + load)
    return path


def stored(out: Path, sweep: str) -> dict[str, list[str]]:
    """cell id -> the hosts that have a cell.toml for it."""
    found: dict[str, list[str]] = {}
    for f in sorted((out / sweep).glob(f"*/*/{results.CELL_FILE}")):
        found.setdefault(f.parent.name, []).append(f.parent.parent.name)
    return found


def test_a_b200_forms_its_own_group_and_check_says_why(six):
    proc = cli("check", "-i", str(six.inventory))
    text = " ".join(proc.stdout.split())  # rich wraps long lines
    assert "group g1: GB10 cc12.1" in text and "spark-a, spark-b, spark-c, spark-d, spark-e" in text, proc.stdout
    assert "group g2: B200 cc10.0" in text
    assert "spark-f: chip NVIDIA B200 vs NVIDIA GB10, compute capability 10.0 vs 12.1" in text


def test_the_group_queue_spreads_cells_and_a_lost_host_costs_only_its_cell(tmp_path, six):
    """Six cells on four equal hosts, each cell measured once. spark-a's sshd stops mid-cell: that cell is recorded
    host_lost on spark-a and measured by another host; the sweep completes with every cell measured."""
    out = tmp_path / "results"
    spec = fleet_spec(tmp_path, "queue", 3)
    cmd = [*CLI, "sweep", str(spec), "-i", str(six.inventory), "--limit", ",".join(GB10[:4]), "--results", str(out)]
    cmd += ["--lost-after", "5"]  # silent for 5 s: lost (the default, 120 s, suits real networks)
    proc = subprocess.Popen(
        [*cmd, "--no-progress"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    a = six.host("spark-a")
    try:
        deadline = time.monotonic() + 120
        while not supervise.find_engines(str(a.workdir), scope="workdir") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        lose_host(six, "spark-a")  # mid-cell: its server is up
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        restore_host(six, "spark-a")
        runner.stop(str(a.workdir), "queue")  # the lost host's runner went on with its own plan, alone
        supervise.stop(str(a.workdir))
    cells = stored(out, "queue")
    # once per group, but for the reference: this one-level spec's reference is a cell measured again on each host
    # that took part (planning/blocks.py), so that their host effects are known
    assert len(cells) == 6 and sum(len(hosts) > 1 for hosts in cells.values()) <= 1, cells
    assert len({h for hosts in cells.values() for h in hosts}) >= 3, f"cells were not spread: {cells}"
    (lost,) = list((out / "queue" / "spark-a").glob(f"*/{results.LOST_FILE}"))
    assert results.read_toml(lost)["reason"] == "host_lost"
    assert cells[lost.parent.name] != ["spark-a"], "the lost host's cell was measured by another host"
    row = parse_summary(err)["spark-a"]  # its share, handed out at the start, went to the others: requeued
    assert "lost host spark-a" in err and row["requeued"] == row["planned"] >= 1 and not row["measured"], err[-3000:]
    assert proc.returncode == 0, err[-3000:]  # every cell measured, so nothing is missing
    # the answer still comes out of the survivors (or the report names the comparison it could not make)
    report = cli("report", str(out / "queue"))
    assert report.returncode == 0, report.stderr[-3000:]
    what = (out / "queue" / "report.md").read_text().split("## Problems")[0]
    # (one repeat per cell here: the report says why it is undecided rather than an order; the point is that it reads)
    assert ("**Run " in what or "**Undecided" in what) and "Across hosts:" in what, what


def test_detached_sweep_survives_its_controller_and_refuses_a_second_one(tmp_path, six):
    """8 cells handed to 2 hosts (4 each, and the reference cell again on the second), the controller gone at once; a second controller is refused with the holder
    named; `collect --wait` is SIGKILLed mid-way; status and collect later get every cell, a second collect nothing."""
    out = tmp_path / "results"
    pair = ["spark-b", "spark-c"]
    hosts = ",".join(pair)
    # two request rates inside each cell: the runner walks the cell's points (hostside/loadpoints.py) as cell.yml does
    spec = fleet_spec(tmp_path, "detached", 4, "request_rate = [3, 6]\n")
    started = cli("sweep", str(spec), "-i", str(six.inventory), "--limit", hosts, "--results", str(out), "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    shares = {h: int(re.search(rf"{h}: (\d+) cell\(s\)", started.stderr).group(1)) for h in pair}  # type: ignore[union-attr]
    assert sorted(shares.values()) == [4, 5], started.stderr[-2000:]

    # spark-b's runner is frozen (SIGSTOP) while the second controller comes: busy, whatever the machine's load
    runner_pid = supervise.runner_holder(str(six.host("spark-b").workdir))["runner_pid"]
    os.kill(runner_pid, signal.SIGSTOP)
    try:
        other = write_spec(tmp_path, "intruder", backends=("marlin",), duration=0.5, concurrency=(1,), warmup=0)
        x = str(tmp_path / "x")
        refused = cli("sweep", str(other), "-i", str(six.inventory), "--limit", "spark-b", "--results", x)
    finally:
        os.kill(runner_pid, signal.SIGCONT)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert re.search(r"host spark-b stopped: .*detached sweep detached, runner pid \d+", refused.stderr), refused.stderr

    follow = subprocess.Popen(
        [*CLI, "collect", "detached", "--results", str(out), "--wait", "--interval", "0.5"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not stored(out, "detached") and time.monotonic() < deadline:
            assert follow.poll() is None
            time.sleep(0.2)
        assert follow.poll() is None, "collect --wait ended: the sweep was over before the controller could go"
        os.killpg(follow.pid, signal.SIGKILL)  # the laptop closes: the hosts go on
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(follow.pid, signal.SIGKILL)
        follow.wait()

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = cli("status", "detached", "--results", str(out))
        assert status.returncode == 0, status.stderr
        if all(f"finished, {n}/{n} done, {n} sealed" in status.stdout for n in shares.values()):
            break
        time.sleep(1)
    assert all(f"finished, {n}/{n} done, {n} sealed" in status.stdout for n in shares.values()), status.stdout
    first = cli("collect", "--results", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    cells = stored(out, "detached")
    hosts_of = sorted(h for hs in cells.values() for h in hs)
    assert len(cells) == 8 and hosts_of == sorted(h for h, n in shares.items() for _ in range(n)), cells
    windows = {p.stem for p in (out / "detached").glob("*/*/q*-c001-r1.toml")}
    assert windows == {"q3-c001-r1", "q6-c001-r1"} and len(list((out / "detached").glob("*/*/q*-r1.toml"))) == 18
    # the runner probes each server after its windows, as cell.yml does (serving.teardown_cell): outputs scored here
    probed = [c["correctness"] for c in correctness.judged_cells(out / "detached")]
    assert len(probed) == 9 and all(c["probed"] and c["score"] == 1.0 and not c["wrong"] for c in probed)
    again = cli("collect", "detached", "--results", str(out))
    assert "collected 0 new cell(s) (9 already here)" in again.stderr, again.stderr
    assert not [e for h in six.hosts for e in supervise.find_engines(str(h.workdir), scope="workdir")]
