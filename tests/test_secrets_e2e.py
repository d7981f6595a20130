"""Secrets end to end, over real SSH against the simulated Spark: a token vaulted in the inventory (spark_serve_env)
and a password in the spec's [env] reach the server's real environment, and nowhere else: not on any process's
command line while the sweep runs, not in results/, the report, the exports, the log lines or the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from .sshd_hosts import REPO, SIM_HOST_VARS, inventory_for

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "agent.cli"]
VAULT_PASSWORD = "correct horse battery staple"
VAULTED = "vaulted-inventory-token-3141"  # no known token shape: only the vault marks it secret
SPEC_SECRET = "spec-password-value-2718"
HF = "hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432"  # a shape, under a name that says nothing
SECRETS = (VAULTED, SPEC_SECRET, HF)

SPEC = """
[sweep]
name = "secrets"
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
warmup = 0
repeats = 1
[env]
DB_PASSWORD = "{spec_secret}"
EXTRA_NOTE = "{hf}"
""".format(digest="ef" * 32, spec_secret=SPEC_SECRET, hf=HF)


def _vaulted_inventory(fleet, path: Path, env_dump: Path) -> Path:
    """spark-a; its engine is the simulator behind a shell that first writes the environment it really got."""
    serve_cmd = ["/bin/sh", "-c", 'env > "$0"; exec "$@"', str(env_dump), *SIM_HOST_VARS["spark_serve_cmd"]]
    inv = inventory_for(
        fleet,
        {**SIM_HOST_VARS, "spark_serve_cmd": serve_cmd, "spark_serve_env": {"PYTHONPATH": str(REPO), "HF_TOKEN": "@@"}},
    )
    del inv["all"]["children"]["sparks"]["hosts"]["spark-b"]
    ciphertext = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(VAULTED).decode()
    lines = yaml.safe_dump(inv).splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("HF_TOKEN: '@@'"))
    indent = " " * (len(lines[at]) - len(lines[at].lstrip()) + 2)
    lines[at] = lines[at].replace("'@@'", "!vault |")
    lines[at + 1 : at + 1] = [indent + part for part in ciphertext.splitlines()]
    path.write_text("\n".join(lines) + "\n")
    return path


class CmdlineWatch:
    """Reads every process's command line over and over while the sweep runs: any secret seen there is a leak."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.scans = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                self.seen += [f"{pid}: {cmdline[:300]}" for s in SECRETS if s in cmdline]
            self.scans += 1
            self.stop.wait(0.02)

    def __enter__(self) -> CmdlineWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _leaks(folder: Path) -> list[str]:
    out = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            out += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return out


def test_secrets_reach_the_server_and_nothing_else(tmp_path, ssh_fleet):
    env_dump = tmp_path / "server-env.txt"
    inventory = _vaulted_inventory(ssh_fleet, tmp_path / "inv.yml", env_dump)
    password_file = tmp_path / "vault-password"
    password_file.write_text(VAULT_PASSWORD + "\n")
    password_file.chmod(0o600)
    (tmp_path / "spec.toml").write_text(SPEC)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    base = [*CLI, "sweep", "spec.toml", "-i", str(inventory), "--results", "results", "--no-progress"]

    without = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert without.returncode == 2 and "--vault-password-file" in without.stderr  # said before any host is touched
    assert not env_dump.exists()

    with CmdlineWatch() as watch:
        proc = subprocess.run(
            [*base, "--vault-password-file", str(password_file), "--log-format", "json"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert watch.scans > 10 and watch.seen == []

    served = dict(line.split("=", 1) for line in env_dump.read_text().splitlines() if "=" in line)
    assert (served["HF_TOKEN"], served["DB_PASSWORD"], served["EXTRA_NOTE"]) == (VAULTED, SPEC_SECRET, HF)

    results = tmp_path / "results"
    cells = list(results.rglob("cell.toml"))
    assert len(cells) == 1 and "%REDACTED%" in cells[0].read_text()
    assert "%REDACTED%" in (cells[0].parent / "launch.txt").read_text()
    for command in (["report", "results/secrets"], ["export", "results/secrets"]):
        out = subprocess.run([*CLI, *command], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert not any(s in out.stdout + out.stderr for s in SECRETS)
    assert _leaks(results) == []
    assert not any(s in proc.stdout + proc.stderr for s in SECRETS)
    assert any(
        json.loads(line).get("event") == "cell_done" for line in proc.stderr.splitlines() if line.startswith("{")
    )
    workdir = ssh_fleet.host("spark-a").workdir
    assert _leaks(workdir / "runs") == []  # launch.txt on the host is masked too
    env_files = list((workdir / "env").glob("*.env"))  # the one place on the host the spec's secret is written
    assert env_files and all(f.stat().st_mode & 0o777 == 0o600 for f in env_files)
