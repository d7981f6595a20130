"""Server starts end to end, through the CLI on an sshd host running the simulator with 10% between-start noise
(SPARK_SIM_START_NOISE=0.10): two checkpoints 8% apart (nv vs uns-fast, calibration.toml). With one start each the
report names no winner and says what deciding costs; with `server_starts = 2` every start is its own server (its
own folder and server log), the host ran them interleaved, and the report states the machine's noise floor."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .sshd_hosts import start_fleet, stop_sim_fleet, write_sim_inventory

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]
QUICK = REPO / "examples" / "quick.toml"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """One sshd host (port 8235: never another module's) whose simulator draws a speed per server start."""
    fleet = start_fleet(tmp_path_factory.mktemp("starts"), count=1)
    try:
        write_sim_inventory(fleet, 8235, lambda _: {"SPARK_SIM_START_NOISE": "0.10", "SPARK_SIM_SEED": "35"})
        yield fleet
    finally:
        stop_sim_fleet(fleet)


def spec(tmp: Path, starts: int) -> Path:
    """quick.toml on marlin only, checkpoints nv and uns-fast, `starts` server starts each."""
    text = QUICK.read_text().replace('name = "quick"', f'name = "starts{starts}"')
    text = text.replace('moe_backend = ["marlin", "flashinfer_b12x"]', 'moe_backend = ["marlin"]')
    text = text.replace("[server]", '[[checkpoints]]\nname = "nv"\nmodel = "nv"\nquant = "nvfp4"\n\n[server]')
    text = text.replace("repeats = 3", f"repeats = 3\nserver_starts = {starts}")
    path = tmp / f"starts{starts}.toml"
    path.write_text(text)
    return path


def sweep_and_report(fleet, tmp: Path, starts: int) -> tuple[Path, str]:
    out = tmp / f"out{starts}"
    args = ["sweep", str(spec(tmp, starts)), "-i", str(fleet.inventory), "--results", str(out), "--duration", "0.5"]
    run = subprocess.run([*CLI, *args], cwd=tmp, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    folder = out / f"starts{starts}"
    rep = subprocess.run([*CLI, "report", str(folder)], cwd=tmp, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    return folder, (folder / "report.md").read_text()


def test_one_start_each_names_no_winner_under_25_percent_and_says_the_cost(tmp_path, host):
    _, report = sweep_and_report(host, tmp_path, 1)
    verdict = re.search(r"\*\*(Run .+?|Undecided)\.\*\*", report)
    assert verdict and verdict.group(1) == "Undecided", report[:3000]
    assert "between server starts unknown" in report
    # a leader inside the start noise, or no order: the price of settling it, in starts and minutes
    assert "1 more start each measures it (2 starts ×" in report or "more starts each decide" in report, report[:3000]


def test_two_starts_run_interleaved_each_its_own_server_and_give_the_noise_floor(tmp_path, host):
    folder, report = sweep_and_report(host, tmp_path, 2)
    cells = [tomllib.loads(p.read_text()) for p in folder.glob("*/*/cell.toml")]
    assert len(cells) == 4  # two configs x two starts
    for cell in cells:
        assert (folder / cell["host"] / cell["cell_id"] / "server.log").stat().st_size > 0
    order = [c["config"].get("server_start", 1) for c in sorted(cells, key=lambda c: c["started_at"])]
    assert order == [1, 1, 2, 2]  # A1 B1 A2 B2: every start 1 before any start 2
    assert "Noise floor (A/A" in report and "between starts" in report and "between windows" in report
