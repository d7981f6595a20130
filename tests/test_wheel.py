"""The package as a user gets it: the wheel, built from the checkout, installed into a fresh venv in a temporary
folder outside the repository, then run from another folder: --version, demo, report, lint, attest. Nothing of the
checkout is on the path (tests/wheel_venv.user_env), so a file the wheel forgot fails here.

One Python (the one running pytest) keeps CI short; bench/bench_install.py --pythons checks 3.11-3.13."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from .wheel_venv import REPO, shared_install, user_env

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The venv's bin: the wheel and its dependencies, nothing else (built once per run, shared)."""
    return shared_install(tmp_path_factory)


def spark_agent(bin_dir: Path, cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "spark-agent"), *args],
        cwd=cwd,
        env=user_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_carries_what_the_controller_reads(installed):
    bin_dir = installed
    code = "from agent import paths; print(paths.DATA); print(paths.PLAYBOOKS / 'cell.yml')"
    done = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    data, cell = done.stdout.split()
    assert "site-packages" in data and Path(data).name == "data" and Path(cell).is_file()
    assert not str(data).startswith(str(REPO))


def test_demo_report_lint_attest_from_any_folder(installed, tmp_path):
    bin_dir = installed
    version = spark_agent(bin_dir, tmp_path, "--version")
    assert version.returncode == 0 and "vLLM versions its rules know" in version.stdout, version.stderr

    # its own port and work dir (~/.spark-agent/local-PORT): beside other demos and tests on this machine
    demo = spark_agent(bin_dir, tmp_path, "demo", "--duration", "1", "--port", str(free_port()))
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "## What to run" in demo.stdout and "report: results/quick/report.md" in demo.stdout, demo.stdout
    sweep = tmp_path / "results" / "quick"
    cells = sorted(p.parent for p in sweep.glob("localhost/*/cell.toml"))
    assert len(cells) == 2  # marlin and flashinfer_b12x, measured

    report = spark_agent(bin_dir, tmp_path, "report", "results/quick", "-o", "again")
    assert report.returncode == 0, report.stderr
    assert "## What to run" in (tmp_path / "again" / "report.md").read_text()

    (tmp_path / "launch.sh").write_text(
        "vllm serve org/model-NVFP4 --moe-backend marlin --gpu-memory-utilization 0.95\n"
    )
    lint = spark_agent(bin_dir, tmp_path, "lint", "launch.sh", "--gpu", "gb10")  # its rules, from the wheel
    assert lint.returncode == 1 and "[gb10-gpu-memory-utilization]" in lint.stdout, lint.stdout + lint.stderr

    attest = spark_agent(bin_dir, tmp_path, "attest", str(cells[0] / "server.log"), "--json")
    assert attest.returncode == 0, attest.stdout + attest.stderr
    assert json.loads(attest.stdout)["verdict"]["verdict"] == "valid"


def test_a_missing_extra_is_one_line_from_the_wheel(installed, tmp_path):
    bin_dir = installed
    done = spark_agent(bin_dir, tmp_path, "store", "info", "--store", "postgresql+psycopg://u@127.0.0.1:9/db")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("pip install 'spark-agent[postgres]'"), done.stderr


def test_a_sweep_over_ssh_hosts_from_the_wheel(installed, sim_inventory, tmp_path):
    """The installed controller pushes its packaged playbooks over real SSH (the test hosts, simulated Sparks). A
    packaged example typed as the README writes it (`examples/quick.toml`, from a folder without one), handed out
    with --detach: the collect command it prints is pasted as it is and brings the cells back (the record keeps the
    file that was used, not the path as typed)."""
    bin_dir = installed
    args = ["sweep", "examples/quick.toml", "-i", str(sim_inventory), "--duration", "1", "--results", "out"]
    handed = spark_agent(bin_dir, tmp_path, *args, "--limit", "spark-a", "--detach")
    assert handed.returncode == 0, handed.stderr[-3000:]
    [collect] = [line.split(":", 1)[1] for line in handed.stderr.splitlines() if line.strip().startswith("results:")]
    collected = spark_agent(bin_dir, tmp_path, *shlex.split(collect)[1:])
    assert collected.returncode == 0, collected.stderr[-3000:]
    cells = list((tmp_path / "out" / "quick" / "spark-a").glob("*/cell.toml"))
    assert len(cells) == 2


def test_a_user_outside_a_checkout_builds_quietly_and_runs_the_readme(installed, tmp_path):
    """The build prints no setuptools warning block; `examples/...` as the README writes them resolves to the
    packaged copy (said on the console); init writes per-host users and the fleet's known_hosts; lint --fix says
    what it left and that the file is unchanged."""
    log = (installed.parent.parent / "dist" / "build.log").read_text()
    assert "WARNING Package" not in log and "!!" not in log.split("\n"), log[-2000:]
    shown = spark_agent(installed, tmp_path, "env", "examples/quick.toml", "--host", "x", "--simulate-gpu", "gb10")
    assert shown.returncode == 0 and "using the packaged example" in shown.stderr, shown.stderr[-2000:]
    assert shown.stdout.count("uns-fast marlin") == 1
    init = spark_agent(
        installed, tmp_path, "init", "ops@192.0.2.10", "192.0.2.11", "--known-hosts", str(tmp_path / "known"),
        "--no-trust", "-o", "fleet.yml",
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    text = (tmp_path / "fleet.yml").read_text()
    assert "ansible_user: ops" in text and f"UserKnownHostsFile={tmp_path / 'known'}" in text
    launch = tmp_path / "launch.sh"
    launch.write_text("VLLM_USE_FLASHINFER_MOE_FP4=1 vllm serve m --moe-backend flashinfer_b12x\n")
    fixed = spark_agent(installed, tmp_path, "lint", str(launch), "--vllm-version", "0.24.0", "--fix")
    assert "flashinfer_cutlass" not in fixed.stdout and "is unchanged" in fixed.stdout, fixed.stdout
