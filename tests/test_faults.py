"""The fault suite: real sshd test hosts, the simulated Spark and the real CLI, hurt on purpose.

SIGKILL at random points then resume, a host that drops off the network mid-sweep, Ctrl-C and SIGTERM at random
points, a full results disk, a surprise exception in a host worker. After each: nothing lost or measured twice, no
server left on any host, no half-written file, a summary whose numbers add up, and an exit code scripts can trust.
Random points come from a seed that is printed (set SPARK_FAULT_SEED to replay one).
"""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agent import cli
from agent.results import tree as results
from agent.running import collect

from .fault_drills import (
    check_summary,
    descendants,
    engines_running,
    fault_spec,
    finished_cells,
    kill_resume,
    parse_summary,
    playbooks_among,
    run_cli,
    start_cli,
    stray_temp_files,
    sweep_cmd,
    wait_gone,
)
from .sshd_hosts import lose_host, restore_host

pytestmark = pytest.mark.integration

PLANNED = {"spark-a": 2, "spark-b": 2}


@pytest.fixture()
def seed() -> int:
    value = int(os.environ.get("SPARK_FAULT_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"fault seed: {value} (replay with SPARK_FAULT_SEED={value})")
    return value


def test_sigkill_at_random_points_then_resume_measures_every_cell_once(tmp_path, sim_inventory, ssh_fleet, seed):
    out = tmp_path / "results"
    spec = fault_spec(tmp_path, "killed")
    report = kill_resume(ssh_fleet, spec, sim_inventory, out, "killed", kills=3, seed=seed, max_delay=20.0)
    assert report.final_rc == 0, report.final_stderr[-3000:]
    check_summary(report.final_stderr, out, "killed", PLANNED)
    assert report.cells == 4 and set(report.runs_per_cell.values()) == {1}, report.runs_per_cell
    assert report.remeasured == [], "a finished cell was measured again"
    assert report.lost == 0 and report.temp_files == 0
    assert report.stray_servers == 0 and report.stray_playbooks == 0


def test_a_host_lost_mid_sweep_is_named_and_a_rerun_measures_only_what_is_missing(tmp_path, sim_inventory, ssh_fleet):
    out = tmp_path / "results"
    cmd = sweep_cmd(fault_spec(tmp_path, "hostloss", duration=3.0), sim_inventory, out, "--lost-after", "5")
    b = ssh_fleet.host("spark-b")
    proc = start_cli(cmd)
    try:
        deadline = time.monotonic() + 120
        while not engines_running_on(b.workdir) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        lose_host(ssh_fleet, "spark-b")  # mid-cell: its server is up and being measured
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        if not b.pid:
            restore_host(ssh_fleet, "spark-b")
    assert proc.returncode == 1, err[-3000:]
    rows = check_summary(err, out, "hostloss", PLANNED)
    assert rows["spark-a"]["measured"] == 2
    assert rows["spark-b"]["lost"] == 2 and rows["spark-b"]["measured"] == 0
    assert re.search(r"lost host spark-b: (no answer for \d+ s \(lost after 5 s\)|refused: unreachable)", err), err[
        -3000:
    ]
    (lost,) = list((out / "hostloss" / "spark-b").glob(f"*/{results.LOST_FILE}"))
    assert results.read_toml(lost)["reason"] == "host_lost"
    assert not stray_temp_files(out)

    first = finished_cells(out, "hostloss")
    rerun = run_cli(cmd)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    rows = check_summary(rerun.stderr, out, "hostloss", PLANNED)
    assert rows["spark-a"]["skipped"] == 2 and rows["spark-b"]["measured"] == 2
    after = finished_cells(out, "hostloss")
    assert all(after[c] == stamp for c, stamp in first.items()), "a finished cell was measured again"
    assert not list(out.rglob(results.LOST_FILE)), "a cell measured after all is no longer lost"
    assert engines_running(ssh_fleet) == [], "the server left running on the lost host is stopped by the re-run"


def engines_running_on(workdir: Path) -> list[dict]:
    from agent.hostside import supervise

    return supervise.find_engines(str(workdir), scope="workdir")


@pytest.mark.parametrize("how", ["SIGINT to the process group", "SIGINT to the process group", "SIGTERM"])
def test_ctrl_c_or_sigterm_at_a_random_point_leaves_no_server(tmp_path, sim_inventory, ssh_fleet, seed, how):
    out = tmp_path / "results"
    delay = round(random.Random(f"{seed}{how}{os.environ.get('PYTEST_CURRENT_TEST')}").uniform(3.0, 18.0), 2)
    print(f"{how} after {delay} s")
    proc = start_cli(sweep_cmd(fault_spec(tmp_path, "stopped"), sim_inventory, out))
    ours: list = []
    try:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            ours = descendants(proc)
            if how == "SIGTERM":
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip(f"the sweep finished before {delay} s")
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "spark-agent: interrupted"
    if parse_summary(err):  # interrupted once cells were running: the summary still adds up
        check_summary(err, out, "stopped", PLANNED)
    assert engines_running(ssh_fleet) == [], f"{how} after {delay} s left a server running"
    assert wait_gone(playbooks_among(ours), timeout=15) == [], "an ansible-playbook of ours outlived the CLI"
    assert not stray_temp_files(out)


@pytest.fixture()
def small_disk(tmp_path):
    """A 4 MiB tmpfs of our own as the results folder (we are root in CI); unmounted whatever happens."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of the file system under folder."""
    filler = folder / "filler"
    try:
        fh = open(filler, "wb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return filler  # full already: nothing left to take (seen once in a full run; the checks below still apply)
    with fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_results_disk_is_one_clear_error_and_a_rerun_finishes(tmp_path, sim_inventory, ssh_fleet, small_disk):
    out = small_disk / "results"
    # 3 s windows: the first cell is collected while the runner is still on the second (it never waits for us)
    cmd = sweep_cmd(fault_spec(tmp_path, "full", duration=3.0), sim_inventory, out, "--limit", "spark-a")
    proc = start_cli(cmd)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob(f"full/spark-a/*/{results.CELL_FILE}")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        filler = fill(small_disk)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("spark-agent: error:")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err[-3000:]
    assert f"the results folder {out} is full" in errors[0] and "No space left on device" in errors[0]
    rows = check_summary(err, out, "full", {"spark-a": 2})
    # the second cell is lost, unless the runner sealed it and it was stored before the disk filled (load-dependent)
    assert rows["spark-a"]["measured"] >= 1 and rows["spark-a"]["measured"] + rows["spark-a"]["lost"] == 2
    assert not stray_temp_files(out)
    assert not list(out.rglob("*.tar")), "a partial archive was left behind"
    for path in out.rglob("*.toml"):
        results.read_toml(path)  # every file there is whole
    assert engines_running(ssh_fleet) == []

    first = finished_cells(out, "full")
    filler.unlink(missing_ok=True)
    rerun = run_cli(cmd)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    rows = check_summary(rerun.stderr, out, "full", {"spark-a": 2})
    # the runner had sealed the second cell before the disk filled: the re-run collects it rather than measuring again
    assert rows["spark-a"]["lost"] == 0 and rows["spark-a"]["measured"] + rows["spark-a"]["skipped"] == 2
    assert all(finished_cells(out, "full")[c] == stamp for c, stamp in first.items())


def test_a_surprise_in_a_host_worker_loses_that_cell_only(tmp_path, sim_inventory, ssh_fleet, monkeypatch, capsys):
    """A bug while collecting one cell: that cell is lost (with the error), the next cell still runs, the exit is 1;
    a re-run measures the lost cell. A cell that failed (startup) stays failed on resume, and the exit stays 1."""
    spec = fault_spec(tmp_path, "surprise")
    spec.write_text(spec.read_text() + '\n[env]\nFLASHINFER_DISABLE_VERSION_CHECK = "0"\n')  # b12x dies at startup
    out = tmp_path / "results"
    argv = ["sweep", str(spec), "-i", str(sim_inventory), "--results", str(out), "--limit", "spark-a", "--no-progress"]
    real_finalize = collect.finalize_cell
    calls: list[str] = []

    def finalize_once_broken(root, cell, *args, **kwargs):
        if cell.config.moe_backend == "marlin" and not calls:
            calls.append(cell.id)
            raise RuntimeError("boom while collecting")
        return real_finalize(root, cell, *args, **kwargs)

    monkeypatch.setattr(collect, "finalize_cell", finalize_once_broken)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    rows = check_summary(err, out, "surprise", {"spark-a": 2})
    assert rows["spark-a"]["lost"] == 1 and rows["spark-a"]["failed"] == 1, err[-3000:]
    (lost,) = list(out.glob(f"surprise/spark-a/*/{results.LOST_FILE}"))
    assert lost.parent.name == calls[0]
    assert results.read_toml(lost)["error"] == "RuntimeError: boom while collecting"
    assert f"lost spark-a/{calls[0]}: lost: RuntimeError: boom while collecting" in err
    assert engines_running(ssh_fleet) == []

    monkeypatch.setattr(collect, "finalize_cell", real_finalize)
    assert cli.main(argv) == 1  # the failed cell is still failed
    err = capsys.readouterr().err
    rows = check_summary(err, out, "surprise", {"spark-a": 2})
    assert rows["spark-a"]["measured"] == 1 and rows["spark-a"]["skipped"] == 1, err[-3000:]
    assert "finished earlier as failed" in err
    assert not lost.exists()
