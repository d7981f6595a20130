"""The spine end to end: a sweep over real SSH (real sshd, real Ansible via ansible-runner) against the simulated
Spark on two hosts in parallel; resume; SIGKILL and re-run; bad input refused before any host is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agent.hostside import runner, supervise, utc
from agent.hostside.contracts import Attestation, Facts
from agent.judging import correctness
from agent.planning import matrix
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.results import tree as results
from agent.results.records import CellRecord, MeasurementRecord
from agent.running.follow import run_sweep

from .terminal import ctrl_c_as_on_a_terminal
from .test_contracts import problems

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]

SPEC = """
[sweep]
name = "{name}"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
max_model_len = 8192
max_num_seqs = 8
[matrix]
moe_backend = {backends}
concurrency = {concurrency}
duration_s = {duration}
warmup = {warmup}
repeats = {repeats}
[load]
prompt_len = 64
output_len = 32
"""


def write_spec(
    tmp_path: Path,
    name: str,
    backends=("marlin", "flashinfer_b12x"),
    duration=1.0,
    repeats=1,
    concurrency=(1, 2),
    warmup=1,
) -> Path:
    path = tmp_path / f"{name}.toml"
    text = SPEC.format(
        name=name,
        digest="ab" * 32,
        backends=list(backends),
        duration=duration,
        repeats=repeats,
        concurrency=list(concurrency),
        warmup=warmup,
    )
    path.write_text(text.replace("'", '"'))
    return path


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def engines_running(ssh_fleet) -> list[dict]:
    return [e for h in ssh_fleet.hosts for e in supervise.find_engines(str(h.workdir), scope="workdir")]


def test_two_host_sweep_over_ssh(tmp_path, sim_inventory, ssh_fleet):
    spec = load_spec(write_spec(tmp_path, "two-hosts"))
    hosts = load_inventory(sim_inventory)
    outcome = run_sweep(spec, sim_inventory, hosts, tmp_path / "results", replicas=2)  # each cell on both hosts
    assert sorted(outcome.hosts) == ["spark-a", "spark-b"]
    for host in ("spark-a", "spark-b"):
        assert len(outcome.hosts[host].done) == 2 and not outcome.hosts[host].lost
        cells = correctness.judged_cells(tmp_path / "results" / "two-hosts" / host)
        assert sorted(c["config"]["moe_backend"] for c in cells) == ["flashinfer_b12x", "marlin"]
        for cell in cells:
            d = Path(cell["dir"])
            assert {p.name for p in d.iterdir()} == {
                "cell.toml",
                "server.log",
                "launch.txt",
                "c001-r1.toml",
                "c002-r1.toml",
            }
            assert cell["verdict"] == "valid", cell["verdict_reasons"]
            assert cell["attestation"]["moe_backend"] == cell["config"]["moe_backend"]
            assert cell["facts"]["arch"] == "gb10" and cell["env"]["CUTE_DSL_ARCH"] == "sm_121a"
            assert "--moe-backend " + cell["config"]["moe_backend"] in (d / "launch.txt").read_text()
            assert [r["concurrency"] for r in cell["runs"]] == [1, 2]
            assert all(r["ok"] and r["output_throughput"] > 0 for r in cell["runs"])
            # the files are the typed records, and the recorded [config] + [env] hash to the cell's id
            table = results.read_toml(d / results.CELL_FILE)
            record = CellRecord.from_toml(table)
            assert record.to_toml() == table and matrix.cell_id(record.config, record.env) == d.name
            assert problems(record.facts, Facts) == [] and problems(record.attestation, Attestation) == []
            for run in d.glob("c[0-9][0-9][0-9]-r*.toml"):
                assert MeasurementRecord.from_toml(results.read_toml(run)).to_toml() == results.read_toml(run)
    # the same cell has the same id on both hosts: the id hashes the configuration, not the host
    ids = {
        h: sorted(p.name for p in (tmp_path / "results" / "two-hosts" / h).iterdir()) for h in ("spark-a", "spark-b")
    }
    assert ids["spark-a"] == ids["spark-b"]
    assert engines_running(ssh_fleet) == []

    # resume is the default: nothing is measured again, no file changes
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.toml")}
    again = run_sweep(spec, sim_inventory, hosts, tmp_path / "results", replicas=2)
    assert all(len(o.skipped) == 2 and not o.done for o in again.hosts.values())
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.toml")} == before


def test_startup_failure_is_classified_and_the_sweep_goes_on(tmp_path, sim_inventory, ssh_fleet):
    """Without the GB10 rule's FLASHINFER_DISABLE_VERSION_CHECK the simulated b12x server dies at startup."""
    path = write_spec(tmp_path, "failing")
    path.write_text(path.read_text() + '\n[env]\nFLASHINFER_DISABLE_VERSION_CHECK = "0"\n')
    spec = load_spec(path)
    hosts = load_inventory(sim_inventory, limit="spark-a")
    t0 = time.monotonic()
    run_sweep(spec, sim_inventory, hosts, tmp_path / "results")
    cells = {c["config"]["moe_backend"]: c for c in correctness.judged_cells(tmp_path / "results" / "failing")}
    failed = [c for c in cells.values() if c["status"] == "failed"]
    assert failed, "expected at least one cell to fail at startup"
    for cell in failed:
        assert cell["verdict"] == "failed" and cell["failure_class"] == "flashinfer_version"
        assert any("FLASHINFER_DISABLE_VERSION_CHECK" in line for line in cell["failure_evidence"])
        assert cell["runs"] == []
    assert time.monotonic() - t0 < 120  # fail fast: no health timeout
    assert engines_running(ssh_fleet) == []


def test_sigkill_mid_sweep_then_rerun_measures_only_unfinished(tmp_path, sim_inventory, ssh_fleet):
    spec_path = write_spec(tmp_path, "killed", backends=("marlin", "flashinfer_b12x", "cutlass"), duration=1.5)
    out = tmp_path / "results"
    cmd = CLI + [
        "sweep",
        str(spec_path),
        "-i",
        str(sim_inventory),
        "--limit",
        "spark-a",
        "--results",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not list(out.glob("killed/spark-a/*/cell.toml")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.2)
        time.sleep(1.0)  # well inside the second cell
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("killed/spark-a/*/cell.toml")}
    assert len(first) == 1
    assert not list(out.rglob("*.tmp")), "a killed controller must leave no partial file"
    # the host's runner does not need the controller: it goes on and seals the other cells
    workdir = str(ssh_fleet.host("spark-a").workdir)
    deadline = time.monotonic() + 300
    while runner.read_progress(workdir, "killed").get("state") != "finished" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(runner.read_progress(workdir, "killed")["sealed"]) == 3, "the runner stopped with its controller"

    rerun_started = time.time()
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    # cutlass fails on the simulated GB10 (sm100 only): the cell is finished as failed and the exit says so
    assert rerun.returncode == 1, rerun.stderr[-2000:]
    from .fault_drills import parse_summary  # fault_drills imports this module

    totals = parse_summary(rerun.stderr)["total"]
    assert totals["lost"] == 0, "a cell interrupted by the kill is measured by the re-run, not lost"
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("killed/spark-a/*/cell.toml")}
    assert len(finished) == 3
    for cell_id, mtime in first.items():
        assert finished[cell_id] == mtime, "a finished cell was measured again"
    for d in out.glob("killed/spark-a/*"):
        names = sorted(p.name for p in d.iterdir())
        assert names.count("cell.toml") == 1 and not [n for n in names if n.endswith(".tmp")]
        started = results.read_toml(d / "cell.toml")["started_at"]
        assert started <= utc.iso(rerun_started), "the re-run collected what the runner sealed, it measured nothing"
    assert engines_running(ssh_fleet) == []


@pytest.mark.parametrize("case", ["tag", "not_in_inventory", "unreachable", "concurrency_zero"])
def test_bad_input_exits_2_before_touching_a_host(tmp_path, sim_inventory, case):
    spec = write_spec(tmp_path, "bad")
    inventory = sim_inventory
    extra: list[str] = []
    if case == "tag":
        spec.write_text(
            spec.read_text().replace("nvcr.io/nvidia/vllm@sha256:" + "ab" * 32, "nvcr.io/nvidia/vllm:25.11")
        )
    elif case == "not_in_inventory":
        extra = ["--limit", "spark-zz"]
    elif case == "unreachable":
        inv = yaml.safe_load(sim_inventory.read_text())
        inv["all"]["children"]["sparks"]["hosts"]["spark-a"]["ansible_host"] = "127.0.0.99"
        inventory = tmp_path / "unreachable.yml"
        inventory.write_text(yaml.safe_dump(inv))
    elif case == "concurrency_zero":
        spec.write_text(spec.read_text().replace("concurrency = [1, 2]", "concurrency = [0, 2]"))
    out = tmp_path / "results"
    proc = subprocess.run(
        CLI + ["sweep", str(spec), "-i", str(inventory), "--results", str(out)] + extra,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("spark-agent: error:")
    expected = {
        "tag": f"{spec}:",
        "not_in_inventory": "spark-zz",
        "unreachable": "spark-a (127.0.0.99:",
        "concurrency_zero": f"{spec}:",
    }[case]
    assert expected in message
    assert not out.exists(), "nothing may be written for bad input"


def test_ctrl_c_stops_the_server_before_the_cli_exits(tmp_path, sim_inventory, ssh_fleet):
    spec_path = write_spec(tmp_path, "interrupted", backends=("marlin",), duration=20.0)
    cmd = CLI + [
        "sweep",
        str(spec_path),
        "-i",
        str(sim_inventory),
        "--limit",
        "spark-b",
        "--results",
        str(tmp_path / "results"),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_on_a_terminal
    )
    try:
        deadline = time.monotonic() + 600
        while not engines_running(ssh_fleet) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        assert engines_running(ssh_fleet), "the server never started"
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert engines_running(ssh_fleet) == [], "Ctrl-C must stop the server on every host"
    time.sleep(1.0)
    leftovers = [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and "ansible-playbook" in _cmdline(pid) and "interrupted" in _cmdline(pid)
    ]
    assert leftovers == [], "Ctrl-C must not leave an ansible-playbook of ours running"
    assert not list((tmp_path / "results").rglob("cell.toml")), "an interrupted cell is not a finished cell"


def test_checkpoint_headers_on_the_host_feed_the_decode_ceiling(tmp_path, sim_inventory, ssh_fleet):
    """A checkpoint given as a folder on the host is inspected there during provision (headers only); its bytes
    per token reach cell.toml and the report's single-stream ceiling."""
    from agent.hostside.safetensors import inspect_checkpoint
    from agent.reporting.markdown import write_report

    from .test_inspect_build import build_qwen

    folder = build_qwen(str(tmp_path / "models" / "uns-fast"), "uns-fast")  # the simulator serves it as uns-fast
    path = write_spec(tmp_path, "headers", backends=("marlin",))
    path.write_text(path.read_text().replace('model = "uns-fast"', f'model = "{folder}"'))
    spec = load_spec(path)
    run_sweep(spec, sim_inventory, load_inventory(sim_inventory, limit="spark-b"), tmp_path / "results")
    (cell,) = correctness.judged_cells(tmp_path / "results" / "headers")
    assert cell["verdict"] == "valid", cell["verdict_reasons"]
    assert cell["checkpoint_info"]["bytes_per_token"] == inspect_checkpoint(folder)["bytes_per_token"] > 0
    write_report(tmp_path / "results" / "headers")
    text = (tmp_path / "results" / "headers" / "report.md").read_text()
    assert "no ceiling" not in text and "% of" in text


def test_a_second_controller_is_refused_with_the_holder_named(tmp_path, sim_inventory, ssh_fleet):
    """Another controller holds spark-a's host lock: our sweep refuses that host, names the holder, touches
    nothing of theirs, and still measures spark-b."""
    workdir = str(ssh_fleet.host("spark-a").workdir)
    holder = {
        "user": "alice",
        "controller_host": "alice-laptop",
        "controller_pid": 4242,
        "since": "2026-11-29T18:00:00Z",
        "sweep": "theirs",
        "cell_id": "feedfacecafe",
    }
    code = (
        "import sys, json, time; from agent.hostside import supervise as s\n"
        "fd = s.acquire_lock(sys.argv[1], json.loads(sys.argv[2])); print('locked', flush=True); time.sleep(600)\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, workdir, __import__("json").dumps(holder)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "locked"
        spec = load_spec(write_spec(tmp_path, "contended", backends=("marlin",)))
        # replicas=2: both hosts are asked for the cell, so spark-a meets the lock rather than spark-b taking it first
        outcome = run_sweep(spec, sim_inventory, load_inventory(sim_inventory), tmp_path / "results", replicas=2)
        a, b = outcome.hosts["spark-a"], outcome.hosts["spark-b"]
        assert "alice@alice-laptop pid 4242 since 2026-11-29T18:00:00Z" in a.error
        assert a.lost and not a.done
        assert len(b.done) == 1
        assert other.poll() is None, "the other controller's lock holder must be left alone"
    finally:
        other.kill()
        other.wait()


def test_a_busy_port_is_a_clear_cell_error_not_someone_elses_numbers(tmp_path, sim_inventory, ssh_fleet):
    """Whatever already listens on the host's server port must not be measured in place of our server."""
    import socket

    address = ssh_fleet.host("spark-b").address
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last server's TIME_WAIT is no squatter
    squatter.bind((address, 8000))
    squatter.listen()
    try:
        spec = load_spec(write_spec(tmp_path, "port-taken", backends=("marlin",)))
        outcome = run_sweep(spec, sim_inventory, load_inventory(sim_inventory, limit="spark-b"), tmp_path / "results")
    finally:
        squatter.close()
    assert not outcome.hosts["spark-b"].done and outcome.hosts["spark-b"].lost
    assert f"{address}:8000 is already in use" in outcome.hosts["spark-b"].error
    assert not list((tmp_path / "results").rglob("cell.toml")), "a host problem is not a finished (failed) cell"
