"""`spark-agent trust` and `spark-agent logs`, over real SSH to the sshd test hosts.

trust: the fingerprint shown is the one ssh-keygen computes from the host's key file; the line it records lets a
strict ssh in; a key that differs from the recorded one is refused and nothing is written.
logs: the server log of the running (or named) cell comes back without terminal escapes; --follow streams lines
appended later, and Ctrl-C ends it with no tail left on the host.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from .sshd_hosts import REPO, SshFleet, inventory_for
from .terminal import ctrl_c_as_on_a_terminal

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "agent.cli"]
CELL = "0123456789ab"


def _cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), cwd=REPO, capture_output=True, text=True, input=stdin, timeout=timeout)


def _inventory_with(fleet: SshFleet, tmp_path: Path, known_hosts: Path) -> Path:
    inv = inventory_for(fleet)
    for host_vars in inv["all"]["children"]["sparks"]["hosts"].values():
        host_vars["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _keygen_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def test_trust_records_the_key_ssh_then_accepts(ssh_fleet, tmp_path):
    known = tmp_path / "ssh" / "known_hosts"
    inv = _inventory_with(ssh_fleet, tmp_path, known)
    refused = _cli("trust", "spark-a", "-i", str(inv), stdin="")
    assert refused.returncode == 2 and "--yes" in refused.stderr.strip().splitlines()[-1]
    assert not known.exists(), "nothing is recorded without confirmation"

    done = _cli("trust", "sparks", "-i", str(inv), "--yes")
    assert done.returncode == 0, done.stderr
    for name in ("spark-a", "spark-b"):
        expected = _keygen_fingerprint(ssh_fleet.root / f"hostkey_{name}.pub")
        assert any(line.startswith(name) and expected in line for line in done.stdout.splitlines()), done.stdout
    assert len(known.read_text().splitlines()) == 2
    assert oct(known.stat().st_mode & 0o777) == "0o600"

    h = ssh_fleet.host("spark-a")
    strict = subprocess.run(
        ["ssh", "-i", str(ssh_fleet.client_key), "-p", str(h.port), "-o", f"UserKnownHostsFile={known}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{h.address}", "echo in"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert strict.stdout.strip() == "in", strict.stderr

    again = _cli("trust", "spark-a", "-i", str(inv), "--yes")
    assert again.returncode == 0 and "already trusted" in again.stdout
    assert len(known.read_text().splitlines()) == 2, "a trusted key is not recorded twice"


def test_trust_refuses_a_changed_key(ssh_fleet, tmp_path):
    known = tmp_path / "known_hosts"
    h = ssh_fleet.host("spark-a")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    known.write_text(f"[{h.address}]:{h.port} {other[0]} {other[1]}\n")
    before = known.read_text()
    inv = _inventory_with(ssh_fleet, tmp_path, known)
    res = _cli("trust", "spark-a", "spark-b", "-i", str(inv), "--yes")
    assert res.returncode == 2
    message = res.stderr.strip().splitlines()[-1]
    assert "spark-a" in message and "DIFFERENT key" in message and "ssh-keygen -R" in message
    assert known.read_text() == before, "nothing is recorded, not even for the good host"


def test_trust_and_logs_refuse_unknown_hosts(ssh_fleet):
    for args, named in ((["trust", "spark-zz", "--yes"], "spark-zz"), (["logs", "spark-zz"], "spark-zz"),
                        (["logs", "sparks"], "one host")):  # fmt: skip
        res = _cli(*args, "-i", str(ssh_fleet.inventory))
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and named in res.stderr, res.stderr


def _fake_running_cell(fleet: SshFleet, text: bytes) -> Path:
    """A server record and log on the host, as a running cell leaves them (the host's own files)."""
    workdir = fleet.host("spark-a").workdir
    log = workdir / "runs" / CELL / "server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(text)
    (workdir / "state").mkdir(exist_ok=True)
    (workdir / "state" / "server.json").write_text(json.dumps({"cell_id": CELL, "log": "/etc/shadow"}))
    return log


def test_logs_shows_the_running_cell_without_terminal_escapes(ssh_fleet):
    _fake_running_cell(ssh_fleet, b"INFO first\n\x1b]0;owned\x07title \x1b[31mred\x1b[0m\r\nINFO last\n")
    res = _cli("logs", "spark-a", "-i", str(ssh_fleet.inventory), "-n", "2")
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout and "\r" not in res.stdout
    assert res.stdout.splitlines() == ["]0;ownedtitle [31mred[0m", "INFO last"]
    named = _cli("logs", "spark-a", CELL, "-i", str(ssh_fleet.inventory))
    assert named.returncode == 0 and "INFO first" in named.stdout
    bad = _cli("logs", "spark-a", "../../etc", "-i", str(ssh_fleet.inventory))
    assert bad.returncode == 2 and "12 hex digits" in bad.stderr
    absent = _cli("logs", "spark-a", "fedcba987654", "-i", str(ssh_fleet.inventory))
    assert absent.returncode == 2 and "no server log" in absent.stderr


def _tails_of(log: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "tail" and str(log) in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_logs_follow_streams_new_lines_and_ctrl_c_leaves_nothing(ssh_fleet):
    log = _fake_running_cell(ssh_fleet, b"INFO started\n")
    proc = subprocess.Popen(
        CLI + ["logs", "spark-a", "--follow", "-i", str(ssh_fleet.inventory)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_as_on_a_terminal,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "INFO started" in proc.stdout.readline()
        with log.open("a") as f:
            f.write("INFO appended later\n")
        assert "INFO appended later" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while _tails_of(log) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _tails_of(log), "Ctrl-C must end the tail on the host too"


@pytest.mark.attack("logs: bidi overrides and zero-width characters in a server log reorder or hide what is shown")
def test_logs_drops_bidi_and_zero_width_characters(ssh_fleet):
    hidden = "\u202e\u2066\u2069\u200b\u200d\ufeff\u061c\u200f"
    _fake_running_cell(ssh_fleet, f"INFO ok {hidden}txt.exe\nINFO a\u200bdmin\n".encode())
    res = _cli("logs", "spark-a", "-i", str(ssh_fleet.inventory), "-n", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["INFO ok txt.exe", "INFO admin"]


@pytest.mark.attack("trust: a key that contradicts the system's known_hosts (an admin's pin) is recorded anyway")
def test_trust_honours_the_global_known_hosts(ssh_fleet, tmp_path):
    known, system = tmp_path / "known_hosts", tmp_path / "ssh_known_hosts"
    h = ssh_fleet.host("spark-a")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    system.write_text(f"[{h.address}]:{h.port} {other[0]} {other[1]}\n")  # pinned: a key the host does not have
    inv = _inventory_with(ssh_fleet, tmp_path, known)
    text = inv.read_text().replace(
        "-o StrictHostKeyChecking=yes", f"-o GlobalKnownHostsFile={system} -o StrictHostKeyChecking=yes"
    )
    inv.write_text(text)
    res = _cli("trust", "spark-a", "-i", str(inv), "--yes")
    assert res.returncode == 2, res.stdout + res.stderr
    message = res.stderr.strip().splitlines()
    assert len(message) == 1 and str(system) in message[0] and "DIFFERENT key" in message[0], message
    assert not known.exists(), "nothing recorded"
    # the host's real key pinned there: already trusted, nothing recorded in the user's file either
    real = (ssh_fleet.root / "hostkey_spark-a.pub").read_text().split()
    system.write_text(f"[{h.address}]:{h.port} {real[0]} {real[1]}\n")
    again = _cli("trust", "spark-a", "-i", str(inv), "--yes")
    assert again.returncode == 0 and "already trusted" in again.stdout, again.stderr
    assert not known.exists()
