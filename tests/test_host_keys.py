"""Host keys are checked on every run, over real SSH: an unknown host and a changed key are refused before any task
runs, with one line and exit 2, and nothing is added to any known_hosts file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from .sshd_hosts import REPO, SIM_HOST_VARS, SshFleet, inventory_for

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "agent.cli"]
USER_KNOWN_HOSTS = Path(os.path.expanduser("~/.ssh/known_hosts"))
SPEC = """
[sweep]
name = "hostkeys"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[matrix]
moe_backend = ["marlin"]
concurrency = [1]
duration_s = 1
repeats = 1
""".format(digest="cd" * 32)


def _inventory(fleet: SshFleet, path: Path, known_hosts: Path | None) -> Path:
    """spark-a as a simulated Spark; with no known_hosts, the inventory says nothing at all about host keys."""
    inv = inventory_for(fleet, SIM_HOST_VARS)
    host = inv["all"]["children"]["sparks"]["hosts"]["spark-a"]
    del inv["all"]["children"]["sparks"]["hosts"]["spark-b"]
    host.pop("ansible_ssh_common_args")
    if known_hosts:
        host["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={known_hosts}"  # which file, not how strict
    path.write_text(yaml.safe_dump(inv))
    return path


def _snapshot(paths: list[Path]) -> dict[str, bytes | None]:
    return {str(p): p.read_bytes() if p.is_file() else None for p in paths}


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # A master connection that an earlier test opened to this session's sshd (ControlPersist) would carry these runs
    # without a new key exchange: each run gets SSH control sockets of its own, as a new controller would have.
    control_dir = tempfile.mkdtemp(prefix="cp-", dir="/tmp")
    env = dict(os.environ, PYTHONPATH=str(REPO), ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir)
    try:
        return subprocess.run(CLI + args, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)


def _refused(proc: subprocess.CompletedProcess, *parts: str) -> None:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("spark-agent: error:")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(errors) == 1 and all(part in errors[0] for part in parts), proc.stderr[-2000:]


@pytest.mark.parametrize("command", ["check", "sweep"])
def test_unknown_host_is_refused_and_nothing_is_learned(command, tmp_path, ssh_fleet):
    inventory = _inventory(ssh_fleet, tmp_path / "inv.yml", known_hosts=None)
    workdir = ssh_fleet.host("spark-a").workdir
    before, files_before = _snapshot([USER_KNOWN_HOSTS, ssh_fleet.known_hosts]), _tree(workdir)
    (tmp_path / "spec.toml").write_text(SPEC)
    args = ["sweep", "spec.toml", "--results", "results"] if command == "sweep" else ["check"]
    proc = _run([*args, "-i", str(inventory)], tmp_path)
    _refused(proc, "spark-a", "not in known_hosts", "ssh-keyscan -p", "known_hosts")
    assert _snapshot([USER_KNOWN_HOSTS, ssh_fleet.known_hosts]) == before  # no key was added anywhere
    assert _tree(workdir) == files_before  # no task ran on the host
    assert not (tmp_path / "results" / "hostkeys").exists()


@pytest.mark.parametrize("command", ["check", "sweep"])
def test_changed_host_key_is_refused_loudly(command, tmp_path, ssh_fleet):
    host = ssh_fleet.host("spark-a")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    kind, key = (tmp_path / "impostor.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[{host.address}]:{host.port} {kind} {key}\n")  # what we recorded is not what the host shows
    inventory = _inventory(ssh_fleet, tmp_path / "inv.yml", known_hosts=known)
    before, files_before = _snapshot([USER_KNOWN_HOSTS, known]), _tree(host.workdir)
    (tmp_path / "spec.toml").write_text(SPEC)
    args = ["sweep", "spec.toml", "--results", "results"] if command == "sweep" else ["check"]
    proc = _run([*args, "-i", str(inventory)], tmp_path)
    _refused(proc, "spark-a", "CHANGED", f"{known} line 1", "man-in-the-middle")
    assert _snapshot([USER_KNOWN_HOSTS, known]) == before
    assert _tree(host.workdir) == files_before


def test_known_host_through_the_inventory_is_accepted(tmp_path, ssh_fleet):
    """The fleet's own known_hosts, named by its inventory and nothing else: checking on, and the host passes."""
    inventory = _inventory(ssh_fleet, tmp_path / "inv.yml", known_hosts=ssh_fleet.known_hosts)
    proc = _run(["check", "-i", str(inventory)], tmp_path)
    assert "spark-agent: error" not in proc.stderr and "spark-a" in proc.stdout, proc.stderr[-2000:]
